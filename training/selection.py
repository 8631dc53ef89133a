"""Backtest and choose a model for every series, in-process, over joblib or on a Dask cluster: the
per-series half of a training run (`training.pipeline.train`; `training.sharded` runs the chunks on
Dask workers). One bad series is recorded with its error and skipped."""
from __future__ import annotations

from typing import Any, Callable

import pandas as pd

from predictor.models.gbm import GlobalGBM
from predictor.pipeline.forecasting import ForecastRequest, select_series
from predictor.types import Choice


def select_chunk(items: list[tuple[str, pd.Series]], req: ForecastRequest, gm: GlobalGBM | None,
                  candidates: tuple[str, ...] = ()) -> list[tuple[str, Choice | None, str | None]]:
    out: list[tuple[str, Choice | None, str | None]] = []
    for key, y in items:
        try:
            origin = req.origin if req.origin is not None else y.index[-1] + req.step
            # named candidates run without the global model (a benchmark's cheap set)
            choice = select_series(key, y, req, origin, None if candidates else gm, candidates or None)
            out.append((key, choice, None))
        except Exception as exc:  # noqa: BLE001 - one bad series is recorded and skipped
            out.append((key, None, f"{type(exc).__name__}: {exc}"))
    return out


def _chunks(items: list, n: int) -> list[list]:
    return [items[i:i + n] for i in range(0, len(items), max(1, n))]


def run_selection(
    series: dict[str, pd.Series],
    req: ForecastRequest,
    gm: GlobalGBM | None,
    *,
    jobs: int = 1,
    dask_client: Any = None,
    chunk: int = 50,
    progress: Callable[[int], None] | None = None,
    candidates: tuple[str, ...] = (),
) -> dict[str, tuple[Choice | None, str | None]]:
    """Backtest and choose for every series: in-process, over joblib, or on a Dask cluster."""
    chunks = _chunks(sorted(series.items()), chunk)
    results: list[list[tuple[str, Choice | None, str | None]]] = []
    if dask_client is not None:
        from dask.distributed import as_completed

        gm_f = dask_client.scatter(gm, broadcast=True) if gm is not None else None
        req_f = dask_client.scatter(req, broadcast=True)
        futures = [dask_client.submit(select_chunk, c, req_f, gm_f, candidates, pure=False) for c in chunks]
        for fut in as_completed(futures):
            res = fut.result()
            results.append(res)
            if progress:
                progress(len(res))
    elif jobs != 1 and len(chunks) > 1:
        from joblib import Parallel, delayed

        for res in Parallel(n_jobs=jobs, return_as="generator_unordered")(delayed(select_chunk)(c, req, gm, candidates) for c in chunks):
            results.append(res)
            if progress:
                progress(len(res))
    else:
        for c in chunks:
            res = select_chunk(c, req, gm, candidates)
            results.append(res)
            if progress:
                progress(len(res))
    return {k: (ch, err) for part in results for k, ch, err in part}
