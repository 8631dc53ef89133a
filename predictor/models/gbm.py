"""Gradient-boosted quantile regression on the direct features, one model per quantile: LightGBM
or scikit-learn's HistGradientBoostingRegressor (`backend`).

`GlobalGBM` is trained across many series at once on scaled values (`fit_many`) and then
forecasts any series from its own recent past without refitting (`predict_series`): that is what
makes 10,000+ series affordable — one fit for the fleet, then only feature building per series.
`GBM` is the same model fitted on one series (DESIGN.md: ~3–4 s per series, so not the default).

A fitted model is kept as plain data (`predictor.models.trees`: scikit-learn's node arrays, or
LightGBM's text dump), never as a pickled estimator, so that the registry stores it as JSON + NumPy
arrays that cannot run code when loaded (`to_arrays` / `from_arrays`; docs/forecasting.md,
"Registry format and trust").
"""
from __future__ import annotations

from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import pandas as pd

from predictor.durations import DAY, to_timedelta
from predictor.features.direct import FEATURE_NAMES, context_of, direct_features, training_rows
from predictor.models.base import Forecaster, check_series, infer_step, non_crossing
from predictor.models.lightgbm_text import ModelTextError
from predictor.models.trees import BoosterText, QuantileTrees, _threads

ARRAYS_FORMAT = "tidewise-quantile-trees/1"  # bump when the layout of to_arrays changes
BACKENDS = ("hgb", "lightgbm")
# The opt-in LightGBM configuration measured on the dev suite (docs/forecasting.md, "Measured"):
# 200 trees of 31 leaves at rate 0.05. On the same rows LightGBM fits these trees ~1.4x faster than
# HistGradientBoosting, but a tree pass costs ~3.5x the default's 60 trees of 15 leaves (serving).
LIGHTGBM_PARAMS: dict[str, Any] = {"backend": "lightgbm", "max_iter": 200, "learning_rate": 0.05, "max_leaf_nodes": 31}


def _step_of(y: pd.Series) -> pd.Timedelta:
    return pd.Timedelta(y.index.freq) if y.index.freq is not None else infer_step(y.index)


