"""Rolling-origin backtests and per-series model choice (DESIGN.md, "Training pipeline").

For each series: fold origins one day apart before the forecast origin (same time of day), each
candidate fitted on the data before a fold and scored on the next day. Every candidate's quantiles
are conformally calibrated on the *other* folds' residuals (cross-fitting, so the score is honest),
and the series gets the ensemble of the eligible seasonal models and the global GBM, unless a single
candidate's pinball loss at the decision quantile — a loss under which running short costs 19x more
than over-provisioning at q0.95 — is clearly lower (ENSEMBLE_MARGIN).

Seasonality gates the candidates: a series without a daily cycle (ACF at one day < 0.3) is never
given a daily-seasonal model, however it scored, and a weekly model needs a weekly cycle. History
gates them too: each model declares the history it needs (`Forecaster.history_needed`), and a
model needing more than serving fetches (`max_history`) is never a candidate — serving could not
feed it and would fall back to something else, every run.
This lives in `predictor.pipeline` (not `training`) because `tidewise forecast` without a registry trains on
its input; `training` runs the same code for the fleet and writes the result to the registry.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from predictor.durations import DAY, WEEK, format_duration
from predictor.features.seasonality import SEASONAL_ACF, acf_at
from predictor.models import MODELS, Forecaster
from predictor.pipeline.calibration import apply_shifts, conformal_shifts, coverage, pinball
from predictor.types import ENSEMBLE, GLOBAL, Choice

log = logging.getLogger(__name__)

DECISION_QUANTILE = 0.95
REFERENCE = "seasonal_naive_daily"  # skill is measured against it (the benchmark baseline)
# Members of the ensemble candidate, when eligible: the mean of their quantiles is usually better
# than any one of them, and far less sensitive to which model won the last three days.
# Measured on the dev suite (BENCHMARKS.md): the mean of seasonal median, STL and the global GBM
# beat every single model and the per-series winner of a three-day backtest, whose choice is mostly
# noise; seasonal naive in the mix made it worse (it copies yesterday's spikes).
ENSEMBLE_MEMBERS = ("seasonal_median", "stl", GLOBAL)
# The ensemble is kept unless another eligible candidate's backtest loss is under 0.8x its own:
# three backtest days cannot tell apart models that differ by less.
ENSEMBLE_MARGIN = 0.8
# Conformal shifts from ~3 days of residuals are noisy (within-day errors are correlated); half of
# the shift is applied, the rest is left to each model's own residual quantiles (7 days). On the dev
# suite this scored better than either the full shift or none.
SHIFT_WEIGHT = 0.5


@dataclass(frozen=True)
class Candidate:
    name: str
    make: Callable[[], Forecaster]
    needs: str = ""  # "", "day" or "week": the cycle that must be present to be chosen
    min_history: pd.Timedelta = 2 * DAY  # the model's own declaration (Forecaster.history_needed)


def default_candidates(max_history: pd.Timedelta | None = None) -> list[Candidate]:
    """The per-series candidates; with `max_history`, only those that this much history feeds."""
    cycles = {"seasonal_naive_daily": "day", "seasonal_naive_weekly": "week", "seasonal_median": "day",
              "stl": "day", "decaying_histogram": ""}
    out = [Candidate(name, MODELS[name], need, MODELS[name]().history_needed()) for name, need in cycles.items()]
    return [c for c in out if max_history is None or c.min_history <= max_history]


def fold_origins(y: pd.Series, origin: pd.Timestamp, folds: int, min_train: pd.Timedelta) -> list[pd.Timestamp]:
    """Up to `folds` origins one day apart before `origin`, each with `min_train` of data before."""
    out = []
    for k in range(folds, 0, -1):
        o = origin - k * DAY
        if o - y.index[0] >= min_train and (y.index < o).any():
            out.append(o)
    return out


def _slice_before(y: pd.Series, o: pd.Timestamp) -> pd.Series:
    return y[y.index < o]


def _actual(y: pd.Series, o: pd.Timestamp, steps: int, step: pd.Timedelta) -> np.ndarray:
    grid = pd.date_range(o, periods=steps, freq=step)
    return y.reindex(grid).to_numpy(dtype=float)


def backtest(
    y: pd.Series,
    origin: pd.Timestamp,
    step: pd.Timedelta,
    quantiles: Sequence[float],
    candidates: Sequence[Candidate],
    folds: int = 3,
    horizon: int | None = None,
    global_predict: Callable[[pd.Series, int, pd.Timestamp], np.ndarray] | None = None,
) -> tuple[list[pd.Timestamp], dict[str, np.ndarray], np.ndarray, dict[str, str]]:
    """Fold forecasts of each candidate: (origins, {name: (folds, h, nq)}, actual (folds, h), errors)."""
    h = horizon or int(DAY / step)
    origins = fold_origins(y, origin, folds, 2 * DAY)
    actual = np.array([_actual(y, o, h, step) for o in origins]).reshape(len(origins), h)
    preds: dict[str, np.ndarray] = {}
    errors: dict[str, str] = {}
    for c in candidates:
        out = []
        try:
            for o in origins:
                past = _slice_before(y, o)
                span = past.index[-1] - past.index[0] + step
                if span < c.min_history:
                    raise ValueError(f"{format_duration(span)} of history before {o.isoformat()}, "
                                     f"needs {format_duration(c.min_history)}")
                lead = max(0, int(round((o - (past.index[-1] + step)) / step)))
                v = c.make().forecast(past, lead + h, quantiles)[lead:]
                out.append(v)
        except (ValueError, np.linalg.LinAlgError) as exc:
            errors[c.name] = str(exc)
            continue
        preds[c.name] = np.array(out).reshape(len(origins), h, len(quantiles))
    if global_predict is not None:
        try:
            preds[GLOBAL] = np.array([global_predict(_slice_before(y, o), h, o) for o in origins]).reshape(len(origins), h, len(quantiles))
        except (ValueError, RuntimeError) as exc:
            errors[GLOBAL] = str(exc)
    return origins, preds, actual, errors


def cross_fitted(pred: np.ndarray, actual: np.ndarray, quantiles: Sequence[float]) -> np.ndarray:
    """Calibrate each fold with shifts learned on the other folds (no fold sees its own errors)."""
    nf = pred.shape[0]
    out = np.empty_like(pred)
    for f in range(nf):
        others = [g for g in range(nf) if g != f]
        if others:
            sh = SHIFT_WEIGHT * conformal_shifts(actual[others].ravel(), pred[others].reshape(-1, pred.shape[2]), quantiles)
        else:
            sh = np.zeros(len(quantiles))
        out[f] = apply_shifts(pred[f], sh, quantiles)
    return out


def decision_index(quantiles: Sequence[float], decision: float = DECISION_QUANTILE) -> int:
    qs = list(quantiles)
    return qs.index(decision) if decision in qs else int(np.argmin([abs(q - decision) for q in qs]))


def choose(
    key: str,
    y: pd.Series,
    step: pd.Timedelta,
    origins: list[pd.Timestamp],
    preds: Mapping[str, np.ndarray],
    actual: np.ndarray,
    quantiles: Sequence[float],
    candidates: Sequence[Candidate],
    errors: Mapping[str, str] | None = None,
) -> Choice:
    """Pick the eligible candidate with the lowest cross-fitted pinball at the decision quantile."""
    qs = tuple(float(q) for q in quantiles)
    j = decision_index(qs)
    before = _slice_before(y, origins[0]) if origins else y
    day, week = acf_at(before, DAY, step), acf_at(before, WEEK, step)
    has = {"": True, "day": bool(np.isfinite(day) and day >= SEASONAL_ACF),
           "week": bool(np.isfinite(week) and week >= SEASONAL_ACF)}
    needs = {c.name: c.needs for c in candidates}
    needs.setdefault(GLOBAL, "")
    members = [m for m in ENSEMBLE_MEMBERS if m in preds and has.get(needs.get(m, ""), True)]
    if len(members) >= 2:
        preds = dict(preds)
        preds[ENSEMBLE] = np.mean([preds[m] for m in members], axis=0)
        needs[ENSEMBLE] = ""
    scale = float(np.nanmean(np.abs(before.to_numpy()))) if before.notna().any() else 1.0
    scale = scale if np.isfinite(scale) and scale > 0 else 1.0
    scores: dict[str, dict] = {}
    for name, p in preds.items():
        cal = cross_fitted(p, actual, qs)
        pb = pinball(actual.ravel(), cal.reshape(-1, len(qs)), qs) / scale
        scores[name] = {"pinball": [float(v) for v in pb], "pinball_dq": float(pb[j]),
                        "coverage": coverage(actual.ravel(), cal[:, :, j].ravel()),
                        "eligible": has.get(needs.get(name, ""), True)}
    eligible = {n: s for n, s in scores.items() if s["eligible"] and np.isfinite(s["pinball_dq"])}
    if not eligible:
        raise ValueError(f"series {key}: no candidate could be backtested ({dict(errors or {})})")
    best = min(eligible, key=lambda n: eligible[n]["pinball_dq"])
    if ENSEMBLE in eligible and eligible[best]["pinball_dq"] >= ENSEMBLE_MARGIN * eligible[ENSEMBLE]["pinball_dq"]:
        best = ENSEMBLE
    shifts = SHIFT_WEIGHT * conformal_shifts(actual.ravel(), preds[best].reshape(-1, len(qs)), qs)
    ref = scores.get(REFERENCE, {}).get("pinball_dq")
    skill = eligible[best]["pinball_dq"] / ref if ref and np.isfinite(ref) and ref > 0 else None
    gated = sorted(n for n, s in scores.items() if not s["eligible"])
    reason = (f"lowest pinball@{qs[j]:g} over {len(origins)} backtest day(s) "
              f"(ACF day {day:.2f}, week {week:.2f})" + (f"; not eligible without their cycle: {', '.join(gated)}" if gated else ""))
    return Choice(key, best, qs, [float(s) for s in shifts], len(origins), float(day), float(week), scores,
                  skill, scores[best]["coverage"], scale, reason, members if best == ENSEMBLE else [])
