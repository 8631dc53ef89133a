"""Forecast accuracy and scale (issue 3): protocol "tidal-24h" on ../shared/data, then the fleet
scale targets on synthetic series.

Accuracy follows the reference scorer `../shared/eval/bench_forecast.py` exactly — same suite
(`suite.py`), origins, 28-day history cap, scale and scores, and the scorer's own seasonal naive,
VPA histogram and statsforecast MSTL as peers — so that its numbers and ours agree. Tidewise's
models run in-process through `predictor.pipeline.forecasting.forecast_history`, called once per origin with
the history of every series, as `tidewise forecast` is by the scorer.

    .venv/bin/python -m benchmarks.run --only forecast            # full
    .venv/bin/python -m benchmarks.run --only forecast --quick    # smaller suite, smoke run
    cd ../shared/eval && ../../main/.venv/bin/python bench_forecast.py dev \
        --project "../../main/.venv/bin/tidewise forecast" --models seasonal_naive,vpa_histogram,statsforecast_mstl
"""
from __future__ import annotations

import json
import os
import pickle
import sys
import time
from typing import Callable, NamedTuple

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
EVAL = os.environ.get("TIDEWISE_EVAL", os.path.join(HERE, "..", "..", "shared", "eval"))
QS = (0.5, 0.9, 0.95, 0.99)
H = 288
MAX_HIST = 28 * 288


def _ref():
    if EVAL not in sys.path:
        sys.path.insert(0, EVAL)
    import bench_forecast  # the reference scorer: protocol, peers and scores come from it
    import suite

    return bench_forecast, suite


def _history_of(hists: dict[str, pd.Series]):
    from predictor.history import History

    series = {}
    for k, h in hists.items():
        h = h.loc[h.first_valid_index():h.last_valid_index()] if h.notna().any() else h.iloc[:0]
        if len(h) >= 2:
            regular = h.asfreq("5min")
            regular.index = pd.DatetimeIndex(regular.index).as_unit("ns")  # the scorer's may be µs (pandas 3)
            series[k] = regular
    return History(series, pd.Timedelta("5min"))


def tidewise_runner(model: str = "auto", **kw) -> Callable[[dict[str, pd.Series], pd.Timestamp], dict[str, np.ndarray]]:
    """One call per origin with every series' history, like the scorer calls `tidewise forecast`."""
    from predictor.pipeline.forecasting import ForecastRequest, forecast_history

    def run(hists: dict[str, pd.Series], origin: pd.Timestamp) -> dict[str, np.ndarray]:
        hist = _history_of(hists)
        req = ForecastRequest(pd.Timedelta(days=1), pd.Timedelta("5min"), QS, model, origin, **kw)
        fcs = forecast_history(hist, req)
        return {f.series: f.values for f in fcs}

    return run


def _in_child(fn: Callable[[], object]) -> tuple[object, float]:
    """Run fn in a forked child; return its result and the child's peak RSS in MiB."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            payload = pickle.dumps(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            payload = pickle.dumps(("error", repr(exc)))
        with os.fdopen(w, "wb") as fh:
            fh.write(payload)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    _, _, ru = os.wait4(pid, 0)
    status, value = pickle.loads(data)
    if status != "ok":
        raise RuntimeError(value)
    return value, ru.ru_maxrss / 1024


class _Origins(NamedTuple):
    """The reference protocol's origins per series, each series' error scale and the day that came."""
    data: dict[str, pd.Series]
    plan: dict[str, list[pd.Timestamp]]
    scale: dict[str, float]
    truth: dict[tuple[str, pd.Timestamp], np.ndarray]


def _origins(data: dict[str, pd.Series], bf) -> _Origins:
    plan = {k: bf.origins_of(s) for k, s in data.items()}
    plan = {k: o for k, o in plan.items() if o}
    scale = {k: float(np.nanmean(np.abs(data[k][: o[0]].to_numpy()[-MAX_HIST:]))) or 1.0 for k, o in plan.items()}
    truth = {(k, o): data[k][(data[k].index >= o) & (data[k].index < o + pd.Timedelta("1D"))].to_numpy()
             for k, origs in plan.items() for o in origs}
    return _Origins(data, plan, scale, truth)


def _score_peer(model: Callable, org: _Origins, bf):
    """A reference peer, one series and origin at a time, as the scorer runs it."""
    sc, cv, secs, n = {}, {}, 0.0, 0
    for k, origs in org.plan.items():
        s = org.data[k]
        for o in origs:
            y = org.truth[(k, o)]
            if len(y) < H:
                continue
            hist = s[s.index < o].iloc[-MAX_HIST:]
            t = time.perf_counter()
            f = model(hist)
            secs += time.perf_counter() - t
            n += 1
            sc.setdefault(k, []).append(bf.pinball(y, f) / org.scale[k])
            cv.setdefault(k, []).append(np.nanmean(y <= f[:, 2]))
    return sc, cv, secs, n, {}


def _score_ours(runner: Callable, org: _Origins, bf):
    """A Tidewise runner, one call per origin with every series' history."""
    sc, cv, secs, n, models = {}, {}, 0.0, 0, {}
    for o in sorted({o for v in org.plan.values() for o in v}):
        keys = [k for k, v in org.plan.items() if o in v]
        hists = {k: org.data[k][org.data[k].index < o].iloc[-MAX_HIST:] for k in keys}
        t = time.perf_counter()
        fc = runner(hists, o)
        secs += time.perf_counter() - t
        for k in keys:
            y = org.truth[(k, o)]
            if len(y) < H:
                continue
            n += 1
            f = fc.get(k)
            if f is None or np.isnan(f).any():
                continue
            sc.setdefault(k, []).append(bf.pinball(y, f) / org.scale[k])
            cv.setdefault(k, []).append(np.nanmean(y <= f[:, 2]))
    return sc, cv, secs, n, models


