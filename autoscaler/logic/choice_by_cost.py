"""Per-workload choice by cost (issue 12, item 2), as GKE Autopilot's recommender does: several VPA
recommenders compete for each workload resource, each is scored on that workload's own recent past
by a cost weighing slack, violations and changes, and the cheapest serves, its reason saying so
("stock 0.41 vs q0.9+10% 0.55, ... over the last 2d").

The candidates (`candidates`): the forecast at a few quantile/margin points, the stock VPA rule
(decaying-histogram p90 x 1.15 over 8 days, the reference the benchmark compares with) and a flat
percentile of the last week. Their requests are kept in a `CostLedger` (serve: one per loop
process; replay: one per series, filled from before the replayed window so the first day has a
past). The choice is made once per UTC day on the `cost_window` before midnight: it depends on the
past only, is the same in every run of that day (serve needs no memory beyond the ledger), and a
request does not jump between candidates within a day.

Cost of one candidate over the window, at 5-minute usage steps with the hourly request in force
(the scorer's arithmetic): mean relative slack + violation_weight x violation rate +
change_weight x changes (> 10%) per day. A candidate whose violation rate exceeds the budget is not
eligible (when none is, the one violating least serves). Pure: nothing here reads a clock or a file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Sequence

import numpy as np
import pandas as pd

from autoscaler.logic.vpa import vpa_default_request, window_max
from autoscaler.model.decisions import ResourceRecommendation
from autoscaler.settings import VpaSettings
from predictor.durations import DAY, parse_duration
from predictor.types import Forecast

DEFAULT = "forecast"  # the forecast at the settings' own quantile and margin: serves while warming up
CHANGE = 0.1  # a request change counts when it moves by more than 10% (the scorer's churn)
FLAT_WINDOW = pd.Timedelta("7D")  # the flat percentile's past: a week holds every weekday's peak
STOCK_WINDOW = pd.Timedelta("8D")  # the stock recommender's histogram keeps 8 days
RECORD_EVERY = pd.Timedelta("1h")  # one request per candidate and hour: what replay decides, bounded memory


@dataclass(frozen=True)
class Candidate:
    """One recommender's request now (workload total, usage units) and how it is described."""

    name: str  # short, used in reasons and the ledger
    value: float
    model: str  # what made it, for the recommendation's reason
    quantile: float
    margin: float
    window: str


@dataclass(frozen=True)
class Cost:
    """One candidate's score on the recent past."""

    name: str
    cost: float
    slack: float
    violation: float
    changes_per_day: float


@dataclass(frozen=True)
class Choice:
    name: str
    reason: str


def candidates(fc: Forecast, window_steps: int, past: pd.Series, now: pd.Timestamp, settings: VpaSettings,
               label: str, only: Collection[str] | None = None) -> list[Candidate]:
    """Every competitor's request at `now` (or those named in `only`: `CostLedger.needed`): the
    forecast at the settings' point (named DEFAULT) and at each `cost_forecast_points` (quantile,
    margin), the stock VPA rule and the flat percentile, from `past` (samples before `now`).
    Non-finite requests are left out."""
    def want(name: str) -> bool:
        return only is None or name in only

    out = []
    if want(DEFAULT):
        out.append(Candidate(DEFAULT, window_max(fc, settings.quantile, window_steps) * (1 + settings.margin), label,
                             settings.quantile, settings.margin, settings.window))
    for q, m in settings.cost_forecast_points:
        if (q, m) != (settings.quantile, settings.margin) and want(f"q{q:g}+{m:.0%}"):
            out.append(Candidate(f"q{q:g}+{m:.0%}", window_max(fc, q, window_steps) * (1 + m), label, q, m,
                                 settings.window))
    stock = past[past.index >= now - STOCK_WINDOW].dropna() if want("stock") else past[:0]
    if len(stock):
        ages = (now - stock.index).total_seconds().to_numpy() / 3600.0
        out.append(Candidate("stock", vpa_default_request(stock.to_numpy(), ages), "stock VPA histogram (24h half-life)",
                             0.9, 0.15, "8d"))
    flat_name = f"flat p{settings.cost_flat_quantile * 100:g}"
    flat = past[past.index >= now - FLAT_WINDOW].dropna() if want(flat_name) else past[:0]
    if len(flat):
        out.append(Candidate(flat_name,
                             float(np.quantile(flat.to_numpy(), settings.cost_flat_quantile)), "flat percentile",
                             settings.cost_flat_quantile, 0.0, "7d"))
    return [c for c in out if np.isfinite(c.value) and c.value >= 0]


def candidate_cost(name: str, usage: np.ndarray, request: np.ndarray, days: float, settings: VpaSettings) -> Cost | None:
    """The cost of `request` against `usage` (aligned steps) over `days`; None when nothing is comparable."""
    ok = np.isfinite(usage) & np.isfinite(request) & (request > 0)
    if not ok.any() or days <= 0:
        return None
    u, r = usage[ok], request[ok]
    slack = float(np.mean(np.clip((r - u) / r, 0, None)))
    violation = float(np.mean(u > r))
    changes = float(np.sum(np.abs(np.diff(r)) > CHANGE * np.abs(r[:-1]))) / days
    cost = slack + settings.violation_weight * violation + settings.change_weight * changes
    return Cost(name, cost, slack, violation, changes)


