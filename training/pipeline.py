"""Train a fleet: backtest every candidate per series, choose, calibrate, fit the global model,
and write a registry version — incrementally, fanned out over joblib or a Dask cluster.

Incremental rule: a series is refitted when it is new, when the data the last version saw has
changed (fingerprint of its values over the previous data window), when its error on the days
since the last version drifted above `drift_factor` times its backtest score, or when its choice is
older than `max_age`. Every other series carries its choice forward unchanged.
"""
from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from predictor.pipeline.calibration import apply_shifts, pinball
from predictor.pipeline.fallback import choose_baseline
from predictor.pipeline.forecasting import ForecastRequest, fit_global
from predictor.durations import DAY
from predictor.history import History
from predictor.pipeline.choice import ChoiceForecaster, history_needed, stored_params
from predictor.models.gbm import GlobalGBM
from predictor.registry import RegistryError, RegistryVersion, load_version, write_version
from predictor.pipeline.selection import DECISION_QUANTILE, decision_index
from predictor.timestamps import epoch_ns
from predictor.types import GLOBAL, Choice
from training.decision_time import DecisionTimeSettings, fit_decision_models
from training.selection import run_selection

log = logging.getLogger(__name__)

# The data a version saw is fingerprinted over its last two days: a rolling window drops older
# days anyway, and late corrections and backfills land in the recent past.
FINGERPRINT_SPAN = pd.Timedelta(days=2)
# What the serving loop fetches each run (autoscaler.settings.LoopSettings.history_window, same
# default): no model needing more is chosen, since serving could not feed it.
SERVING_HISTORY = pd.Timedelta(days=8)
# The report's context is the serving window at 15 min (1,000 series: ~12 MB), so that the report
# forecasts each series from as much history as serving has, with the model serving runs.
RECENT_STEP = pd.Timedelta("15min")


@dataclass
class TrainSettings:
    """How a training run backtests and when it refits."""

    quantiles: tuple[float, ...] = (0.5, 0.9, 0.95, 0.99)  # the forecast contract's defaults
    folds: int = 3  # backtest days per series (~860 residuals at 5 min for calibration)
    horizon: pd.Timedelta = DAY  # backtest horizon: the serving loop looks one day ahead
    jobs: int = 1  # joblib processes for the per-series backtests
    incremental: bool = True  # carry unchanged series forward from the latest version
    drift_factor: float = 1.5  # refit when the recent error exceeds 1.5x the backtest error
    max_age: pd.Timedelta = pd.Timedelta(days=7)  # refit every series at least weekly
    use_global: bool = True
    chunk: int = 50  # series per task: amortises the global model's transfer to workers
    # the per-series candidates by name (default: all that serving's history feeds); a named cheap
    # set keeps the same backtest, choice and calibration at a fraction of the cost (benchmarks)
    candidates: tuple[str, ...] = ()
    global_params: dict = field(default_factory=dict)  # GlobalGBM keyword arguments (defaults: gbm.py)
    serving_history: pd.Timedelta = SERVING_HISTORY  # models needing more history are never chosen
    key: bytes | None = None  # HMAC key: sign the version's manifest (predictor.registry)
    # the fleet's decision-time models (training/decision_time.py); `enabled=False`: day-ahead only
    decision_time: DecisionTimeSettings = field(default_factory=DecisionTimeSettings)


@dataclass
class TrainResult:
    version: str
    registry: str
    refitted: list[str] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    models: dict[str, int] = field(default_factory=dict)
    global_refit: bool = False
    failed: dict[str, str] = field(default_factory=dict)
    decision_time: dict[str, Any] = field(default_factory=dict)  # kind -> the decision-time model's backtest


def fingerprint(y: pd.Series, start: pd.Timestamp | None = None, end: pd.Timestamp | None = None) -> str:
    """sha256 of a series' timestamps and values within [start, end] (NaN-stable)."""
    s = y
    if start is not None:
        s = s[s.index >= start]
    if end is not None:
        s = s[s.index <= end]
    h = hashlib.sha256()
    h.update(epoch_ns(s.index).tobytes())  # nanoseconds on any pandas: a fingerprint survives an upgrade
    v = s.to_numpy(dtype=np.float64)
    nan = np.isnan(v)
    h.update(np.where(nan, 0.0, v).tobytes())
    h.update(np.packbits(nan).tobytes())
    return h.hexdigest()[:32]