class GlobalGBM(Forecaster):
    """One quantile GBM per requested quantile, shared by every series it was fitted on.

    Training rows: for each series, origins `origin_every` apart (at the time of day of its end
    with the default 1d) over the last `max_origins` days (each sees at most `max_past` of history
    before it), targets the next `train_horizon`. Rows are subsampled to `max_rows` (seeded) so the
    fit cost stays flat as the fleet grows (BENCHMARKS.md, "Forecast accuracy", for the fit times).
    """

    name = "gbm_global"
    # trained on rows with as little as two days before their origin (`_rows`: min_past), so two days
    # feed it; with under a week the week features are missing, as they were in those rows
    min_history: ClassVar[str] = "2d"

    def __init__(self, quantiles: Sequence[float] = (0.5, 0.9, 0.95, 0.99), max_iter: int = 60,
                 learning_rate: float = 0.1, max_leaf_nodes: int = 15, min_samples_leaf: int = 50,
                 max_origins: int = 14, train_horizon: str = "1d", max_past: str = "28d",
                 max_rows: int = 60_000, random_state: int = 0, n_threads: int | None = 1,
                 predict_stride: int = 3, backend: str = "hgb", origin_every: str = "1d"):
        self.backend = backend  # "hgb" (scikit-learn) or "lightgbm"
        self.origin_every = origin_every  # training origins this far apart (going back from a day before the end)
        self.n_threads = n_threads
        self.predict_stride = predict_stride
        self.quantiles = quantiles
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.max_origins = max_origins
        self.train_horizon = train_horizon
        self.max_past = max_past
        self.max_rows = max_rows
        self.random_state = random_state

    # fleet API --------------------------------------------------------------------------------
    def fit_many(self, series: Mapping[str, pd.Series], before: pd.Timestamp | None = None) -> "GlobalGBM":
        """Fit the shared model on every series (only on data before `before` when given)."""

        qs = np.asarray(self.quantiles, dtype=float)
        if qs.ndim != 1 or len(qs) == 0 or np.any((qs <= 0) | (qs >= 1)):
            raise ValueError(f"quantiles must be a non-empty list within (0, 1), got {self.quantiles}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r}: use one of {BACKENDS}")
        xs, ts = [], []
        step = None
        for y in series.values():
            if before is not None:
                y = y[y.index < before]
            if len(y) < 2 or y.notna().sum() < 2:
                continue
            step = _step_of(y)
            xr, tr = self._rows(y, step)
            if len(tr):
                xs.append(xr)
                ts.append(tr)
        if not xs:
            raise ValueError("no series has enough history for the global GBM: each needs at least "
                             "two days — use SeasonalNaive or wait")
        x, t = np.vstack(xs), np.concatenate(ts)
        rng = np.random.default_rng(self.random_state)
        if len(t) > self.max_rows:
            keep = np.sort(rng.choice(len(t), self.max_rows, replace=False))
            x, t = x[keep], t[keep]
        # a flash crowd can be 100 scales away: clip targets so that one series cannot dominate
        t = np.clip(t, -50, 50)
        # a feature that no row has (the week lag with under a week of history) is constant here:
        # the trees never split on it, and HistGradientBoosting cannot bin an all-NaN column
        empty = ~np.isfinite(x).any(axis=0)
        x[:, empty] = 0.0
        self.models_: list = []
        with _threads(self.n_threads):
            self._fit_models(qs, x, t)
        self.fitted_quantiles_ = tuple(float(q) for q in qs)
        self.n_rows_ = len(t)
        self.n_series_ = len(xs)
        self.step_ = step
        return self

    def _fit_models(self, qs: np.ndarray, x: np.ndarray, t: np.ndarray) -> None:
        if self.backend == "lightgbm":
            import lightgbm

            for i, q in enumerate(qs):
                lm = lightgbm.LGBMRegressor(objective="quantile", alpha=float(q), n_estimators=self.max_iter,
                                            learning_rate=self.learning_rate, num_leaves=self.max_leaf_nodes,
                                            min_child_samples=self.min_samples_leaf, random_state=self.random_state + i,
                                            n_jobs=self.n_threads or 0, verbose=-1)
                lm.fit(x, t)
                self.models_.append(BoosterText.from_booster(lm.booster_))
            return
        from sklearn.ensemble import HistGradientBoostingRegressor

        for i, q in enumerate(qs):
            m = HistGradientBoostingRegressor(loss="quantile", quantile=float(q), max_iter=self.max_iter,
                                              learning_rate=self.learning_rate, max_leaf_nodes=self.max_leaf_nodes,
                                              min_samples_leaf=self.min_samples_leaf, early_stopping=False,
                                              random_state=self.random_state + i)
            m.fit(x, t)
            self.models_.append(QuantileTrees.from_estimator(m))

    def _rows(self, y: pd.Series, step: pd.Timedelta) -> tuple[np.ndarray, np.ndarray]:
        spd = max(1, int(round(DAY / step)))
        origin = y.index[-1] + step
        every = to_timedelta(self.origin_every)
        if every <= pd.Timedelta(0) or every > DAY:
            raise ValueError(f"origin_every must lie within (0, 1d], got {self.origin_every}")
        # `max_origins` days of origins, `origin_every` apart: the first a full day before the end
        n = max(1, int(self.max_origins * (DAY / every)))
        origins = [origin - DAY - k * every for k in range(n)]
        horizon = max(1, int(round(to_timedelta(self.train_horizon) / step)))
        max_past = int(round(to_timedelta(self.max_past) / step))
        return training_rows(y, origins, horizon, min_past=2 * spd, max_past=max_past)

    def predict_series(self, y: pd.Series, horizon: int, quantiles: Sequence[float],
                       origin: pd.Timestamp | None = None) -> np.ndarray:
        """Forecast `horizon` steps of `y` from `origin` (default: its end + step) with the shared
        model, using only the values of `y` before the origin."""
        return self.predict_many([(y, origin)], horizon, quantiles)[0]

    def _offsets(self, horizon: int) -> np.ndarray:
        k = max(1, int(self.predict_stride))
        off = np.arange(0, horizon, k)
        return off if off[-1] == horizon - 1 else np.append(off, horizon - 1)

    def _rows_for(self, y: pd.Series, origin: pd.Timestamp | None, horizon: int):
        y = check_series(y)
        step = _step_of(y)
        if origin is None:
            origin = y.index[-1] + step
        past = y[y.index < origin]
        if len(past) < 2:
            raise ValueError(f"series has no history before the origin {origin}")
        spd = max(1, int(round(DAY / step)))
        max_past = int(round(to_timedelta(self.max_past) / step))
        v = past.to_numpy(dtype=np.float64)[-max_past:]
        # origin may lie beyond the end: pad the silence with NaN so that lags line up
        lead = max(0, int(round((origin - (past.index[-1] + step)) / step)))
        if lead:
            v = np.concatenate([v, np.full(lead, np.nan)])
        ctx = context_of(v, spd)
        # a series never below zero (usage, rates) is not forecast below zero: after a level drop the
        # scaled trees can land far under it (a CPU share of -735 on the dev suite's grok_asg_anomaly)
        floor = 0.0 if np.nanmin(v) >= 0 else -np.inf
        return direct_features(v, origin, step, horizon, ctx, self._offsets(horizon)), ctx, floor

    def predict_many(self, items: Sequence[tuple[pd.Series, pd.Timestamp | None]], horizon: int,
                     quantiles: Sequence[float]) -> list[np.ndarray]:
        """Forecast many series in one batch: features per series, one tree pass per quantile over
        all rows. Predictions are made every `predict_stride` steps and interpolated between."""
        if not hasattr(self, "models_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit_many(series) or fit(y) first")
        qs = tuple(float(q) for q in quantiles)
        missing = [q for q in qs if q not in self.fitted_quantiles_]
        if missing:
            raise ValueError(f"{self.name} was fitted for quantiles {list(self.fitted_quantiles_)}, not {missing}; "
                             "refit with quantiles=... including them")
        if not items:
            return []
        rows = [self._rows_for(y, o, horizon) for y, o in items]
        x = np.vstack([r[0] for r in rows])
        with _threads(self.n_threads):
            z = np.column_stack([self.models_[self.fitted_quantiles_.index(q)].predict(x, self.n_threads) for q in qs])
        off = self._offsets(horizon)
        full = np.arange(horizon)
        out = []
        for i, (_, ctx, floor) in enumerate(rows):
            zi = z[i * len(off):(i + 1) * len(off)]
            if len(off) != horizon:
                zi = np.column_stack([np.interp(full, off, zi[:, j]) for j in range(len(qs))])
            out.append(non_crossing(np.maximum(ctx.level + ctx.scale * zi, floor), np.asarray(qs)))
        return out

    # plain-data persistence (the registry's format) ----------------------------------------------
    def to_arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able description, NumPy arrays) of the fitted model: what `from_arrays` rebuilds
        it from, and all the registry stores of it."""
        if not hasattr(self, "models_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted: nothing to save")
        arrays: dict[str, np.ndarray] = {}
        for i, m in enumerate(self.models_):
            if isinstance(m, BoosterText):  # LightGBM's text dump, as UTF-8 bytes
                arrays[f"q{i}.lightgbm"] = np.frombuffer(m.text.encode("utf-8"), dtype=np.uint8)
                continue
            arrays[f"q{i}.baseline"] = m.baseline
            arrays[f"q{i}.offsets"] = m.offsets
            for k, v in m.fields.items():
                arrays[f"q{i}.{k}"] = v
        meta = {"format": ARRAYS_FORMAT, "model": self.name,
                "params": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.get_params().items()},
                "fitted_quantiles": list(self.fitted_quantiles_), "feature_names": list(FEATURE_NAMES),
                "n_rows": int(self.n_rows_), "n_series": int(self.n_series_),
                "step_seconds": None if self.step_ is None else int(pd.Timedelta(self.step_).total_seconds())}
        return meta, arrays

    @classmethod
    def from_arrays(cls, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> "GlobalGBM":
        """Rebuild a fitted model from `to_arrays` output; ValueError when it does not fit this
        version of Tidewise (other format, other features, missing or malformed arrays)."""
        if meta.get("format") != ARRAYS_FORMAT:
            raise ValueError(f"model format {meta.get('format')!r}, this tidewise reads {ARRAYS_FORMAT!r}")
        if list(meta.get("feature_names") or []) != list(FEATURE_NAMES):
            raise ValueError("the model was trained on other features than this tidewise computes")
        params = dict(meta.get("params") or {})
        known = cls().get_params()
        if set(params) - set(known):
            raise ValueError(f"unknown model parameter(s) {sorted(set(params) - set(known))}")
        if isinstance(params.get("quantiles"), list):
            params["quantiles"] = tuple(params["quantiles"])
        gm = cls(**params)
        qs = tuple(float(q) for q in meta["fitted_quantiles"])
        models: list[QuantileTrees | BoosterText] = []
        for i in range(len(qs)):
            prefix = f"q{i}."
            if gm.backend == "lightgbm":
                if prefix + "lightgbm" not in arrays or arrays[prefix + "lightgbm"].dtype != np.uint8:
                    raise ValueError(f"the LightGBM model of quantile {qs[i]:g} is missing")
                try:
                    models.append(BoosterText(arrays[prefix + "lightgbm"].tobytes().decode("utf-8"), len(FEATURE_NAMES)))
                except ModelTextError as exc:
                    raise ModelTextError(f"the LightGBM model of quantile {qs[i]:g}: {exc}") from None
                continue
            fields = {k[len(prefix):]: v for k, v in arrays.items()
                      if k.startswith(prefix) and k not in (prefix + "baseline", prefix + "offsets")}
            if prefix + "baseline" not in arrays or prefix + "offsets" not in arrays:
                raise ValueError(f"the arrays of quantile {qs[i]:g} are missing")
            models.append(QuantileTrees(arrays[prefix + "baseline"], fields, arrays[prefix + "offsets"],
                                        len(FEATURE_NAMES)))
        gm.models_ = models
        gm.fitted_quantiles_ = qs
        gm.n_rows_ = int(meta.get("n_rows", 0))
        gm.n_series_ = int(meta.get("n_series", 0))
        step = meta.get("step_seconds")
        gm.step_ = None if step is None else pd.Timedelta(seconds=int(step))
        return gm

    # single-series contract ----------------------------------------------------------------------
    def _fit(self, y: pd.Series) -> None:
        self.fit_many({"y": y})
        self.step_ = _step_of(y)
        self.history_ = y.iloc[-int(round(to_timedelta(self.max_past) / self.step_)):].copy()

    def _predict(self, horizon: int, quantiles: np.ndarray) -> np.ndarray:
        return self.predict_series(self.history_, horizon, [float(q) for q in quantiles])


class GBM(GlobalGBM):
    """The same quantile GBM fitted on one series alone (`fit(y)`)."""

    name = "gbm"
    min_history = "3d"  # fitted on its own rows: an origin needs two days before it and a day after

    def __init__(self, quantiles: Sequence[float] = (0.5, 0.9, 0.95, 0.99), max_iter: int = 60,
                 learning_rate: float = 0.1, max_leaf_nodes: int = 15, min_samples_leaf: int = 40,
                 max_origins: int = 21, train_horizon: str = "1d", max_past: str = "28d",
                 max_rows: int = 50_000, random_state: int = 0, n_threads: int | None = 1,
                 predict_stride: int = 3):
        super().__init__(quantiles, max_iter, learning_rate, max_leaf_nodes, min_samples_leaf, max_origins,
                         train_horizon, max_past, max_rows, random_state, n_threads, predict_stride)


assert len(FEATURE_NAMES) > 0
