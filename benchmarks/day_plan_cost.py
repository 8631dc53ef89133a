"""The restart regime's per-series costs in serve (issue 24, BENCHMARKS.md "a new day's plans"): a new UTC
day's `DayPlanner.decide` without and with the week its series kept from the day before (`PlanMemo`), and
the stock rule's hourly re-read (one series at a time, and every series due at once as a run reads them),
as `autoscaler/routines/tidal.py` makes them (the history cut by
position to its 9-day context, the run's origin 5 minutes past the hour), on the benchmark fleet's
synthetic series (`benchmarks.fleet`). A third planner reads the memo `benchmarks.tidal_serve` hands its new
day (`benchmarks.fleet.yesterdays_memo`, rebuilt from today's): it should cost what the kept week costs. A
fourth also has yesterday's stock targets where the stock rule served the series yesterday (serve reads
them hour by hour as the day goes, `DayChoice.hourly`): only the plan's series work them out at midnight.

    python -m benchmarks.day_plan_cost [--series 400]

prints CPU milliseconds a series for each, and how many of the series the plan and the stock rule won
(a few seconds).
"""
from __future__ import annotations

import argparse
import time
from typing import Callable, TypeVar

import numpy as np
import pandas as pd

from autoscaler.logic.day_plan import DAY, DayDecision, DayPlanner, PlanMemo
from autoscaler.logic.stock_rule import stock_at
from autoscaler.routines.tidal import CONTEXT
from autoscaler.settings import ServeSettings
from benchmarks.fleet import offline_fleet, yesterdays_memo, yesterdays_reads
from predictor.timestamps import position

FIVE = pd.Timedelta("5min")
T = TypeVar("T")


def per_series(series: list[pd.Series], work: Callable[[pd.Series, int], T]) -> tuple[float, list[T]]:
    """CPU milliseconds a series of `work(y, k)` over `series`, and what it returned."""
    t = time.process_time()
    out = [work(y, k) for k, y in enumerate(series)]
    return (time.process_time() - t) / len(series) * 1000, out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.day_plan_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--series", type=int, default=400, help="series of the fleet to time (default 400)")
    a = ap.parse_args(argv)
    c, hist = offline_fleet(max(1, a.series // 2), 5, days=10)
    series = list(hist.series.values())[: a.series]
    vpa, n = ServeSettings().vpa, ServeSettings().vpa.max_changes_per_day
    today = c.index()[-1].floor("D")
    origin, before = today + FIVE, today - DAY + FIVE  # the first runs of today and of yesterday

    def near(y: pd.Series, at: pd.Timestamp) -> pd.Series:
        return y.iloc[position(y.index, at - CONTEXT): position(y.index, at)]

    def yesterday(y: pd.Series, _: int) -> tuple[PlanMemo, bool]:
        p = DayPlanner(near(y, before), vpa, n)
        d = p.decide(before.floor("D"), vpa.violation_budget, stock_today=False)
        return p.memo(before.floor("D")), d.planned

    def rebuilt(y: pd.Series, _: int) -> PlanMemo:  # what benchmarks/tidal_serve.py's new day reads
        p = DayPlanner(near(y, origin), vpa, n)
        p.decide(today, vpa.violation_budget, stock_today=False)
        return yesterdays_memo(p.memo(today), near(y, origin), vpa)

    _, yesterdays = per_series(series, yesterday)
    memos = [memo for memo, _ in yesterdays]
    _, rebuilt_memos = per_series(series, rebuilt)
    read = [memo if planned else memo.with_last_stock(yesterdays_reads(memo, y, vpa))
            for y, (memo, planned) in zip(series, yesterdays)]
    rows = []
    for label, kept in (("a new day's plan, the whole week worked out", None),
                        ("a new day's plan, with the week kept from yesterday", memos),
                        ("a new day's plan, with the serve benchmark's memo (yesterdays_memo)", rebuilt_memos),
                        ("a new day's plan, the week kept and yesterday's hours read where the stock rule served",
                         read)):
        def today_plan(y: pd.Series, k: int, kept: list[PlanMemo] | None = kept) -> DayDecision:
            memo = None if kept is None else kept[k]
            planner = DayPlanner(near(y, origin), vpa, n, carried=memo)
            return planner.decide(today, vpa.violation_budget, stock_today=False)

        ms, got = per_series(series, today_plan)
        planned = sum(d.planned for d in got)
        rows.append(f"| {label} | {ms:.2f} | plan {planned}, stock rule {len(got) - planned} |")
    hour = origin.floor("h")
    ms, alone = per_series(series, lambda y, _: DayPlanner(near(y, origin), vpa, n).stock(hour))
    rows.append(f"| the stock rule's target for the hour (read once an hour a series it serves), one at a time "
                f"| {ms:.2f} | |")
    t = time.process_time()
    together = stock_at({str(k): y for k, y in enumerate(series)}, hour.value)
    ms = (time.process_time() - t) / len(series) * 1000
    same = sum(together[str(k)] == v or (np.isnan(v) and np.isnan(together[str(k)])) for k, v in enumerate(alone))
    rows.append(f"| the same, every series due at once (`stock_at`, as a run reads them) | {ms:.2f} | "
                f"{same} of {len(series)} equal to the bit |")
    print(f"{len(series)} series of 10 days, the first run of {today.date()}:\n")
    print("| per series | CPU ms | choices |\n|---|---|---|\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