def _recent_error(y: pd.Series, entry: dict[str, Any], since: pd.Timestamp, step: pd.Timedelta,
                  quantiles: Sequence[float], gm: GlobalGBM | None) -> float | None:
    """Scaled pinball at the decision quantile of the stored choice on data after `since`."""
    new = y[y.index >= since]
    if new.notna().sum() < 12:
        return None
    past = y[y.index < since]
    if len(past) < 2:
        return None
    runner = ChoiceForecaster(entry["model"], entry.get("members") or (), gm)
    try:
        f = runner.predict(past, step, len(new), quantiles, since)
        f = apply_shifts(f, np.asarray(entry.get("shifts") or np.zeros(len(quantiles))), quantiles)
    except (ValueError, RuntimeError, np.linalg.LinAlgError):
        return None
    j = decision_index(quantiles)
    return float(pinball(new.to_numpy(), f, quantiles)[j] / (entry.get("scale") or 1.0))


def plan_refits(history: History, prev, settings: TrainSettings, now_end: pd.Timestamp) -> tuple[list[str], list[str], dict[str, str]]:
    """Split series into (refit, carry) with a reason for each refit."""
    refit, carry, why = [], [], {}
    if prev is None or not settings.incremental:
        keys = sorted(history.series)
        return keys, [], {k: "first training" if prev is None else "full retrain" for k in keys}
    prev_end = pd.Timestamp(prev.manifest["data_window"]["end"])
    created_end = prev_end
    for key, y in sorted(history.series.items()):
        entry = prev.series.get(key)
        if entry is None:
            refit.append(key)
            why[key] = "new series"
            continue
        fw = entry.get("fingerprint_window")
        if fw and fingerprint(y, pd.Timestamp(fw[0]), pd.Timestamp(fw[1])) != entry.get("fingerprint"):
            refit.append(key)
            why[key] = "data seen by the last version changed"
            continue
        need = _needed(entry)
        if need is None or need > settings.serving_history:
            refit.append(key)
            why[key] = (f"{entry.get('model')} needs {need / DAY:.3g} days of history; serving fetches "
                        f"{settings.serving_history / DAY:.3g} days"
                        if need is not None else f"unknown model {entry.get('model')!r}")
            continue
        if now_end - pd.Timestamp(entry.get("fitted_end", prev_end)) >= settings.max_age:
            refit.append(key)
            why[key] = f"choice older than {settings.max_age}"
            continue
        err = _recent_error(y, entry, created_end + history.step, history.step, settings.quantiles, prev.global_model)
        ref = entry.get("pinball_dq")
        if err is not None and ref and err > settings.drift_factor * ref:
            refit.append(key)
            why[key] = f"recent error {err:.3f} > {settings.drift_factor:g} x backtest {ref:.3f}"
            continue
        carry.append(key)
    return refit, carry, why


def _needed(entry: dict[str, Any]) -> pd.Timedelta | None:
    """The history a stored entry's model needs (None: a model this tidewise does not have)."""
    try:
        return history_needed(entry.get("model", ""), entry.get("members") or ())
    except ValueError:
        return None