def evaluate(data: dict[str, pd.Series], peers: list[str], ours: dict[str, Callable], bf) -> dict:
    """Every peer and every Tidewise runner on the same origins, each in a forked child (peak RSS)."""
    org = _origins(data, bf)
    raw = {}
    for m in peers:
        raw[m] = _in_child(lambda m=m: _score_peer(bf.MODELS[m], org, bf))
    for m, runner in ours.items():
        raw[m] = _in_child(lambda runner=runner: _score_ours(runner, org, bf))
    return _summarise(raw, len(org.plan), sum(len(v) for v in org.plan.values()))


def _summarise(raw: dict, n_series: int, n_origins: int) -> dict:
    """Per model: mean scaled pinball per quantile, geo-mean pinball@0.95 relative to seasonal naive."""
    per = {m: {k: np.nanmean(v, axis=0) for k, v in r[0][0].items()} for m, r in raw.items()}
    base = per.get("seasonal_naive")
    out = {"series": n_series, "origins": n_origins, "models": {}}
    for m, ((sc, cv, secs, n, _), rss) in raw.items():
        arr = np.array(list(per[m].values()))
        r = [per[m][k][2] / base[k][2] for k in per[m] if base and k in base and base[k][2] > 0 and np.isfinite(per[m][k][2])]
        out["models"][m] = {
            "scaled_pinball": [float(np.nanmean(arr[:, j])) for j in range(len(QS))],
            "rel95": float(np.exp(np.mean(np.log(np.maximum(r, 1e-9))))) if r else None,
            "coverage": float(np.nanmean([np.mean(v) for v in cv.values()])),
            "seconds": secs,
            "sec_per_series": secs / max(1, n),
            "peak_mib": rss,
            "per_series_rel95": {k: float(per[m][k][2] / base[k][2]) for k in per[m] if base and k in base and base[k][2] > 0},
            "missing": out["series"] - len(per[m]),
        }
    return out


def accuracy_table(res: dict) -> str:
    rows = ["| model | pinball q0.5 | q0.9 | q0.95 | q0.99 | rel. pinball@0.95 vs seasonal naive (geo-mean) | coverage q0.95 | s / series-origin | peak MiB |",
            "|---|---|---|---|---|---|---|---|---|"]
    for m, r in res["models"].items():
        p = r["scaled_pinball"]
        rel = f"{r['rel95']:.3f}" if r["rel95"] is not None else "–"
        rows.append(f"| {m} | {p[0]:.4f} | {p[1]:.4f} | {p[2]:.4f} | {p[3]:.4f} | {rel} | {r['coverage']:.3f} | "
                    f"{r['sec_per_series']:.3f} | {r['peak_mib']:.0f} |")
    return "\n".join(rows)


def run_accuracy(quick: bool, ours: dict[str, Callable] | None = None, peers: list[str] | None = None) -> dict:
    bf, suite = _ref()
    data = suite.dev()
    if quick:
        data = dict(list(data.items())[::4])
    peers = peers if peers is not None else ["seasonal_naive", "vpa_histogram", "statsforecast_mstl"]
    if ours is None:
        ours = {"tidewise auto": tidewise_runner("auto")}
    return evaluate(data, peers, ours, bf)


