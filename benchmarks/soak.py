"""Soak run (issue 22): serve for a simulated day against a real Prometheus and a faulty API fake.

The fleet is the serving-scale benchmark's (benchmarks/serving.py: `generate_cluster`, 96-core
nodes, `studies.demo.cluster_objects`), its history backfilled into a real Prometheus
(tests/integration/prometheus_server.py) that is killed and restarted on a seeded schedule. The API
is testsupport/kube_fake.py with the faults of benchmarks/soak_faults.py (409, 429, 5xx,
slow answers, cut watches, 410 Gone). Serve runs in its own process (benchmarks/soak_serve.py) as
`tidewise serve --apply` runs it, one run per simulated minute (longer after a freeze: its back-off).

Reported (JSON and a PNG under benchmarks/out/): RSS over the run (flat: its trend after the first
hour grows under 10% over the run, `rss_figures`), writes lost (last decisions not in the fake once it recovered) and duplicated (a write equal
to the previous one on an object with no failure in between), freezes and recoveries, cold and
warm run times.

    python -m benchmarks.soak                                   # 10,000 workloads / 500 nodes / 1,440 min
    python -m benchmarks.soak --workloads 200 --nodes 10 --minutes 120 --seed 1
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.soak_faults import FaultSchedule, FaultyApiServer, Timeline, duplicates

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "benchmarks", "out")
SCRAPE = pd.Timedelta("5m")  # one sample per step: a day of a large fleet backfills in minutes, not hours


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _fleet(workloads: int, nodes: int, minutes: int, seed: int, history_days: float, end: pd.Timestamp):
    from predictor.sources.synthetic import generate_cluster

    c = generate_cluster(seed=seed, workloads=workloads, namespaces=max(2, min(20, workloads // 50)), nodes=nodes,
                         days=history_days + minutes / 1440 + 0.05, end=end, gaps=False)
    for n in c.nodes:
        n.cpu_cores, n.memory_bytes = 96, 384 * 2**30  # as benchmarks/serving.py: ~3 pods a workload need big nodes
    return c


def _kubeconfig(path: str, url: str) -> str:
    """One context pointing the real `kubernetes` client at the fake."""
    with open(path, "w") as fh:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                   "clusters": [{"name": "fake", "cluster": {"server": url}}], "users": [{"name": "u", "user": {"token": "t"}}],
                   "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}]}, fh)
    return path


class Prometheus:
    """The real server, killed (SIGKILL) and started again on the same port and data."""

    def __init__(self, data: str):
        from tests.integration.prometheus_server import PrometheusServer

        self.server = PrometheusServer(data).start()
        self.up, self.kills, self.restarts, self.restart_seconds = True, 0, 0, []  # type: ignore[var-annotated]

    def want(self, up: bool) -> None:
        from tests.integration.prometheus_server import PrometheusServer

        if up == self.up:
            return
        if not up:
            assert self.server.proc is not None
            self.server.proc.kill()
            self.server.proc.wait()
            self.server.log.close()
            self.kills += 1
        else:
            t = time.perf_counter()
            self.server = PrometheusServer(self.server.data_dir, self.server.port).start()
            self.restart_seconds.append(round(time.perf_counter() - t, 2))
            self.restarts += 1
        self.up = up


def run_soak(workloads: int, nodes: int, minutes: int, seed: int, out_dir: str = OUT, history_days: float = 2.0,
             model: str = "seasonal_naive_daily", progress_every: int = 10, log=print,
             full_fetch: bool = False) -> dict[str, Any]:
    """The whole soak; returns the figures (also written to `out_dir`/soak.json, plot soak.png).
    `progress_every`: a progress line every that many simulated minutes (0: none). `full_fetch`:
    every run fetches the whole window (`loop.full_refetch_every: null`), as serve did before it
    fetched increments (autoscaler/input/incremental.py)."""
    from studies.demo import cluster_objects
    from tests.integration.prometheus_server import backfill

    schedule = FaultSchedule.make(minutes, seed)
    os.makedirs(out_dir, exist_ok=True)
    end = pd.Timestamp.now(tz="UTC").floor("1h") - pd.Timedelta("1h")
    start = end - pd.Timedelta(minutes=minutes)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tidewise-soak-") as tmp:
        c = _fleet(workloads, nodes, minutes, seed, history_days, end)
        om = os.path.join(tmp, "history.om")
        with open(om, "w") as fh:
            samples = c.write_openmetrics(fh, SCRAPE)
        data = os.path.join(tmp, "data")
        backfill(om, data)
        os.unlink(om)
        setup = time.perf_counter() - t0
        log(f"[soak] {workloads} workloads, {nodes} nodes, {samples:,} samples backfilled in {setup:.0f} s; "
            f"{len(schedule.faults)} faults over {minutes} simulated minutes from {start}")
        prom = Prometheus(data)
        fake = FaultyApiServer(cluster_objects(c))
        fake.start()
        try:
            kc = _kubeconfig(os.path.join(tmp, "kubeconfig"), fake.url)
            cfg = {"kubeconfig": kc, "prometheus_url": prom.server.url, "start": start, "model": model,
                   "history_window": f"{int(history_days * 24 * 60)}m", "rate_window": "10m",
                   "forecast_budget": max(200, workloads // 5), "log": os.path.join(out_dir, "soak-serve.log"),
                   "full_fetch": full_fetch}
            drive = _drive(cfg, schedule, minutes, prom, fake, progress_every, log)
        finally:
            fake.stop()
            prom.want(True)
            prom.server.stop()
    figures = _figures(drive, schedule, prom, fake, minutes)
    figures.update(scale={"workloads": workloads, "nodes": nodes, "minutes": minutes, "seed": seed,
                          "series": 2 * workloads, "pods": sum(w.replicas for w in c.workloads),
                          "history_days": history_days, "model": model, "samples_backfilled": samples},
                   setup_seconds=round(setup, 1), wall_seconds=round(time.perf_counter() - t0, 1),
                   start=str(start), load_average=os.getloadavg())
    with open(os.path.join(out_dir, "soak.json"), "w") as fh:
        json.dump(figures | {"timeline": vars(drive["timeline"]), "runs_detail": drive["reports"]}, fh, default=str)
    from benchmarks.soak_plot import plot

    figures["plot"] = plot(drive["timeline"], schedule, os.path.join(out_dir, "soak.png"))
    return figures


def _drive(cfg: dict[str, Any], schedule: FaultSchedule, minutes: int, prom: Prometheus, fake: FaultyApiServer,
           progress_every: int, log) -> dict[str, Any]:
    """Answer the serve process's ticks until the simulated time is up; returns what it saw."""
    from benchmarks.soak_serve import serve_child

    ctx = multiprocessing.get_context("spawn")  # a clean interpreter: its RSS is serve's alone
    here, there = ctx.Pipe()
    child = ctx.Process(target=serve_child, args=(there, cfg), name="soak-serve", daemon=True)
    child.start()
    assert child.pid is not None
    tl, reports, minute, ticks, done, last_print = Timeline(), [], 0.0, 0, None, 0.0
    try:
        while done is None:
            if not here.poll(600):
                raise RuntimeError("the serve process sent nothing for 600 s (see its log)")
            kind, msg = here.recv()
            if kind == "done":
                done = msg
                break
            ticks += 1
            rep = msg["report"]
            tl.minute.append(round(minute, 2))
            tl.rss_mib.append(round(_rss_mib(child.pid), 1))
            tl.seconds.append(rep["seconds"] if rep else None)
            tl.outcome.append(rep["outcome"] if rep else "standing by")
            reports.append(rep)
            fake.trim_delivered(msg["reached"])
            with fake.lock:
                fake.requests.clear()
            if progress_every and (ticks == 1 or int(minute) // progress_every > int(last_print) // progress_every):
                last_print = minute
                frozen = tl.outcome.count("frozen")
                log(f"[soak] minute {minute:6.0f}/{minutes}  run {rep['seconds'] if rep else 0:6.2f} s  "
                    f"rss {tl.rss_mib[-1]:7.1f} MiB  {tl.outcome[-1]:<11}  frozen {frozen}  "
                    f"prometheus {'up' if prom.up else 'DOWN'}")
            nxt = minute + (msg["delay"] or 60) / 60
            if nxt >= minutes:
                here.send(("stop", None))
                continue
            prom.want(not schedule.active(int(nxt), "prometheus"))
            fake.apply_minute(schedule, int(nxt), int(minute))
            minute = nxt
            here.send(("go", {"now": pd.Timestamp(cfg["start"]) + pd.Timedelta(minutes=minute),
                              "versions": fake.kind_versions()}))
        child.join(60)
    finally:
        if child.is_alive():
            child.kill()
    return {"timeline": tl, "reports": reports, "child": done}


def _figures(drive: dict[str, Any], schedule: FaultSchedule, prom: Prometheus, fake: FaultyApiServer,
             minutes: int) -> dict[str, Any]:
    tl, reports, child = drive["timeline"], drive["reports"], drive["child"]
    ok = [(m, r) for m, r in zip(tl.minute, reports) if r and r["outcome"] != "frozen"]
    warm = [r["seconds"] for m, r in ok[1:] if m >= min(30, minutes // 6)]
    fetch = [r["steps"].get("fetch", 0.0) for m, r in ok[1:]]  # every good run after the first
    outcomes = [o for o in tl.outcome]
    episodes = sum(1 for i, o in enumerate(outcomes) if o == "frozen" and (i == 0 or outcomes[i - 1] != "frozen"))
    recoveries = sum(1 for i, o in enumerate(outcomes[1:], 1) if o not in ("frozen", "standing by")
                     and outcomes[i - 1] == "frozen")
    by_reason: dict[str, int] = {}
    for r in reports:
        if r and r["outcome"] == "frozen":
            step = r["reason"].split(":", 1)[0]
            by_reason[step] = by_reason.get(step, 0) + 1
    recover_after = []
    for f in schedule.faults:
        if f.kind == "prometheus":
            back = [m for m, r in ok if m >= f.end]
            recover_after.append(round(back[0] - f.end, 2) if back else None)
    armed: dict[str, int] = {}
    for f in schedule.faults:
        armed[f.kind] = armed.get(f.kind, 0) + 1
    results: dict[str, int] = {}
    for r in reports:
        for k, v in (r or {}).get("results", {}).items():
            results[k] = results.get(k, 0) + v
    return {
        "rss_mib": rss_figures(tl.minute, tl.rss_mib, min(60, minutes // 4)),
        "runs": {"ticks": len(reports), "runs": sum(1 for r in reports if r), "ok": sum(o == "ok" for o in outcomes),
                 "killed": sum(o == "killed" for o in outcomes), "frozen": outcomes.count("frozen"),
                 "standing_by": outcomes.count("standing by"), "freeze_episodes": episodes, "recoveries": recoveries,
                 "frozen_by_step": by_reason, "minutes_to_recover_after_prometheus": recover_after,
                 "unsynced_runs": (child or {}).get("unsynced_runs"), "write_results": results},
        "times": {"cold_seconds": reports[0]["seconds"] if reports and reports[0] else None,
                  "cold_cpu": reports[0]["cpu"] if reports and reports[0] else None,
                  "warm_median_seconds": round(statistics.median(warm), 3) if warm else None,
                  "warm_p95_seconds": round(sorted(warm)[int(0.95 * (len(warm) - 1))], 3) if warm else None,
                  "warm_max_seconds": max(warm, default=None), "warm_runs": len(warm),
                  "fetch_median_seconds": round(statistics.median(fetch), 3) if fetch else None,
                  "fetch_max_seconds": max(fetch, default=None)},
        "faults": {"scheduled": armed, "hit": dict(fake.injected), "prometheus_kills": prom.kills,
                   "prometheus_restarts": prom.restarts, "prometheus_restart_seconds": prom.restart_seconds,
                   "schedule": [f.as_dict() for f in schedule.faults], "quiet_head": schedule.quiet_head,
                   "quiet_tail": schedule.quiet_tail},
        "writes": duplicates(fake.answers) | {"audit": (child or {}).get("audit")},
        "informers": (child or {}).get("informers"),
    }


FLAT = 0.10  # the RSS trend may grow this much over the run after warm-up


def rss_figures(minutes: list[float], rss: list[float], warmup: float) -> dict[str, Any]:
    """The RSS after warm-up, judged by its trend and not its peak: one run's spike (the frames of
    a full fetch after a Prometheus outage, freed again) is no leak; a steady climb is. The trend is
    the Theil-Sen slope, the median of the slopes between every two runs (a spike moves it by at
    most one pair in n); growth is that slope over the span after warm-up, against the median RSS of
    its first third. Flat: growth within `FLAT`."""
    after = [(m, r) for m, r in zip(minutes, rss) if m >= warmup and np.isfinite(r)]
    out: dict[str, Any] = {"start": rss[0] if rss else None, "end": rss[-1] if rss else None, "warmup_minutes": warmup,
                           "flat_within_10pct": False}
    if not after:  # a run shorter than its warm-up: nothing to judge
        return out | dict.fromkeys(("after_warmup", "max_after_warmup", "min_after_warmup", "first_third_median",
                                    "last_third_median", "trend_mib_per_hour", "growth_after_warmup", "peak_over_first"))
    x, y = np.array([m for m, _ in after], dtype=float), np.array([r for _, r in after], dtype=float)
    third = max(1, len(y) // 3)
    base = float(np.median(y[:third]))
    slope = _theil_sen(x, y)  # MiB a minute
    growth = slope * float(x[-1] - x[0]) / base
    return out | {"after_warmup": float(y[0]), "max_after_warmup": float(y.max()), "min_after_warmup": float(y.min()),
                  "first_third_median": base, "last_third_median": float(np.median(y[-third:])),
                  "trend_mib_per_hour": round(60 * slope, 3), "growth_after_warmup": round(growth, 4),
                  "peak_over_first": round(float(y.max() / y[0]) - 1, 4), "flat_within_10pct": bool(growth <= FLAT)}


def _theil_sen(x: np.ndarray, y: np.ndarray) -> float:
    """The median of (y_j - y_i) / (x_j - x_i) over every pair i < j with x_i != x_j (0 for fewer)."""
    i, j = np.triu_indices(len(x), 1)
    dx = x[j] - x[i]
    keep = dx != 0
    return float(np.median((y[j] - y[i])[keep] / dx[keep])) if keep.any() else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--minutes", type=int, default=1440, help="simulated minutes (one run a minute)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the fleet and of the fault schedule")
    ap.add_argument("--history-days", type=float, default=2.0,
                    help="history serve fetches each run (default 2: the daily seasonal naive needs two days)")
    ap.add_argument("--out", default=OUT, help="folder of soak.json and soak.png (default benchmarks/out)")
    ap.add_argument("--full-fetch", action="store_true",
                    help="fetch the whole window on every run (serve before incremental fetches), to compare")
    a = ap.parse_args(argv)
    if a.workloads < 1 or a.nodes < 1 or a.history_days <= 0:
        print("soak: --workloads, --nodes and --history-days must be positive", file=sys.stderr)
        return 2
    try:
        FaultSchedule.make(a.minutes, a.seed)
    except ValueError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop Prometheus and serve on the way out
    fig = run_soak(a.workloads, a.nodes, a.minutes, a.seed, a.out, a.history_days,
                   log=lambda s: print(s, file=sys.stderr, flush=True), full_fetch=a.full_fetch)
    print(json.dumps({k: v for k, v in fig.items() if k != "informers"} | {"faults": {
        k: v for k, v in fig["faults"].items() if k != "schedule"}}, indent=1, default=str))
    w = fig["writes"]
    lost = (w.get("audit") or {}).get("lost")
    return 0 if w["duplicates"] == 0 and lost == 0 and fig["rss_mib"]["flat_within_10pct"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