def train(
    history: History,
    registry_dir: str,
    settings: TrainSettings | None = None,
    *,
    dask_client: Any = None,
    progress: Callable[[int], None] | None = None,
    profiles: dict[str, dict] | None = None,
) -> TrainResult:
    """One training run over `history`; writes and returns a new registry version."""
    settings = settings or TrainSettings()
    if not history.series:
        raise ValueError("history holds no series: nothing to train")
    step, end = history.step, history.end
    prev = _previous_version(registry_dir, settings, step)
    refit, carry, why = plan_refits(history, prev, settings, end)
    req = ForecastRequest(horizon=settings.horizon, step=step, quantiles=settings.quantiles, origin=end + step,
                          folds=settings.folds, use_global=settings.use_global, max_history=settings.serving_history)
    first_fold = end + step - settings.folds * DAY  # the backtests' global models see only the data before it
    gm_backtest, gm_final, global_refit = _global_models(history, req, settings, prev, bool(refit), before=first_fold,
                                                         progress=progress)
    if progress and carry:
        progress(len(carry))
    choices = run_selection({k: history.series[k] for k in refit}, req, gm_backtest, jobs=settings.jobs,
                            dask_client=dask_client, chunk=settings.chunk, progress=progress,
                            candidates=settings.candidates)
    entries: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for key in refit:
        choice, err = choices.get(key, (None, "not run"))
        if choice is None and err:
            failed[key] = err
        entries[key] = _refit_entry(history.series[key], choice, err, step, settings, why.get(key, ""))
    if prev is not None:
        for key in carry:
            entries[key] = dict(prev.series[key])
            entries[key]["carried_from"] = prev.version
    decision_models, decision_summary = _decision_time(history, settings, entries, _decision_global(
        history, req, settings, entries, gm_backtest, before=first_fold, progress=progress))
    training = {"refitted": len(refit), "carried": len(carry), "global_refit": global_refit, "folds": settings.folds,
                "previous": prev.version if prev else None, "decision_quantile": DECISION_QUANTILE,
                "global_model": _global_summary(gm_final), "decision_time": decision_summary}
    version = write_version(
        registry_dir,
        quantiles=tuple(settings.quantiles),
        series=entries,
        data_window=(min(y.index[0] for y in history.series.values()).isoformat(), end.isoformat()),
        step_seconds=int(step.total_seconds()),
        global_model=gm_final,
        profiles=_profiles(history) if profiles is None else profiles,
        recent=recent_frame(history, settings.serving_history),
        key=settings.key,
        decision_models=decision_models,
        extra={"recent_step_seconds": int(max(step, RECENT_STEP).total_seconds()),
               "serving_history_seconds": int(settings.serving_history.total_seconds()),
               "history_needed_seconds": max((int(e.get("history_needed_seconds") or 0) for e in entries.values()), default=0),
               "training": training},
    )
    return TrainResult(version, os.path.abspath(registry_dir), refit, carry, why, _model_counts(entries),
                       global_refit, failed, decision_summary)


def _note(progress: Callable[[int], None] | None, text: str) -> None:
    """Tell of a long step between series (the fleet's models; a second, unchanged run spends its time
    there) by `advance.note` of tidewise.progress, when the caller's progress has it."""
    note = getattr(progress, "note", None)
    if note is not None:
        note(text)


def _model_counts(entries: dict[str, dict[str, Any]]) -> dict[str, int]:
    models: dict[str, int] = {}
    for e in entries.values():
        models[e["model"]] = models.get(e["model"], 0) + 1
    return dict(sorted(models.items()))


