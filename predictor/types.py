"""The data model shared by every Tidewise package (DESIGN.md, "Data model").

Only plain dataclasses live here, so that `node_enforcer` and `autoscaler` can import the types
without pulling in models or sources.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

# the reclaim plan is shared with the node agent, which must not import numpy/pandas: it lives in
# `contracts` and is re-exported here for the serving side
from contracts.reclaim import NumaReclaim, ReclaimPlan  # noqa: F401

RESOURCES = ("cpu", "memory")  # cpu in cores, memory in bytes; anything else is a business metric


@dataclass(frozen=True, order=True)
class SeriesKey:
    """`namespace / workload (kind+name) / container / resource`, or `node/<name>/resource`.

    Its string form (`id`) is what the long files carry in their `series` column:
    `shop/Deployment/frontend/app/cpu`.
    """

    namespace: str
    kind: str
    name: str
    container: str
    resource: str

    @property
    def id(self) -> str:
        return "/".join((self.namespace, self.kind, self.name, self.container, self.resource))

    @property
    def workload(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> "SeriesKey":
        parts = text.split("/")
        if len(parts) != 5 or not all(parts):
            raise ValueError(
                f"series id {text!r} is not namespace/kind/name/container/resource"
            )
        return cls(*parts)

    def __str__(self) -> str:
        return self.id


@dataclass
class Forecast:
    """One series' forecast: a horizon of steps with one column per quantile.

    `values[i, j]` is quantile `quantiles[j]` at `index[i]`; columns never cross.
    """

    series: str
    index: pd.DatetimeIndex
    quantiles: tuple[float, ...]
    values: np.ndarray
    model: str
    version: str = "adhoc"
    backtest_score: float | None = None
    notes: list[str] = field(default_factory=list)

    def quantile(self, q: float) -> np.ndarray:
        return self.values[:, self.quantiles.index(q)]

    def to_frame(self) -> pd.DataFrame:
        out = pd.DataFrame({"series": self.series, "timestamp": self.index})
        for j, q in enumerate(self.quantiles):
            out[quantile_column(q)] = self.values[:, j]
        out["model"] = self.model
        return out


def finite_or_none(obj: Any) -> Any:
    """Recursively replace NaN and infinities by None, and numpy scalars by Python numbers."""
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def quantile_column(q: float) -> str:
    """0.95 -> `q0.95` (the forecast contract's column name)."""
    return f"q{format(float(q), 'g')}"


PROFILE_CLASSES = ("tidal", "flat", "bursty", "trending", "insufficient-history")


@dataclass
class ServiceProfile:
    """A workload resource's weekly tide and the facts the decisions need (DESIGN.md)."""

    series: str
    profile_class: str
    days_of_history: float
    step_seconds: int
    mean: float
    p50: float
    p95: float
    peak: float
    peak_window: dict[str, Any] | None
    trough_window: dict[str, Any] | None
    peak_to_trough: float | None
    seasonality_day: float
    seasonality_week: float
    burstiness: float
    trend_per_day: float
    gaps: int
    # weekday (0 = Monday) x quarter-hour -> [p50, p95]; None where the history has no sample.
    weekly_curve_p50: list[list[float | None]] = field(default_factory=list)
    weekly_curve_p95: list[list[float | None]] = field(default_factory=list)
    usage_per_traffic: float | None = None
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: non-finite numbers become None (strict JSON has no NaN)."""
        d = finite_or_none(asdict(self))
        d["class"] = d.pop("profile_class")
        return d


@dataclass
class GapReport:
    """Gaps found while regularising one series: where and how long (in steps)."""

    series: str
    gaps: list[tuple[pd.Timestamp, int]]

    @property
    def missing_steps(self) -> int:
        return sum(n for _, n in self.gaps)


# Two stored model names that are not one model fitted on the series: the GBM shared by the fleet
# (fitted once, loaded from the registry) and the mean of an ensemble's members.
GLOBAL = "gbm_global"
ENSEMBLE = "ensemble"


@dataclass
class Choice:
    """What one series' backtest decided (`predictor.pipeline.selection.choose`) and what the
    registry stores for it: the chosen model, for the ensemble its members, its calibration and
    the scores. `predictor.pipeline.choice.ChoiceForecaster` runs it."""

    series: str
    model: str
    quantiles: tuple[float, ...]
    shifts: list[float]
    folds: int
    acf_day: float
    acf_week: float
    scores: dict[str, dict] = field(default_factory=dict)  # model -> pinball per q, pinball_dq, coverage
    skill: float | None = None  # chosen pinball@dq / reference pinball@dq (< 1 is better)
    coverage: float | None = None  # cross-fitted coverage of the chosen model's decision quantile
    scale: float = 1.0  # mean |y| before the first fold (scores are divided by it)
    reason: str = ""
    members: list[str] = field(default_factory=list)  # for the ensemble: the models averaged

    def to_dict(self) -> dict:
        d = asdict(self)
        d["quantiles"] = list(self.quantiles)
        return finite_or_none(d)

    @classmethod
    def from_entry(cls, key: str, entry: Mapping[str, Any], quantiles: tuple[float, ...], reason: str) -> "Choice":
        """The choice a registry stores for series `key` (ValueError when its shifts do not match
        the quantiles); `reason` says where it came from."""
        shifts = [float(v) for v in entry.get("shifts") or [0.0] * len(quantiles)]
        if len(shifts) != len(quantiles):
            raise ValueError(f"series {key}: {len(shifts)} quantile shifts for {len(quantiles)} quantiles")
        return cls(key, entry["model"], quantiles, shifts, int(entry.get("folds", 0)),
                   float(entry.get("acf_day") or np.nan), float(entry.get("acf_week") or np.nan), {},
                   entry.get("skill"), entry.get("coverage"), float(entry.get("scale") or 1.0), reason,
                   list(entry.get("members") or []))

    def runs(self) -> list[str]:
        """The models this choice runs: the ensemble's members, or the one model."""
        return self.members or [self.model]

    @property
    def uses_global(self) -> bool:
        return self.model == GLOBAL or GLOBAL in self.members
