"""Serving cost of tidal requests (issue 24's target: 10,000 workloads, warm run <= 10 s, <= 2 GiB).

`run_once` for 10,000 workloads (20,000 series of 9 days, ~30,000 pods) and 500 nodes, offline (cluster
state from a JSON file, history in memory, file sink), with a registry `tidewise train` wrote on 100 of
the workloads, so every VPA is decided by the hour-peak model at its own violation-budget level. Two
fleets: every container resizing in place (VPA updateMode InPlaceOrRecreate, resizePolicy NotRequired:
each series decided once an hour, at its own 5-minute step) and every container restarting (the
default objects: the day plan, computed at the first run of each UTC day, the history ending at
midnight, and again at a new day, spread over runs by `vpa.day_plans_per_run`). Each in a fresh process.
As serve's Runner does, the loop collects each run's cyclic garbage after the run, in the idle time before
the next one (its own column; inside the run it took ~0.6 s, and ~1.7 s every tenth run).

    python -m benchmarks.run --only tidal_serve       # or: python -m benchmarks.tidal_serve [--quick]
    python -m benchmarks.tidal_serve --regime in-place --profile /tmp/serve   # + /tmp/serve.in-place (cProfile)
    python -m benchmarks.tidal_serve --regime restart --profile /tmp/serve    # + /tmp/serve.restart(.new-day)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from autoscaler.settings import VpaSettings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r'''
import cProfile, json, os, resource, subprocess, sys, time
import pandas as pd
from benchmarks.fleet import advance, offline_fleet, timed_run, write_state, yesterdays_memo, yesterdays_reads
from studies.demo import MemorySource
from autoscaler.input.cluster import FileCluster
from autoscaler.output.sinks import FileSink
from autoscaler.routines.loop import ServingLoop
from autoscaler.settings import ServeSettings
from predictor.history import History

workloads, nodes, regime, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
profile = sys.argv[5]  # a cProfile of the second warm run with new data (+ a new day's first); "": none
plans_per_run = int(sys.argv[6])  # vpa.day_plans_per_run; 0: serve's default
t = time.perf_counter()
c, hist = offline_fleet(workloads, nodes, days=9)
train = os.path.join(out, "train.csv")  # 100 workloads, every day but the last: what `tidewise train` reads
last = c.index()[-1]
History(dict(list(hist.series.items())[:200]), c.step).window(None, last - pd.Timedelta("1D")).to_long().to_csv(
    train, index=False)
reg = os.path.join(out, "models")
r = subprocess.run([sys.executable, "-m", "tidewise", "train", "--source", "file", "--input", train, "--registry", reg,
                    "--folds", "1", "--no-global"], capture_output=True, text=True)
if r.returncode != 0:
    raise SystemExit(r.stderr[-2000:])


def in_place(objects):
    for o in objects:
        if o["kind"] == "VerticalPodAutoscaler":
            o["spec"]["updatePolicy"] = {"updateMode": "InPlaceOrRecreate"}
        elif o["kind"] in ("Deployment", "StatefulSet"):
            for ctr in o["spec"]["template"]["spec"]["containers"]:
                ctr["resizePolicy"] = [{"resourceName": x, "restartPolicy": "NotRequired"} for x in ("cpu", "memory")]


state = write_state(c, out, in_place if regime == "in-place" else None)
setup = time.perf_counter() - t
s = ServeSettings()
s.loop.forecast_model = "seasonal_naive_daily"  # the day-ahead forecasts (HPA, nodes) as in the scale benchmark
s.loop.forecast_budget = 2000
if plans_per_run:
    s.vpa.day_plans_per_run = plans_per_run
loop = ServingLoop(s, MemorySource(hist), FileCluster(state), FileSink(os.path.join(out, "recs")), registry_dir=reg)
loop.collect_between_runs = True  # as serve's Runner sets it: the cyclic GC runs after each run, in its idle time
runs = []


def one(label):
    rep, record = timed_run(loop, label)
    models = {}
    for rr in (rr for d in rep.vpa for ct in d.containers for rr in ct.resources.values()):
        m = rr.reason.model.split("@")[0]
        models[m] = models.get(m, 0) + 1
    runs.append(dict(record, models=models))


one("cold: first run (after midnight)")
# forecast_budget takes a cold fleet on 2,000 series a run: serve's 5-minute runs until every VPA has
# its decision (none at 1,000 workloads, 10 at 10,000), then on to 40 runs (+200 min) so that the
# day-ahead forecasts' 30-minute refreshes are at their steady state, are the ramp, summed in one row;
# warm runs follow
ramp, minutes = [], 0
steady = 40 if workloads > 1000 else 0
while len(ramp) < steady or ((ramp or runs)[-1]["vpa"] < workloads and len(ramp) < 60):
    advance(hist, c.step)
    minutes += 5
    one(f"ramp: +{minutes} min")
    ramp.append(runs.pop())
if ramp:
    every = next((i + 1 for i, r in enumerate(ramp) if r["vpa"] >= workloads), None)
    runs.append(dict(ramp[-1], label=f"ramp: {len(ramp)} runs to +{minutes} min, every VPA decided from run {every} "
                                     f"(the last one's columns; CPU s "
                                     f"{min(r['cpu'] for r in ramp):.1f}-{max(r['cpu'] for r in ramp):.1f} a run)"))
one("warm: same 5-minute step")
for k in range(1, 4):
    advance(hist, c.step)
    if profile and k == 2:
        with cProfile.Profile() as prof:
            one(f"warm: +{minutes + 5 * k} min of data (under cProfile: slower)")
        prof.dump_stats(profile)
    else:
        one(f"warm: +{minutes + 5 * k} min of data")
minutes += 15
if regime == "restart":
    # a new UTC day re-plans every series: each kept plan is dated the day before, as at midnight (the
    # same day planned again from the same history: the same numbers, the same work), and the runs go
    # on until every plan is made, vpa.day_plans_per_run a run. Each series' memo of its week is the one
    # yesterday's first run would have left (`yesterdays_memo`, made here, not timed), and a series the
    # stock rule served read each of yesterday's hours as it came (`DayChoice.hourly`, here all at once, not
    # timed: the warm runs above time those reads), so a planner does a real new day's work: the day's plan,
    # and the stock targets of the day before where the plan served it
    plans = loop.decision_time.tidal.plans
    today = next(iter(plans.values())).day
    # a real new day's first run is on the hour (00:00), where a series the stock rule served reads the new
    # hour's target at its own step of it: the runs go on (not shown) until the next one is on the hour too
    while (next(iter(hist.series.values())).index[-1] + 2 * c.step).minute != 0:
        advance(hist, c.step)
        minutes += 5
        one("warm, before the hour")
        runs.pop()
    for sid, choice in plans.items():
        choice.day = today - pd.Timedelta("1D")
        if choice.memo is not None:
            choice.memo = yesterdays_memo(choice.memo, hist.series[sid], s.vpa)
            if choice.values is None:
                choice.hourly = yesterdays_reads(choice.memo, hist.series[sid], s.vpa)
    cap, day_runs = s.vpa.day_plans_per_run, []
    while any(ch.day != today for ch in plans.values()) and len(day_runs) < 100:
        advance(hist, c.step)
        minutes += 5
        if profile and not day_runs:
            with cProfile.Profile() as prof:
                one("new UTC day: run 1 (under cProfile: slower)")
            prof.dump_stats(profile + ".new-day")
        else:
            one(f"new UTC day: run {len(day_runs) + 1}")
        day_runs.append(runs.pop())
    runs.append(dict(day_runs[0], label=f"warm, the first run of a new UTC day ({len(plans):,} day plans to make, "
                                        f"vpa.day_plans_per_run {cap:,}): +{minutes - 5 * len(day_runs) + 5} min of data"))
    if len(day_runs) > 1:
        rest = day_runs[1:]
        runs.append(dict(day_runs[-1], label=f"the next {len(rest)} run{'s' * (len(rest) > 1)}, until every plan is made (the last one's "
                                             f"columns; CPU s {min(r['cpu'] for r in rest):.1f}-"
                                             f"{max(r['cpu'] for r in rest):.1f}, wall s "
                                             f"{min(r['seconds'] for r in rest):.1f}-{max(r['seconds'] for r in rest):.1f} a run)"))
    advance(hist, c.step)
    minutes += 5
    one(f"warm, every plan of the day made: +{minutes} min of data")
# the in-memory source stands for Prometheus: its copy of the data is in the process's RSS, not in a serve's
indexes = {id(y.index): y.index for y in hist.series.values()}
source = sum(y.to_numpy().nbytes for y in hist.series.values()) + sum(ix.nbytes for ix in indexes.values())
print(json.dumps({"setup_seconds": setup, "runs": runs, "series": len(hist.series), "source_bytes": source,
                  "pods": sum(w.replicas for w in c.workloads),
                  "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
'''


def measure(workloads: int, nodes: int, regime: str, profile: str = "", plans_per_run: int = 0) -> dict[str, Any]:
    """One fleet in a fresh process (see the module doc); with `profile`, a cProfile of its second
    warm run with new data is written there (`python -m pstats FILE`), and the restart fleet's first run
    of a new day to FILE.new-day; `plans_per_run` (0: serve's default) is its vpa.day_plans_per_run."""
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.executable, "-c", SCRIPT, str(workloads), str(nodes), regime, d,
                            os.path.abspath(profile) if profile else "", str(plans_per_run)],
                           capture_output=True, text=True, cwd=ROOT, timeout=5400)
        if r.returncode != 0:
            raise RuntimeError(f"tidal serve run ({regime}) failed: {r.stderr[-3000:]}")
        res: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
        return res