def _decision_time(history: History, settings: TrainSettings, entries: dict[str, dict[str, Any]],
                   gm_backtest: GlobalGBM | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fleet's decision-time models and their backtests (none when switched off)."""
    if not settings.decision_time.enabled:
        return {}, {}
    return fit_decision_models(history, settings.quantiles, settings.folds, settings.decision_time, entries,
                               gm_backtest)


def _decision_global(history: History, req: ForecastRequest, settings: TrainSettings,
                     entries: dict[str, dict[str, Any]], gm_backtest: GlobalGBM | None, *,
                     before: pd.Timestamp, progress: Callable[[int], None] | None = None) -> GlobalGBM | None:
    """The global model the decision-time backtest runs the day-ahead choices with: this run's
    backtest model, or, when the global model was carried (nothing refitted), one fitted again on
    the data `before` the held-out days, as the first run did. Without it every series whose choice
    uses the global GBM dropped out of the fleet's backtest: a second, unchanged `train` reported
    it over "(1 series)". Only fitted when a decision-time backtest runs and a choice needs it."""
    if settings.decision_time.enabled:  # told here: this global model, when fitted, is part of the step
        _note(progress, "fitting and backtesting the decision-time models on the fleet")
    if gm_backtest is not None or not (settings.decision_time.enabled and settings.use_global):
        return gm_backtest
    if not any(GLOBAL in (e.get("model"), *(e.get("members") or ())) for e in entries.values()):
        return None
    return fit_global(history.series, req, before=before, params=settings.global_params)


def _previous_version(registry_dir: str, settings: TrainSettings, step: pd.Timedelta) -> RegistryVersion | None:
    """The latest version to carry choices forward from (None: train every series)."""
    if not settings.incremental or not os.path.lexists(os.path.join(registry_dir, "latest")):
        return None
    try:
        prev = load_version(registry_dir, key=settings.key, decision_models=False)  # only choices are carried
    except RegistryError as exc:
        log.warning("no usable previous registry version (%s): training every series", exc)
        return None
    if prev.quantiles != tuple(settings.quantiles) or int(prev.manifest.get("step_seconds", 0)) != int(step.total_seconds()):
        log.warning("previous version has other quantiles or step: training every series")
        return None
    return prev


def _global_models(history: History, req: ForecastRequest, settings: TrainSettings, prev: RegistryVersion | None,
                   any_refit: bool, *, before: pd.Timestamp, progress: Callable[[int], None] | None = None
                   ) -> tuple[GlobalGBM | None, GlobalGBM | None, bool]:
    """(model for the backtests, fitted on data `before` the first fold; model to store;
    refitted?). Refit when anything is refitted (its backtest must not see the folds), otherwise
    carried forward with the rest."""
    if not settings.use_global:
        return None, None, False
    if not any_refit and prev is not None and prev.global_model is not None:
        _note(progress, "global model carried")
        return None, prev.global_model, False
    _note(progress, "fitting the global model")
    backtest = fit_global(history.series, req, before=before, params=settings.global_params)
    final = fit_global(history.series, req, params=settings.global_params) if backtest is not None else None
    return backtest, final, final is not None


def _global_summary(gm: GlobalGBM | None) -> dict[str, Any] | None:
    if gm is None:
        return None
    return {"rows": int(gm.n_rows_), "series": int(gm.n_series_),
            "params": {k: v for k, v in gm.get_params().items() if not isinstance(v, (list, tuple))}}


def _refit_entry(y: pd.Series, choice: Choice | None, err: str | None, step: pd.Timedelta, settings: TrainSettings,
                 why: str) -> dict[str, Any]:
    """The registry entry of a refitted series: its choice (or the no-backtest default), the
    history it needs, and the fingerprint of the data it saw."""
    if choice is None:
        model, reason = choose_baseline(y, step, settings.serving_history)
        entry: dict[str, Any] = {"model": model.label, "shifts": [0.0] * len(settings.quantiles), "folds": 0,
                                 "reason": f"no backtest: {err or reason}"}
    else:
        entry = choice.to_dict()
        entry.pop("series", None)
        entry["pinball_dq"] = choice.scores[choice.model]["pinball_dq"]
        entry["params"] = {m: stored_params(m) for m in choice.runs()}
    entry["history_needed_seconds"] = int(_needed(entry).total_seconds())  # type: ignore[union-attr]
    entry["fitted_end"] = y.index[-1].isoformat()
    fw0 = max(y.index[0], y.index[-1] - FINGERPRINT_SPAN)
    entry["fingerprint_window"] = [fw0.isoformat(), y.index[-1].isoformat()]
    entry["fingerprint"] = fingerprint(y, fw0, y.index[-1])
    entry["why_refit"] = why
    return entry


def recent_frame(history: History, span: pd.Timedelta = SERVING_HISTORY) -> pd.DataFrame:
    """The last `span` of every series at RECENT_STEP (mean), long format, for the report."""
    step = max(history.step, RECENT_STEP)
    parts = []
    for k, y in history.series.items():
        tail = y[y.index > y.index[-1] - span]
        if step != history.step:
            tail = tail.resample(step).mean()
        parts.append(pd.DataFrame({"series": k, "timestamp": tail.index, "value": tail.to_numpy(dtype=float)}))
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["series", "timestamp", "value"])
    return frame.dropna(subset=["value"])


def _profiles(history: History) -> dict[str, dict]:
    try:
        from predictor.profile import build_profiles
    except ImportError:  # the profile module is optional for training
        return {}
    try:
        return {k: p.to_dict() for k, p in build_profiles(history).items()}
    except Exception as exc:  # noqa: BLE001 - profiles decorate the report; training goes on
        log.warning("service profiles failed: %s", exc)
        return {}
