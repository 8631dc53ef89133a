"""The default VPA decision of `tidewise replay vpa` (issue 24): the request for the next interval is
the hour-peak model's forecast of that interval's peak, read at the series' violation-budget level.

`DecisionTimeTrainer` (features `hour_peak`) fits one global quantile model of the next interval's
peak for the fleet, on every replayed series' samples before the day (no look-ahead); each series
then walks its own `BudgetLevel` (predictor.pipeline.calibration): after each interval the level
moves by how much the share of its steps over the request missed the budget. The walk starts
`WARM` before the first decision, so the first scored decision is already calibrated, as serve's
would be after a week. Where no model or no forecast is available (the fleet's past too short, a
gap in the features) the caller falls back to the day-ahead forecast.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from autoscaler.logic.rule_choice import RuleChoice, describe_rule, rule_request
from predictor.models.decision_time import DEFAULT_BACKEND
from predictor.pipeline.calibration import PEAK_LEVELS as LEVELS
from predictor.pipeline.calibration import BudgetLevel
from predictor.timestamps import epoch_ns
from studies.replay.decision_time import DecisionTimeTrainer
from studies.replay.decisions import STEP

WARM = pd.Timedelta("7D")  # the budget level walks from this long before the first decision
REFIT_DAYS = 7  # replay refits the fleet model weekly (serve's registry daily): a week of fits saved
PARAMS: dict[str, int] = {}  # DecisionTimeGBM's defaults (80 trees of 15 leaves, 30,000 rows): larger measured worse
TRAIN_DAYS = pd.Timedelta("35D")  # history per series a fit reads (the whole past measured worse: gap 0.37 vs 0.40)


def hour_peak_trainer(series: dict[str, pd.Series], every: pd.Timedelta, backend: str = DEFAULT_BACKEND
                      ) -> DecisionTimeTrainer:
    """The fleet's hour-peak model for decisions every `every` (its span)."""
    return DecisionTimeTrainer(series, max(1, int(every // STEP)), backend, quantiles=LEVELS, features="hour_peak",
                               refit_days=REFIT_DAYS, train_days=TRAIN_DAYS, params=dict(PARAMS))


@dataclass
class HourPeakRequests:
    """One series' requests: `request_at(y, t)` is the workload total for [t, t + every), or None."""

    key: str
    trainer: DecisionTimeTrainer
    budget: float
    every: pd.Timedelta
    rule_candidate: bool = True  # VpaSettings.rule_candidate: the seasonal rule competes, once a UTC day
    level: BudgetLevel = field(init=False)
    choice: RuleChoice = field(default_factory=RuleChoice)
    _raw: dict[pd.Timestamp, np.ndarray] = field(default_factory=dict)
    _days: set[pd.Timestamp] = field(default_factory=set)
    _last: tuple[pd.Timestamp, float] | None = None  # the previous decision, to learn from once seen

    def __post_init__(self) -> None:
        self.level = BudgetLevel(self.budget)

    @property
    def serving_rule(self) -> bool:
        """Whether the latest request is the seasonal rule's (`autoscaler.logic.rule_choice`)."""
        return self.rule_candidate and self.choice.serving

    @property
    def label(self) -> str:
        return "seasonal_rule" if self.serving_rule else f"hour_peak_{self.trainer.backend}"

    @property
    def quantile(self) -> float:
        """The level of the predicted peak the request is read at (the rule's: a median of peaks)."""
        return 0.5 if self.serving_rule else self.level.tau

    def _day(self, y: pd.Series, day: pd.Timestamp) -> None:
        """Raw quantiles at every origin of `day`, each from the samples before it."""
        self._days.add(day)
        model = self.trainer.model_for(day)
        if model is None:
            return
        win = y[(y.index >= day - self.trainer.context) & (y.index < day + pd.Timedelta("1D"))]
        if not len(win):
            return
        win = win.asfreq(STEP)
        if win.index[-1] < day:  # the origin is the step after the last sample
            win = win.reindex(pd.date_range(win.index[0], day, freq=STEP))
        q, _ = model.predict_series(win)
        for i in np.flatnonzero((win.index >= day) & np.all(np.isfinite(q), axis=1)):
            self._raw[win.index[i]] = q[i]

    def request_at(self, y: pd.Series, t: pd.Timestamp) -> float | None:
        """The request for the interval from `t` (learning first from the interval before it)."""
        if self._last is not None:
            t0, r0 = self._last
            seen = y[(y.index >= t0) & (y.index < t)].to_numpy(dtype=float)
            self.level.observe(seen, r0)
            self.choice.observe(seen)
        if t.floor("D") not in self._days:
            self._day(y, t.floor("D"))
        q = self._raw.pop(t, None)
        if q is None:
            self._last = self.choice.last = None
            return None
        request = max(self.level.request(q, LEVELS), 0.0)
        self._last = (t, request)
        if not self.rule_candidate:
            return request
        rule = rule_request(y.to_numpy(dtype=float), epoch_ns(y.index), t.value, self.every.value)
        served, _ = self.choice.decide(t.value, request, rule, self.budget)
        return served

    def warm_up(self, y: pd.Series, start: pd.Timestamp) -> None:
        """Walk the level over the `WARM` before `start` (the decisions there are not scored)."""
        for t in pd.date_range(max(start - WARM, y.index[0].ceil("h")), start, freq=self.every, inclusive="left"):
            self.request_at(y, t)

    def why(self) -> str:
        """The reason step of the latest request."""
        if self.serving_rule:
            return describe_rule(self.choice, int(self.every / pd.Timedelta("1min")))
        return self.level.describe(self.label, self.every)
