"""Serving benchmarks (issue 5): decision quality on real traces and the scale of one run.

1. VPA: Tidewise (hourly forecast q + margin over the next hour) versus the stock VPA recommender's
   default (decaying histogram, 24 h half-life, p90, +15%), both recomputed hourly from the past only,
   on the reference suite `dev` of ../shared/eval (the traces in ../shared/data, read in place), over
   the same evaluation windows and with the same scores as ../shared/eval/bench_decisions.py.
   Target: slack <= 0.8 x the default's at a violation rate no higher.
2. HPA: predictive floor (minReplicas from the forecast, 2-minute lead) under the Kubernetes HPA rule
   versus that rule alone (tolerance 0.1, 5-minute scale-down stabilisation, 2-minute start-up).
   Target: >= 70% fewer over-target minutes at <= 1.05 x the average replicas.
3. Scale: run_once for 10,000 workloads and 500 nodes, offline (cluster-state file, file sink).
   Target: <= 10 s and <= 2 GiB.

    python -m benchmarks.run --only serving [--quick]
    python -m benchmarks.serving [--quick] [--part vpa,hpa,scale]   # prints the section
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVAL = os.environ.get("SHARED_EVAL", os.path.join(ROOT, "..", "shared", "eval"))


def _reference():
    """The reference scorer and suite, loaded from ../shared/eval (never copied)."""
    if not os.path.isdir(EVAL):
        raise RuntimeError(f"the reference scorers are expected at {EVAL}")
    sys.path.insert(0, EVAL)
    try:
        import suite  # noqa: F401  (bench_decisions imports it by name)
        spec = importlib.util.spec_from_file_location("bench_decisions", os.path.join(EVAL, "bench_decisions.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.pop(0)
    return mod, sys.modules["suite"]


def decision_quality(quick: bool, vpa_grid: list[tuple[float, float]] | None = None,
                     hpa_quantiles: tuple[float, ...] = (0.5, 0.9)) -> dict[str, Any]:
    """Both replays on every series of the suite; per-series scores are also printed on stderr."""
    from autoscaler.logic.hpa import hpa_scores
    from studies.replay.decisions import DailyChoiceForecaster, replay_hpa, replay_vpa
    from autoscaler.settings import HpaSettings, VpaSettings

    ref, suite = _reference()
    data = suite.SUITES["dev"]()
    windows = {k: w for k, s in data.items() if (w := ref.window(s)) and np.nanmin(s.to_numpy()) >= 0
               and np.nanpercentile(s[s.index < w[0]], 95) > 0}
    data = {k: data[k] for k in windows}
    if quick:
        data = dict(list(data.items())[::5][:6])
    pers = {k: float(np.nanpercentile(s[s.index < windows[k][0]], 95)) / 8 or 1.0 for k, s in data.items()}
    default = VpaSettings()
    grid = vpa_grid or [(default.quantile, default.margin)]
    rows: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    for k, s in data.items():
        start, end = windows[k]
        if quick:
            end = min(end, start + pd.Timedelta("2D"))
        use = s[start:end].iloc[:-1] if s.index[-1] >= end else s[start:end]
        fc = DailyChoiceForecaster(key=k)
        r: dict[str, Any] = {"vpa_default": ref.vpa_scores(use, ref.vpa_default(s, start, end).reindex(use.index))}
        for q, m in grid:
            req = replay_vpa(s, start, end, VpaSettings(quantile=q, margin=m), fc).reindex(use.index)
            r[f"tidewise q{q:g}+{m:.0%}"] = ref.vpa_scores(use, req)
        d1 = s.resample("1min").ffill()[start:end].to_numpy()
        r0 = max(1, int(np.ceil(s[s.index < start].iloc[-12:].mean() / (pers[k] * 0.7))))
        r["hpa_reactive"] = ref.hpa_scores(d1, ref.hpa_reactive(d1, pers[k], r0), pers[k])
        for q in hpa_quantiles:
            d, floor, serving, _ = replay_hpa(s, start, end, pers[k], HpaSettings(quantile=q), forecaster=fc)
            r[f"hpa_predictive q{q:g}"] = hpa_scores(d, serving, pers[k])
        r["models"] = sorted({m for m, _ in fc.day_model.values()})
        rows[k] = r
        print(f"  {k}: {json.dumps(r, default=str)}", file=sys.stderr, flush=True)
    return {"rows": rows, "seconds": time.perf_counter() - t0, "series": len(rows)}


# (quantile, margin) of the VPA target, besides the default of autoscaler/settings/serve.py (listed first)
GRID = [(0.9, 0.0), (0.5, 0.3), (0.5, 0.5), (0.9, 0.1), (0.95, 0.0), (0.95, 0.1), (0.99, 0.0)]


def _mean(rows: dict[str, dict[str, Any]], policy: str, j: int) -> float:
    return float(np.nanmean([r[policy][j] for r in rows.values() if policy in r]))


def _family(key: str) -> str:
    return key.split("/")[0]


# scale -----------------------------------------------------------------------------------------
SCALE_SCRIPT = r'''
import json, os, resource, sys, time
from benchmarks.fleet import advance, offline_fleet, timed_run, write_state
from studies.demo import MemorySource
from autoscaler.input.cluster import FileCluster
from autoscaler.output.sinks import FileSink
from autoscaler.routines.loop import ServingLoop
from autoscaler.settings import ServeSettings

workloads, nodes, model, out, budget = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
t = time.perf_counter()
c, hist = offline_fleet(workloads, nodes, days=3)
state = write_state(c, out)
setup = time.perf_counter() - t
s = ServeSettings()
s.loop.forecast_model = model
loop = ServingLoop(s, MemorySource(hist), FileCluster(state), FileSink(os.path.join(out, "recs")))
runs = [timed_run(loop, "cold: every series forecast, every object written")[1],
        timed_run(loop, "warm: same 5-minute step (the loop runs every 60 s)")[1]]
s.loop.forecast_budget = budget  # what a large fleet sets (deploy/serve.yaml's config)
for k in range(1, 8):  # more 5-minute steps: the cache refreshes what aged or was surprised
    advance(hist, c.step)
    runs.append(timed_run(loop, f"warm: +{5 * k} min of data, budget {budget}")[1])
print(json.dumps({"setup_seconds": setup, "runs": runs, "series": len(hist.series),
                  "pods": sum(w.replicas for w in c.workloads),
                  "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
'''


def scale(workloads: int, nodes: int, model: str, budget: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.executable, "-c", SCALE_SCRIPT, str(workloads), str(nodes), model, d, str(budget)],
                           capture_output=True, text=True, cwd=ROOT, timeout=5400)
        if r.returncode != 0:
            raise RuntimeError(f"scale run failed: {r.stderr[-3000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])


def run(quick: bool, parts: tuple[str, ...] = ("quality", "scale")) -> str:
    out = ["## Serving loop (issue 5)\n",
           "Reproduce: `python -m benchmarks.run --only serving` (add `--quick` for a smoke run: 6 series, "
           "2 days, 1,000 workloads). Code: `studies/replay/decisions.py` (VPA and HPA replay over `autoscaler/logic`), "
           "`autoscaler/logic/hpa.py` (reactive HPA simulator), `benchmarks/serving.py`.\n"]
    if "quality" in parts:
        out += _quality_section(quick)
    if "scale" in parts:
        out += _scale_section(quick)
    return "\n".join(out) + "\n"


def _quality_section(quick: bool) -> list[str]:
    """VPA and HPA decision quality on the `dev` suite, the default first, then the grid."""
    from autoscaler.settings import VpaSettings

    dflt = VpaSettings()
    grid = [(dflt.quantile, dflt.margin)] + [g for g in GRID if g != (dflt.quantile, dflt.margin)]
    res = decision_quality(quick, grid)
    rows = res["rows"]
    out = _vpa_table(rows, res["series"], res["seconds"])
    out += _vpa_by_source(rows, f"tidewise q{dflt.quantile:g}+{dflt.margin:.0%}")  # the default of autoscaler/settings/serve.py
    out += _hpa_table(rows)
    out.append(
        "\nWhere the targets are missed, and why. VPA: the target is a forecast quantile, and the "
        "forecasters' bands (quantiles of residuals, as wide in the trough as at the peak) leave a "
        "high relative slack whenever usage is low; on the spiky cloud pools (`ccc`, half the suite) "
        "the hourly forecast barely beats an 8-day percentile, while on strongly tidal series "
        "(`aiops`, `web`) the slack falls by a third or more. The lever is sharper (heteroscedastic) "
        "quantiles in `predictor`, not the decision rule: lowering the quantile or margin buys slack "
        "only with violations (rows above). HPA: every replica the floor adds over the reactive rule "
        "counts in the average, so a floor at the median forecast stays within 1.05x the replicas but "
        "removes only part of the over-target minutes, and the q0.9 floor removes most of them at a "
        "higher replica cost; the forecast errors of these traces do not allow both at once.\n")
    models: dict[str, int] = {}
    for r in rows.values():
        for m in r["models"]:
            models[m] = models.get(m, 0) + 1
    out.append(f"\nModels chosen per day by `auto` (series using each): "
               f"{', '.join(f'{m} {n}' for m, n in sorted(models.items()))}.\n")
    return out


def _vpa_table(rows: dict[str, dict[str, Any]], series: int, seconds: float) -> list[str]:
    """Each Tidewise (quantile, margin) against the stock recommender, with the slack target."""
    d_slack, d_viol = _mean(rows, "vpa_default", 0), _mean(rows, "vpa_default", 1)
    out = [f"### VPA: Tidewise versus the stock recommender ({series} series of the `dev` suite, "
           f"hourly decisions from the past only; {seconds:.0f} s)\n"]
    out.append("Data: ../shared/data (cloud_cluster_capacity, nab, web_request_rates, aiops_kpi_samples, "
               "alibaba2018 machine usage; see each folder's SOURCE.md). Scores as "
               "../shared/eval/bench_decisions.py: mean relative slack and violation rate over 5-minute steps.\n")
    out.append("The first Tidewise row is the default of `autoscaler/settings/serve.py`; the others show the "
               "trade-off of the quantile and margin.\n")
    out.append("| policy | slack | violation | slack / default | meets target (<= 0.8x slack, violation <= default) |")
    out.append("|---|---|---|---|---|")
    out.append(f"| stock VPA (p90 decaying, +15%) | {d_slack:.3f} | {d_viol:.4f} | 1.00 | — |")
    for policy in [p for p in next(iter(rows.values())) if p.startswith("tidewise")]:
        s, v = _mean(rows, policy, 0), _mean(rows, policy, 1)
        ok = s <= 0.8 * d_slack and v <= d_viol
        out.append(f"| {policy} | {s:.3f} | {v:.4f} | {s / d_slack:.2f} | {'yes' if ok else 'no'} |")
    return out


def _vpa_by_source(rows: dict[str, dict[str, Any]], pol: str) -> list[str]:
    out = [f"\nBy source ({pol} / stock):\n"]
    out.append("| source | series | slack | stock slack | violation | stock violation |")
    out.append("|---|---|---|---|---|---|")
    for f in sorted({_family(k) for k in rows}):
        sub = {k: r for k, r in rows.items() if _family(k) == f}
        out.append(f"| {f} | {len(sub)} | {_mean(sub, pol, 0):.3f} | {_mean(sub, 'vpa_default', 0):.3f} | "
                   f"{_mean(sub, pol, 1):.4f} | {_mean(sub, 'vpa_default', 1):.4f} |")
    return out


def _hpa_table(rows: dict[str, dict[str, Any]]) -> list[str]:
    """Each predictive floor (with the reactive rule above it) against the reactive rule alone."""
    r_rep, r_over = _mean(rows, "hpa_reactive", 0), _mean(rows, "hpa_reactive", 1)
    out = ["\n### Predictive HPA versus the reactive HPA (same series as demand, 1-minute simulation)\n"]
    out.append("| policy | mean replicas | over-target minutes | replicas / reactive | over-target reduction | "
               "meets target (>= 70% fewer, <= 1.05x replicas) |")
    out.append("|---|---|---|---|---|---|")
    out.append(f"| reactive HPA | {r_rep:.2f} | {r_over:.4f} | 1.00 | — | — |")
    for policy in [p for p in next(iter(rows.values())) if p.startswith("hpa_predictive")]:
        rp, ov = _mean(rows, policy, 0), _mean(rows, policy, 1)
        red = 1 - ov / r_over if r_over else float("nan")
        ok = red >= 0.7 and rp <= 1.05 * r_rep
        out.append(f"| {policy} (floor) + reactive | {rp:.2f} | {ov:.4f} | {rp / r_rep:.3f} | {red:.0%} | "
                   f"{'yes' if ok else 'no'} |")
    return out


def _scale_section(quick: bool) -> list[str]:
    """run_once at fleet size in a fresh process: wall-clock per step and peak RSS."""
    n_w, n_n = (1000, 50) if quick else (10_000, 500)
    model = "seasonal_naive_daily"
    budget = 200 if quick else 2000
    res = scale(n_w, n_n, model, budget)
    load = os.getloadavg()
    out = [f"### Scale: run_once for {n_w:,} workloads ({res['series']:,} series, {res['pods']:,} pods) "
           f"and {n_n} nodes, offline\n"]
    out.append(f"Cluster state from a JSON file (`kubectl get -o json` shape; FileCluster), history in memory (3 days at 5 min), file "
               f"sink, forecasts by `{model}` (a named model: `auto` backtests every series and costs "
               f"~0.1-0.4 s per series here). Whole-process peak RSS (history and cluster included): "
               f"{res['max_rss_bytes'] / 2**30:.2f} GiB (target <= 2 GiB). Setup (not timed): "
               f"{res['setup_seconds']:.0f} s. Load average when it finished: {load[0]:.1f} on 2 cores "
               f"(other jobs share the machine; timings are wall-clock).\n")
    out.append("CPU seconds (all threads of the process) do not depend on what else shares the cores; the "
               "targets are cold <= 10 s and warm <= 3 s.\n")
    out.append("| run | seconds | CPU seconds | within target | fetch | cluster | forecast | recommend | guardrails | "
               "write | changes | forecast step |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res["runs"]:
        st, limit = r["steps"], 10 if r["label"].startswith("cold") else 3
        out.append(f"| {r['label']} | {r['seconds']:.2f} | {r.get('cpu', float('nan')):.2f} | "
                   f"{'yes' if r['seconds'] <= limit else 'no'} | "
                   f"{st.get('fetch', 0):.2f} | {st.get('cluster', 0):.2f} | {st.get('forecast', 0):.2f} | "
                   f"{st.get('recommend', 0):.2f} | {st.get('guardrails', 0):.2f} | {st.get('write', 0):.2f} | "
                   f"{r['changes']} | {r['detail']} |")
    out.append("")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--part", default="quality,scale")
    a = ap.parse_args(argv)
    print(run(a.quick, tuple(a.part.split(","))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