def choose(costs: Sequence[Cost], budget: float, window: str) -> Choice:
    """The cheapest eligible candidate (violation <= budget; when none is, the one violating least),
    DEFAULT winning ties, and a reason naming the costs."""
    eligible = [c for c in costs if c.violation <= budget]
    if not eligible:
        eligible = [min(costs, key=lambda c: c.violation)]
    best = min(eligible, key=lambda c: (round(c.cost, 9), c.name != DEFAULT))
    others = ", ".join(f"{c.name} {c.cost:.2f}" + ("" if c.violation <= budget else " (over the violation budget)")
                       for c in sorted(costs, key=lambda c: c.cost) if c is not best)
    why = (f"{best.name} chosen by cost {best.cost:.2f} (slack {best.slack:.2f}, violation {best.violation:.3f}, "
           f"{best.changes_per_day:.1f} changes/day) vs {others or 'no other candidate'} over the last {window}")
    return Choice(best.name, why)


@dataclass
class CostLedger:
    """Each candidate's request per hour, per key (series), for the last cost_window and a day
    (serve: the loop keeps one for its life, so a restart warms up again; replay: one per series)."""

    requests: dict[str, dict[pd.Timestamp, dict[str, float]]] = field(default_factory=dict)
    chosen: dict[str, tuple[pd.Timestamp, Choice | None]] = field(default_factory=dict)  # key -> (day, choice)

    def record(self, key: str, now: pd.Timestamp, found: Sequence[Candidate], keep: pd.Timedelta) -> None:
        """Keep the candidates' requests at `now` unless this hour already has them; forget hours
        older than `keep`."""
        rows = self.requests.setdefault(key, {})
        hour = now.floor(RECORD_EVERY)
        if hour not in rows:
            rows[hour] = {c.name: c.value for c in found}
            for old in [t for t in rows if t < now - keep]:
                del rows[old]

    def needed(self, key: str, now: pd.Timestamp) -> set[str] | None:
        """The candidates worth computing at `now`: all (None) while this hour is unrecorded or today's
        choice is not made, else only the one serving (a serve run every minute computes one, not five)."""
        day, choice = self.chosen.get(key, (None, None))
        if now.floor(RECORD_EVERY) not in self.requests.get(key, {}) or day != now.floor(DAY):
            return None
        return {choice.name if choice else DEFAULT}

    def table(self, key: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
        """Requests recorded in [start, end): one row per hour, one column per candidate."""
        rows = {t: v for t, v in self.requests.get(key, {}).items() if start <= t < end}
        return pd.DataFrame.from_dict(rows, orient="index").sort_index()


def choose_by_cost(ledger: CostLedger, key: str, found: Sequence[Candidate], usage: pd.Series, now: pd.Timestamp,
                   settings: VpaSettings) -> Choice | None:
    """Record `found` and return today's choice for `key` (made on the `cost_window` before today's
    UTC midnight, from `usage`: samples of the series); None while less than `cost_min_past` of the
    window has recorded requests (the DEFAULT candidate serves)."""
    window = parse_duration(settings.cost_window)
    ledger.record(key, now, found, window + DAY)
    day = now.floor(DAY)
    if key in ledger.chosen and ledger.chosen[key][0] == day:
        return ledger.chosen[key][1]
    past = ledger.table(key, day - window, day)
    choice = None
    if len(past) and day - past.index[0] >= parse_duration(settings.cost_min_past):
        use = usage[(usage.index >= past.index[0]) & (usage.index < day)]
        days = (day - past.index[0]) / DAY
        aligned = past.reindex(use.index, method="ffill")
        costs = [c for name in past.columns
                 if (c := candidate_cost(str(name), use.to_numpy(dtype=float), aligned[name].to_numpy(dtype=float),
                                         days, settings)) is not None]
        names = {c.name for c in found}
        costs = [c for c in costs if c.name in names]  # only candidates that can serve now
        if costs:
            choice = choose(costs, settings.violation_budget, settings.cost_window)
    ledger.chosen[key] = (day, choice)
    return choice


def serve_choice(choice: Choice | None, found: Sequence[Candidate]) -> tuple[Candidate | None, str]:
    """(the candidate whose request serves, None for the settings' own forecast point; the reason's
    step saying why)."""
    if choice is None:
        return None, "choice by cost warming up (too little recorded past): the forecast serves"
    chosen = next((c for c in found if c.name == choice.name), None)
    return (None if chosen is None or chosen.name == DEFAULT else chosen), choice.reason


def describe_choice(rec: ResourceRecommendation, chosen: Candidate | None, why: str) -> None:
    """Name the chosen recommender in `rec`'s reason (its model, quantile, margin and window) and why."""
    if chosen is not None:
        rec.reason.model, rec.reason.quantile = chosen.model, chosen.quantile
        rec.reason.margin, rec.reason.window = chosen.margin, chosen.window
    rec.reason.steps.insert(0, why)
