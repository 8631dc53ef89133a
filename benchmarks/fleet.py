"""The offline fleet the serving benchmarks run `run_once` on (`serving.py`'s scale part,
`tidal_serve.py`): a synthetic cluster of big nodes, its usage as one in-memory History on a shared
index, the cluster state as `kubectl get -o json` prints it, one timed run, one more 5-minute step
of data (each series repeating its value a day earlier), and the restart regime's week as a series
carries it into a new UTC day."""
from __future__ import annotations

import json
import os
import resource
import time
from typing import Any, Callable

import numpy as np
import pandas as pd

from autoscaler.logic.day_plan import DAY, LOOK, DayPlanner, PlanMemo
from autoscaler.settings import VpaSettings
from predictor.history import History
from predictor.sources.synthetic import SyntheticCluster, generate_cluster
from studies.demo import cluster_objects


def offline_fleet(workloads: int, nodes: int, days: int) -> tuple[SyntheticCluster, History]:
    """The cluster (10,000 workloads x ~3 pods need big nodes: 96 cores, 384 GiB) and its usage."""
    c = generate_cluster(seed=1, workloads=workloads, namespaces=20, nodes=nodes, days=days, end="2026-11-02",
                         gaps=False)
    for n in c.nodes:
        n.cpu_cores, n.memory_bytes = 96, 384 * 2**30
    idx = c.index()
    series = {w.key(res).id: pd.Series(c.usage(w, res).to_numpy(), index=idx)
              for w in c.workloads for res in ("cpu", "memory")}
    return c, History(series, c.step)


def write_state(c: SyntheticCluster, out: str, edit: Callable[[list[dict[str, Any]]], None] | None = None) -> str:
    """The cluster's objects (changed in place by `edit` first, when given) as a state file in `out`."""
    objects = cluster_objects(c)
    if edit is not None:
        edit(objects)
    path = os.path.join(out, "cluster-state.json")
    with open(path, "w") as fh:
        json.dump({"apiVersion": "v1", "kind": "List", "items": objects}, fh)
    return path


def timed_run(loop: Any, label: str) -> tuple[Any, dict[str, Any]]:
    """(the run's report, its record: wall and CPU seconds, per-step seconds, counts, peak RSS so far).
    A loop that collects its garbage between runs (`collect_between_runs`, as serve's Runner sets it)
    collects it after the run's timing, as the Runner does before it waits: "gc_after" holds those seconds."""
    t, cpu = time.perf_counter(), time.process_time()
    rep = loop.run_once()
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    gc_after = loop.collect_garbage() if loop.collect_between_runs else None
    return rep, {"label": label, "seconds": seconds, "cpu": cpu, "gc_after": gc_after,
                 "outcome": rep.outcome, "steps": {x.name: round(x.seconds, 3) for x in rep.steps},
                 "vpa": len(rep.vpa), "hpa": len(rep.hpa), "nodes": len(rep.reclaim), "changes": len(rep.changes),
                 "skipped": len(rep.skipped), "detail": next((x.detail for x in rep.steps if x.name == "forecast"), ""),
                 "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def advance(hist: History, step: pd.Timedelta) -> None:
    """One more step of data for every series: its value a day before."""
    per_day = int(pd.Timedelta("1D") / step)
    grown: dict[int, tuple[pd.Index, pd.Index]] = {}  # id(old index) -> (old, new): series on one grid stay on one
    for sid in list(hist.series):  # not items(): a list of every old series would keep a second copy
        y = hist.series[sid]  # of the whole source alive until the loop ends (+0.36 GiB at 10,000 workloads)
        old, new = grown.get(id(y.index), (None, None))
        if old is not y.index:
            old, new = grown[id(y.index)] = (y.index, y.index.append(pd.DatetimeIndex([y.index[-1] + step])))
        hist.series[sid] = pd.Series(np.append(y.to_numpy(), y.iloc[-per_day]), index=new, copy=False)  # one array, not two


def yesterdays_memo(today: PlanMemo, y: pd.Series, settings: VpaSettings) -> PlanMemo:
    """The memo a series' first run of yesterday left (`DayPlanner.memo` of yesterday), from the one of
    today: a planner reads today's, works out the oldest day of yesterday's week from `y` (its plan and
    stock targets) and writes yesterday's. Today planned again from it does what a real new day does: one
    plan and one day of stock targets (not also the oldest day's)."""
    yesterday = pd.Timestamp(today.last, tz="UTC") - DAY
    planner = DayPlanner(y, settings, today.n, carried=today)
    oldest = yesterday - (LOOK - 1) * DAY
    planner.plan(oldest)
    planner.stock_day(oldest)
    return planner.memo(yesterday)


def yesterdays_reads(memo: PlanMemo, y: pd.Series, settings: VpaSettings) -> np.ndarray:
    """The stock targets a series the stock rule served read through the newest day of `memo`, hour by hour
    (`DayChoice.hourly`): with the whole history `y`, each read is the stock rule's target of its hour."""
    return DayPlanner(y, settings, memo.n).stock_day(pd.Timestamp(memo.last, tz="UTC"))
