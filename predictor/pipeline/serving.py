"""Forecast with a loaded registry version: the stored per-series choices (model, members,
calibration) and the stored global GBM — no backtest, no refit of the global model.

`forecast_version` is the one serving entry point; it takes a `RegistryVersion` loaded once
(`predictor.registry.load_version` / `load_last_good`) and only re-checks, cheaply, that its folder
did not change on disk since. `forecast_with_registry` loads a version by path and forecasts with
it (`tidewise forecast --registry DIR`).
"""
from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from contracts.errors import InputError
from predictor.durations import format_duration
from predictor.history import History
from predictor.models.gbm import GlobalGBM
from predictor.pipeline.forecasting import ForecastRequest, forecast_from_choice, series_requests
from predictor.registry import RegistryVersion, check_unchanged, load_version
from predictor.types import Choice, Forecast

log = logging.getLogger(__name__)

GLOBAL_BATCH = 2000  # series per batched tree pass: ~580k feature rows, ~130 MB
PARALLEL_FROM = 1000  # series: under this many, one process is faster than spawning workers


def forecast_with_registry(registry_dir: str, history: History, req: ForecastRequest, jobs: int | None = None, *,
                           key: bytes | None = None) -> list[Forecast]:
    """`tidewise forecast --registry DIR`: load the latest version (verified with `key` when
    given) and forecast every series of `history` with it (`forecast_version`). The day-ahead
    forecast reads no decision-time model, so those are verified with the rest, not parsed."""
    return forecast_version(load_version(registry_dir, key=key, decision_models=False), history, req, jobs)


def forecast_version(reg: RegistryVersion, history: History, req: ForecastRequest,
                     jobs: int | None = None) -> list[Forecast]:
    """Forecast every series of `history` with a loaded version. The global model predicts all
    series that use it in batches; the cheap per-series models fan out over `jobs` processes
    (default: all cores when there are over 1,000 series). A series the version does not know
    gets the no-backtest default, and its note says so. RegistryError when the version's folder
    changed on disk since it was loaded; InputError when `req` asks for other quantiles or
    another step than the version was trained for."""
    check_unchanged(reg)
    _check_request(reg, req)
    if req.origin is None:
        req = replace(req, origin=history.end + req.step)
    reqs = series_requests(history, req)
    choices = {k: reg.choices[k] for k in history.series if k in reg.choices}
    items = list(history.series.items())
    if jobs is None:
        jobs = (os.cpu_count() or 1) if len(items) > PARALLEL_FROM else 1
    # the global model's batches run inside each chunk, so that building its feature rows (most of
    # a large fleet's cost) is spread over the workers too; a row's forecast does not depend on its batch
    if jobs == 1 or len(items) < 2:
        out = _forecast_chunk(items, reqs, choices, reg.global_model, reg.version)
    else:
        out = _forecast_parallel(items, reqs, choices, reg.global_model, reg.version, jobs)
    for f in out:
        if f.series not in reg.series:
            f.notes.append(f"not in registry {reg.version}")
    return out


def _check_request(reg: RegistryVersion, req: ForecastRequest) -> None:
    if tuple(float(q) for q in req.quantiles) != reg.quantiles:
        raise InputError(f"--quantiles {','.join(f'{q:g}' for q in req.quantiles)}: registry version {reg.version} "
                         f"was trained for {','.join(f'{q:g}' for q in reg.quantiles)}; ask for those or retrain")
    if int(req.step.total_seconds()) != int(reg.manifest.get("step_seconds", req.step.total_seconds())):
        raise InputError(f"--step {format_duration(req.step)}: registry version {reg.version} was trained at "
                         f"{reg.manifest.get('step_seconds')} s steps; use that step or retrain")


def _global_values(gm: GlobalGBM | None, items: Sequence[tuple[str, pd.Series]],
                   reqs: Mapping[str, ForecastRequest], choices: Mapping[str, Choice]) -> dict[str, np.ndarray]:
    """The global GBM's forecast of every series of `items` whose choice uses it, in batches; a
    batch that fails is left out, and those series are forecast one by one."""
    out: dict[str, np.ndarray] = {}
    if gm is None:
        return out
    series = dict(items)
    need = [k for k in series if k in choices and choices[k].uses_global]
    for i in range(0, len(need), GLOBAL_BATCH):
        chunk = need[i:i + GLOBAL_BATCH]
        first = reqs[chunk[0]]  # one request for the whole call: same steps and quantiles for every series
        try:
            vals = gm.predict_many([(series[k], reqs[k].origin) for k in chunk], first.steps, first.quantiles)
            out.update(zip(chunk, vals))
        except (ValueError, RuntimeError) as exc:  # one bad series: retry these one by one
            log.warning("batched global forecast failed (%s); forecasting %d series one by one", exc, len(chunk))
    return out


def _forecast_chunk(items: Sequence[tuple[str, pd.Series]], reqs: Mapping[str, ForecastRequest],
                    choices: Mapping[str, Choice], gm: GlobalGBM | None, version: str) -> list[Forecast]:
    gvals = _global_values(gm, items, reqs, choices)
    return [forecast_from_choice(k, y, reqs[k], choices.get(k), gm if gvals.get(k) is None else None, version,
                                 gvals.get(k))
            for k, y in items]


def _forecast_parallel(items: Sequence[tuple[str, pd.Series]], reqs: Mapping[str, ForecastRequest],
                       choices: Mapping[str, Choice], gm: GlobalGBM | None, version: str,
                       jobs: int) -> list[Forecast]:
    from joblib import Parallel, delayed

    size = max(1, len(items) // (4 * abs(jobs)))
    parts = [items[i:i + size] for i in range(0, len(items), size)]
    res = Parallel(n_jobs=jobs)(delayed(_forecast_chunk)(p, {k: reqs[k] for k, _ in p},
                                                         {k: choices[k] for k, _ in p if k in choices}, gm,
                                                         version)
                                for p in parts)
    return [f for part in res for f in part]
