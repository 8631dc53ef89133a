"""`tidewise replay vpa --resize restart` (issue 24 item 4): where every change restarts a pod, each UTC
day is planned at midnight in at most N blocks (`--max-changes-per-day`), or the stock rule is kept,
whichever cost less on the series' own last week.

The plan and the choice are `autoscaler.logic.day_plan.DayPlanner` (serve's restart regime reads
the same): the median of each hour's peak on the last 7 days (the same weekday a week back counted
three times), cut into N blocks, scaled to keep the last week within a share of the budget (and the same
from each hour's 2nd to 4th largest step, the cheapest of the four on that week), or the stock VPA's
hourly target, whichever cost less on that week (its days weighted by recency in every factor and cost). Here they are applied as the cluster would: the
request in force changes only by more than 10% (`DEAD_BAND`) and at most N times a UTC day (the one at midnight included), a change past
that held. Nothing else moves the request within the day: what is served is what the choice
costed, as in serve's restart regime (`autoscaler.routines.tidal`); why a raise within the day was
dropped: BENCHMARKS.md, "Traces the dev suite does not read".
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from autoscaler.logic.day_plan import DayPlanner
from autoscaler.logic.vpa import target_floor
from autoscaler.settings import VpaSettings
from contracts.quantity import usage_to_units

DEAD_BAND = 0.1  # a restart for a change under 10% is not worth it: the request in force stays


def replay_restart(y: pd.Series, start: pd.Timestamp, end: pd.Timestamp, settings: VpaSettings, n: int,
                   every: pd.Timedelta = pd.Timedelta("1h"), resource: str = "cpu") -> pd.DataFrame:
    """Rows every `every` in [start, end): timestamp, target (the request in force), lower_bound and
    upper_bound (both the target: a plan is applied as planned), recommended, reason."""
    planner = DayPlanner(y, settings, n)
    unit = 1000.0 if resource == "cpu" else 1.0
    floor, floor_why = target_floor(resource, 1, settings)
    rows, in_force, changes, today = [], None, 0, None
    day_plan: np.ndarray | None = None
    why = ""
    for t in pd.date_range(start, end, freq=every, inclusive="left"):
        if t.floor("D") != today:
            today, changes = t.floor("D"), 0
            chosen = planner.decide(today, settings.violation_budget)
            day_plan, why = chosen.values, chosen.why
        raw = day_plan[t.hour] if day_plan is not None else np.nan
        if not np.isfinite(raw):
            rows.append((t, np.nan if in_force is None else in_force / unit, np.nan, np.nan, np.nan, why))
            continue
        wanted, note = usage_to_units(resource, max(float(raw), 0.0)), why
        if wanted < floor:
            wanted, note = floor, f"{why}; {floor_why}"
        if in_force is not None and abs(wanted - in_force) <= DEAD_BAND * in_force:
            wanted = in_force
        if wanted != in_force:
            if in_force is not None and changes >= n:
                note = f"{note}; held: {n} changes today already (--max-changes-per-day)"
                wanted = in_force
            else:
                changes += in_force is not None
                in_force = wanted
        rows.append((t, in_force / unit, in_force / unit, in_force / unit, wanted / unit, f"restart regime: {note}"))
    return pd.DataFrame(rows, columns=["timestamp", "target", "lower_bound", "upper_bound", "recommended", "reason"])