def table(regime: str, res: dict[str, Any]) -> list[str]:
    out = [f"**{regime}** ({res['series']:,} series, {res['pods']:,} pods; setup incl. training {res['setup_seconds']:.0f} s; "
           f"peak RSS of the whole process {res['max_rss_bytes'] / 2**30:.2f} GiB, target <= 2 GiB, of which the in-memory "
           f"source standing for Prometheus holds {res.get('source_bytes', 0) / 2**30:.2f} GiB):\n",
           "| run | seconds | CPU seconds | within 10 s | forecast | recommend | write | GC after the run | VPAs | changes | VPA resources by model |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        st = r["steps"]
        models = ", ".join(f"{k} {v}" for k, v in sorted(r["models"].items()))
        out.append(f"| {r['label']} | {r['seconds']:.2f} | {r['cpu']:.2f} | {'yes' if r['seconds'] <= 10 else 'no'} | "
                   f"{st.get('forecast', 0):.2f} | {st.get('recommend', 0):.2f} | {st.get('write', 0):.2f} | "
                   f"{'-' if r.get('gc_after') is None else format(r['gc_after'], '.2f')} | {r['vpa']} | "
                   f"{r['changes']} | {models} |")
    return out + [""]


def run(quick: bool, regimes: tuple[str, ...] = ("in-place", "restart"), profile: str = "",
        plans_per_run: int = 0) -> str:
    n_w, n_n = (1000, 50) if quick else (10_000, 500)
    out = [f"## Tidal requests in serve: {n_w:,} workloads (issue 24)\n",
           "Reproduce: `python -m benchmarks.run --only tidal_serve` (code: `benchmarks/tidal_serve.py`). "
           + (__doc__ or "").split("\n\n")[1].replace("\n", " ") + "\n"]
    for regime in regimes:
        out += table(regime, measure(n_w, n_n, regime, profile and f"{profile}.{regime}", plans_per_run))
    out.append(f"Load average at the end: {os.getloadavg()[0]:.1f} on 2 cores (wall-clock seconds are upper bounds "
               "when other jobs share the machine; CPU seconds are not).\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1,000 workloads and 50 nodes")
    ap.add_argument("--regime", choices=("in-place", "restart"), help="one fleet only (default both)")
    ap.add_argument("--profile", metavar="PREFIX", default="",
                    help="write a cProfile of each fleet's second warm run with new data to PREFIX.<regime>, and "
                         "of the restart fleet's first run of a new day to PREFIX.restart.new-day (read them with "
                         "python -m pstats; the runs' own rows are marked and slower)")
    ap.add_argument("--day-plans-per-run", type=int, default=0, metavar="N",
                    help=f"the restart fleet's vpa.day_plans_per_run (default: serve's, "
                         f"{VpaSettings().day_plans_per_run}): how many of a new day's plans a run makes")
    a = ap.parse_args(argv)
    if a.day_plans_per_run < 0:
        ap.error(f"--day-plans-per-run {a.day_plans_per_run}: give 1 or more (0: serve's default)")
    print(run(a.quick, (a.regime,) if a.regime else ("in-place", "restart"), a.profile, a.day_plans_per_run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
