"""The seasonal rule as a candidate of every in-place VPA decision (issue 24 item 2: "the rule itself is a
candidate the per-workload choice may pick").

The rule needs no model: the request for the interval from an origin is the median, over the last 7
days, of the usage peak in the same interval of the day, raised to the last interval's peak, x 1.05
(at an hour's start this is the reference scorer's `vpa_seasonal_rule`). Each series scores both
candidates on every step it observes — its own requests as decided, the model's and the rule's,
whichever was in force — and once a UTC day serves the one whose cost on the last 7 days was lower:
mean relative slack + `OVER_BUDGET` (10) x the violation rate over the budget: four times the stock
VPA curve's own price of violations (`vpa.violation_weight`, 2.5), so the choice does not buy slack by
running over the budget (at 2.5, on the dev suite at budget 0.02, the fleet ran at 0.030). The model's
budget level keeps learning from the model's own requests while the rule serves, so the choice can go
back.

Measured on the dev suite: BENCHMARKS.md, "Tidal requests" (the rule as a candidate). Replay
(`studies.replay.hour_peak`) and serve (`autoscaler.routines.tidal`) both read this module. Pure:
arrays in, numbers out.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

DAY_NS = 86_400 * 10**9
RULE_DAYS = 7  # the same interval on this many past days
RULE_MARGIN = 1.05
LOOK_DAYS = 7  # days of scored steps the daily choice reads
MIN_STEPS = 288  # a candidate is chosen only on at least a day of 5-minute steps scored
OVER_BUDGET = 10.0  # slack units a unit of violation rate over the budget costs (module docstring)


def rule_request(values: np.ndarray, ns: np.ndarray, origin: int, span: int) -> float:
    """The rule's request for [origin, origin + span) (int64 ns; `ns` sorted, one per value): the
    median of the peaks of that window on each of the last `RULE_DAYS` days, raised to the peak of
    [origin - span, origin), x `RULE_MARGIN`; NaN when none of them has a sample."""
    starts = np.array([origin - span] + [origin - d * DAY_NS for d in range(1, RULE_DAYS + 1)], dtype=np.int64)
    lo, hi = np.searchsorted(ns, starts, side="left"), np.searchsorted(ns, starts + span, side="left")
    peaks = np.array([_peak(values[a:b]) for a, b in zip(lo.tolist(), hi.tolist())])
    days = peaks[1:][np.isfinite(peaks[1:])]
    base = float(np.median(days)) if len(days) else float("nan")
    both = [v for v in (base, peaks[0]) if np.isfinite(v)]
    return max(both) * RULE_MARGIN if both else float("nan")


def _peak(v: np.ndarray) -> float:
    v = v[np.isfinite(v)]
    return float(v.max()) if len(v) else float("nan")


@dataclass
class Tally:
    """One candidate's scored steps on one day: summed relative slack, steps over, steps."""

    slack: float = 0.0
    over: int = 0
    steps: int = 0

    def add(self, usage: np.ndarray, request: float) -> None:
        if not np.isfinite(request) or not len(usage):
            return
        r = max(request, 1e-12)
        self.slack += float(np.clip((r - usage) / r, 0.0, None).sum())
        self.over += int(np.sum(usage > request))
        self.steps += len(usage)


def cost(tallies: list[Tally], budget: float, weight: float) -> tuple[float, int]:
    """(mean slack + weight x max(0, violation rate - budget), steps) over `tallies` (NaN: no steps)."""
    steps = sum(t.steps for t in tallies)
    if not steps:
        return float("nan"), 0
    rate = sum(t.over for t in tallies) / steps
    return sum(t.slack for t in tallies) / steps + weight * max(0.0, rate - budget), steps


@dataclass
class RuleChoice:
    """One series' choice between the model and the rule: what it scored, and which serves today."""

    tallies: dict[int, tuple[Tally, Tally]] = field(default_factory=dict)  # day (ns) -> (model, rule)
    last: tuple[int, float, float] | None = None  # the previous decision: origin (ns), model's and rule's requests
    day: int | None = None  # the UTC day (ns) the choice below was made for
    rule: bool = False  # the rule serves today
    why: str = ""

    def observe(self, usage: np.ndarray) -> None:
        """Score both requests of the previous decision on the steps seen since it (finite usage only)."""
        if self.last is None:
            return
        t0, model, rule = self.last
        u = np.asarray(usage, dtype=float)
        u = u[np.isfinite(u)]
        day = t0 - t0 % DAY_NS
        pair = self.tallies.setdefault(day, (Tally(), Tally()))
        pair[0].add(u, model)
        pair[1].add(u, rule)

    def decide(self, origin: int, model: float, rule: float, budget: float,
               weight: float = OVER_BUDGET) -> tuple[float, bool]:
        """(the request served from `origin`, whether it is the rule's); the day's choice made first
        when this is the day's first decision."""
        day = origin - origin % DAY_NS
        if day != self.day:
            self._choose(day, budget, weight)
        self.last = (origin, model, rule)
        return (rule, True) if self.serving else (model, False)

    @property
    def serving(self) -> bool:
        """Whether the latest decision serves the rule's request (a rule day, and the rule had one)."""
        return self.rule and self.last is not None and bool(np.isfinite(self.last[2]))

    def _choose(self, day: int, budget: float, weight: float) -> None:
        for d in [d for d in self.tallies if d < day - LOOK_DAYS * DAY_NS]:
            del self.tallies[d]
        past = [p for d, p in self.tallies.items() if d < day]
        (cm, nm), (cr, nr) = cost([p[0] for p in past], budget, weight), cost([p[1] for p in past], budget, weight)
        rate = sum(p[1].over for p in past) / nr if nr else float("nan")
        self.day = day
        self.rule = nm >= MIN_STEPS and nr >= MIN_STEPS and cr < cm
        self.why = (f"cost on the last {LOOK_DAYS} d (slack + {weight:g} x violation over the budget): model "
                    f"{cm:.3f}, seasonal rule {cr:.3f} at violation {rate:.3f} (budget {budget:g})"
                    if nm >= MIN_STEPS and nr >= MIN_STEPS else "under a day of steps scored: the model serves")


def describe_rule(choice: RuleChoice, interval_minutes: int) -> str:
    """The reason of a request the rule gave."""
    return (f"seasonal rule: the median of the next {interval_minutes} min's peak on the last {RULE_DAYS} days, "
            f"raised to the last {interval_minutes} min's peak, x{RULE_MARGIN:g}; chosen over the model for "
            f"today by {choice.why}")