def run(quick: bool) -> str:
    res = run_accuracy(quick)
    parts = ["## Forecast accuracy (protocol tidal-24h, `dev` suite)\n",
             f"{res['series']} series, {res['origins']} origins. " + __doc__.split("\n\n", 2)[1] + "\n",
             accuracy_table(res), ""]
    sc = run_scale(quick)
    parts += ["## Forecast scale (synthetic fleet)\n",
              "Synthetic tidal series from `predictor.sources.synthetic`; serving uses renamed, rescaled copies "
              "of the trained series and a registry listing each copy with its original's choice. "
              "`.venv/bin/python -m benchmarks.run --only forecast`.\n",
              scale_table(sc), "", f"Models chosen at training: {sc['train_models']}.", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    import json

    from predictor.models.gbm import LIGHTGBM_PARAMS

    # `auto-lightgbm`: auto with the opt-in LightGBM global model (issue 12)
    which = sys.argv[1:] or ["auto"]
    res = run_accuracy("--quick" in which,
                       {f"tidewise {m}": tidewise_runner("auto", global_params=LIGHTGBM_PARAMS) if m == "auto-lightgbm"
                        else tidewise_runner(m) for m in which if not m.startswith("--")},
                       peers=["seasonal_naive"])
    print(accuracy_table(res))
    for m, r in res["models"].items():
        print(m, json.dumps({k: round(v, 3) for k, v in sorted(r["per_series_rel95"].items())}))


# ---- scale ---------------------------------------------------------------------------------------

def _synthetic_history(n_series: int, days: float, seed: int = 11):
    """n_series synthetic series (cpu and memory of n_series/2 workloads) ending at a midnight."""
    from predictor.history import history_from_frame
    from predictor.sources.synthetic import generate_cluster

    cluster = generate_cluster(seed=seed, workloads=max(1, n_series // 2), namespaces=6, nodes=50, days=days,
                               end="2024-09-02")
    return history_from_frame(cluster.history(), pd.Timedelta("5min"), source="synthetic")


def _replicate(history, copies: int):
    """`copies` renamed copies of every series, each scaled and shifted by a seeded factor."""
    from predictor.history import History

    rng = np.random.default_rng(5)
    out = {}
    for c in range(copies):
        for k, y in history.series.items():
            ns, rest = k.split("/", 1)
            out[f"{ns}-{c}/{rest}"] = y * float(rng.uniform(0.5, 2.0))
    return History(out, history.step)


def run_scale(quick: bool) -> dict:
    """Train on n_train synthetic series, then serve n_serve copies in-process and through the CLI."""
    import logging
    import shutil
    import tempfile

    n_train, n_serve = (100, 1000) if quick else (1000, 10000)
    logging.getLogger("predictor.pipeline").setLevel(logging.ERROR)  # one fallback line per series otherwise
    res: dict = {"n_train": n_train, "n_serve": n_serve}
    work = tempfile.mkdtemp(prefix="tidewise-scale-")
    try:
        t = time.perf_counter()
        hist = _synthetic_history(n_train, 28)
        res["generate_s"] = time.perf_counter() - t
        res["points"] = int(sum(len(y) for y in hist.series.values()))
        res.update(_train_timings(hist, os.path.join(work, "reg")))
        big, serve_dir = _serving_fleet(hist, os.path.join(work, "reg"), os.path.join(work, "serve"), n_serve)
        res.update(_serve_timings(big, serve_dir))
        # the same through the command line, file in and file out; 8 days of history to keep the
        # input (23M rows) within memory — series whose stored model needs two weeks fall back to
        # the decaying histogram there, as the forecast notes say
        inp, out = os.path.join(work, "recent.parquet"), os.path.join(work, "forecast.csv")
        short = big.window(big.end - pd.Timedelta(days=8), None)
        del big
        short.to_long().to_parquet(inp, index=False)
        del short
        res.update(_cli_timings(inp, out, serve_dir))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return res


def _train_timings(hist, reg_dir: str) -> dict:
    """A first training run, then the same again (incremental: nothing changed), each in a child."""
    from training.pipeline import TrainSettings, train

    def do_train():
        t0 = time.perf_counter()
        r = train(hist, reg_dir, TrainSettings(jobs=2))
        return time.perf_counter() - t0, r.models, len(r.refitted)

    (secs, models, refitted), rss = _in_child(do_train)
    res = dict(train_s=secs, train_peak_mib=rss, train_models=models, refitted=refitted)

    def do_incremental():
        t0 = time.perf_counter()
        r = train(hist, reg_dir, TrainSettings(jobs=2))
        return time.perf_counter() - t0, len(r.refitted), len(r.carried)

    (secs, refit2, carried2), rss = _in_child(do_incremental)
    res.update(incremental_s=secs, incremental_refitted=refit2, incremental_carried=carried2)
    return res


def _serving_fleet(hist, reg_dir: str, serve_dir: str, n_serve: int):
    """n_serve series = copies of the trained ones under other namespaces, with a registry that
    lists each copy with its original's choice (the serving cost is measured, not the training)."""
    from predictor.registry import load_version, write_version

    copies = max(1, n_serve // len(hist.series))
    # 15 days: enough for every stored model (weekly seasonal naive needs two weeks)
    recent = hist.window(hist.end - pd.Timedelta(days=15), None)
    big = _replicate(recent, copies)
    reg = load_version(reg_dir)
    entries = {}
    for k in big.series:
        ns, rest = k.split("/", 1)
        entries[k] = reg.series[ns.rsplit("-", 1)[0] + "/" + rest]
    write_version(serve_dir, quantiles=reg.quantiles, series=entries, data_window=(str(recent.end), str(recent.end)),
                  step_seconds=300, global_model=reg.global_model)
    return big, serve_dir


def _serve_timings(big, serve_dir: str) -> dict:
    from predictor.pipeline.forecasting import ForecastRequest
    from predictor.pipeline.serving import forecast_with_registry

    def do_serve():
        t0 = time.perf_counter()
        fcs = forecast_with_registry(serve_dir, big, ForecastRequest(pd.Timedelta(days=1), pd.Timedelta("5min")))
        return time.perf_counter() - t0, len(fcs), bool(all(np.isfinite(f.values).all() for f in fcs))

    (secs, n, ok), rss = _in_child(do_serve)
    return dict(serve_s=secs, served=n, serve_ok=ok, serve_peak_mib=rss, serve_series=len(big.series))


def _cli_timings(inp: str, out: str, serve_dir: str) -> dict:
    """`tidewise forecast --registry` end to end, in a subprocess: wall-clock and peak RSS."""
    import subprocess

    res: dict = {}
    exe = os.path.join(os.path.dirname(sys.executable), "tidewise")
    # through a fresh wrapper whose only child is the command: its children's peak RSS is then the
    # command's (or its largest worker's), not that of an earlier child of this process (training)
    wrapper = ("import json, resource, subprocess, sys, time\n"
               "t = time.perf_counter()\n"
               "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
               "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
               "print(json.dumps({'s': time.perf_counter() - t, 'cpu': ru.ru_utime + ru.ru_stime,\n"
               "                  'peak_kib': ru.ru_maxrss, 'rc': r.returncode, 'err': r.stderr[-500:]}))\n")
    r = subprocess.run([sys.executable, "-c", wrapper, exe, "forecast", "--input", inp, "--output", out,
                        "--registry", serve_dir], capture_output=True, text=True, check=True)
    m = json.loads(r.stdout.strip().splitlines()[-1])
    res["cli_s"] = m["s"]
    res["cli_cpu_s"] = m["cpu"]  # CPU of the command and its workers: load-independent
    res["cli_ok"] = m["rc"] == 0
    res["cli_peak_mib"] = m["peak_kib"] / 1024
    if m["rc"] != 0:
        res["cli_error"] = m["err"]
    return res


def scale_table(s: dict) -> str:
    lines = [
        "| step | series | seconds | peak MiB | target |",
        "|---|---|---|---|---|",
        f"| train: backtest + selection + fit (first run, `--jobs 2`) | {s['n_train']} x 28 d @ 5 min | {s['train_s']:.0f} | {s['train_peak_mib']:.0f} (main process) | 1,000 series <= 600 s, <= 4 GiB |",
        f"| train again, nothing changed (incremental: {s['incremental_refitted']} refitted, {s['incremental_carried']} carried) | {s['n_train']} | {s['incremental_s']:.0f} | – | – |",
        f"| forecast with the registry, in-process (`forecast_with_registry`) | {s['serve_series']} (15 d of history each) | {s['serve_s']:.1f} | {s['serve_peak_mib']:.0f} | 10,000 series <= 60 s |",
        f"| `tidewise forecast --registry` end to end (Parquet in, CSV out; CPU s of it and its workers: "
        f"{s.get('cli_cpu_s', float('nan')):.0f}) | {s['serve_series']} (8 d each) | {s['cli_s']:.1f} | "
        f"{s['cli_peak_mib']:.0f} | 10,000 series <= 60 s, <= 4 GiB |",
    ]
    return "\n".join(lines)
