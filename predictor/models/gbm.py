"""Gradient-boosted quantile regression on the direct features (scikit-learn's
HistGradientBoostingRegressor, one model per quantile).

`GlobalGBM` is trained across many series at once on scaled values (`fit_many`) and then
forecasts any series from its own recent past without refitting (`predict_series`): that is what
makes 10,000+ series affordable — one fit for the fleet, then only feature building per series.
`GBM` is the same model fitted on one series (DESIGN.md: ~3–4 s per series, so not the default).

A fitted model is kept as plain data (`QuantileTrees`: node arrays and a baseline per quantile),
not as scikit-learn objects, so that the registry stores it as JSON + NumPy arrays that cannot run
code when loaded (`to_arrays` / `from_arrays`; docs/forecasting.md, "Registry format and trust").
"""
from __future__ import annotations

from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import pandas as pd

from predictor.durations import DAY, to_timedelta
from predictor.features.direct import FEATURE_NAMES, context_of, direct_features, training_rows
from predictor.models.base import Forecaster, check_series, infer_step, non_crossing

ARRAYS_FORMAT = "tidewise-quantile-trees/1"  # bump when the layout of to_arrays changes
# What prediction from raw features reads of a node; the other fields of scikit-learn's node record
# (count, gain, depth, bin_threshold) are kept for inspection and may be absent in other versions.
PREDICT_FIELDS = ("value", "feature_idx", "num_threshold", "missing_go_to_left", "left", "right", "is_leaf",
                  "is_categorical", "bitset_idx")


def _threads(n: int | None):
    """Cap OpenMP threads: on a shared 2-core machine an unbounded pool oversubscribes and one fit
    runs ~10x slower (measured here: 24 s -> 2.9 s for the same 16k-row fit). None = no cap; fan
    out across series with processes (joblib, Dask) instead."""
    import contextlib

    if n is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=n, user_api="openmp")


def _step_of(y: pd.Series) -> pd.Timedelta:
    return pd.Timedelta(y.index.freq) if y.index.freq is not None else infer_step(y.index)


def _omp_threads(n: int | None) -> int:
    """Threads of one tree pass: scikit-learn's own rule (respects the `_threads` cap and cgroup
    CPU quotas), or 1 where that private helper is gone."""
    try:
        from sklearn.utils._openmp_helpers import _openmp_effective_n_threads
    except ImportError:
        return 1
    return int(_openmp_effective_n_threads(n))


class QuantileTrees:
    """One fitted quantile model as plain data: a baseline plus trees whose nodes are concatenated
    into one array per field (`offsets[i]:offsets[i+1]` are tree i's nodes, children indexed
    within their tree). Predicting adds the trees to the baseline in fitting order with
    scikit-learn's compiled tree walker, exactly as `HistGradientBoostingRegressor.predict` does,
    so the values are bit-identical to the estimator's (tests/predictor/test_registry_format.py).

    The constructor checks the structure (children after their parent and inside their tree,
    feature indices in range, no categorical splits): the tree walker does not bound-check, and
    arrays read from disk must not be able to make it read outside them or loop forever.
    """

    def __init__(self, baseline: np.ndarray, fields: Mapping[str, np.ndarray], offsets: np.ndarray,
                 n_features: int):
        from sklearn.ensemble._hist_gradient_boosting.common import PREDICTOR_RECORD_DTYPE
        from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor

        self.baseline = np.asarray(baseline, dtype=np.float64).reshape(1, 1)
        self.offsets = np.asarray(offsets)
        self.n_features = int(n_features)
        if self.offsets.ndim != 1 or self.offsets.dtype.kind not in "iu" or len(self.offsets) < 1 \
                or self.offsets[0] != 0 or np.any(np.diff(self.offsets) < 1):
            raise ValueError("tree offsets must start at 0 and increase")
        n = int(self.offsets[-1])
        missing = [f for f in PREDICT_FIELDS if f not in fields]
        if missing:
            raise ValueError(f"tree nodes lack the field(s) {missing}")
        self.fields = {k: np.asarray(v) for k, v in fields.items() if k in PREDICTOR_RECORD_DTYPE.names}
        for k, v in self.fields.items():
            if v.shape != (n,) or v.dtype.kind not in "iufb":
                raise ValueError(f"tree node field {k!r} has shape {v.shape} and dtype {v.dtype}; expected ({n},) numbers")
        f = self.fields
        tree = np.repeat(np.arange(len(self.offsets) - 1), np.diff(self.offsets))
        local = np.arange(n) - self.offsets[tree]
        size = np.diff(self.offsets)[tree]
        inner = f["is_leaf"] == 0
        for child in ("left", "right"):
            c = f[child].astype(np.int64)
            if np.any(inner & ((c <= local) | (c >= size))):
                raise ValueError(f"a tree node's {child} child lies outside its tree or before the node")
        feat = f["feature_idx"].astype(np.int64)
        if np.any(inner & ((feat < 0) | (feat >= self.n_features))):
            raise ValueError(f"a tree node splits on a feature outside 0..{self.n_features - 1}")
        if np.any(f["is_categorical"] != 0):
            raise ValueError("categorical splits are not supported (the features are numeric)")
        self.predictors_ = []
        empty = np.zeros((0, 8), dtype=np.uint32)
        for a, b in zip(self.offsets[:-1], self.offsets[1:]):
            nodes = np.zeros(int(b - a), dtype=PREDICTOR_RECORD_DTYPE)
            for k, v in self.fields.items():
                nodes[k] = v[a:b]
            self.predictors_.append(TreePredictor(nodes, empty, empty))
        self._known = (np.zeros((0, 8), dtype=np.uint32), np.zeros(self.n_features, dtype=np.uint32))

    @classmethod
    def from_estimator(cls, model: Any) -> "QuantileTrees":
        """The plain data of a fitted single-output HistGradientBoostingRegressor."""
        trees = [it[0] for it in model._predictors]
        offsets = np.concatenate([[0], np.cumsum([len(t.nodes) for t in trees])]).astype(np.int64)
        names = trees[0].nodes.dtype.names if trees else ()
        fields = {k: np.concatenate([t.nodes[k] for t in trees]) for k in names}
        if "feature_idx" in fields:
            fields["feature_idx"] = fields["feature_idx"].astype(np.int64)  # intp is platform-sized
        return cls(model._baseline_prediction, fields, offsets, int(model.n_features_in_))

    def predict(self, x: np.ndarray, n_threads: int | None = None) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"expected {self.n_features} features, got array of shape {x.shape}")
        threads = _omp_threads(n_threads)
        raw = np.zeros((x.shape[0], 1), dtype=np.float64, order="F")
        raw += self.baseline
        for p in self.predictors_:
            raw[:, 0] += p.predict(x, *self._known, threads)
        return raw.ravel()


class GlobalGBM(Forecaster):
    """One quantile GBM per requested quantile, shared by every series it was fitted on.

    Training rows: for each series, origins at the same time of day as its end, one day apart,
    over the last `max_origins` days (each sees at most `max_past` of history before it), targets
    the next `train_horizon`. Rows are subsampled to `max_rows` (seeded) so the fit cost stays flat
    as the fleet grows: 60,000 rows x 4 quantiles x 60 trees ≈ 5 s on one core here.
    """

    name = "gbm_global"
    # trained on rows with as little as two days before their origin (`_rows`: min_past), so two days
    # feed it; with under a week the week features are missing, as they were in those rows
    min_history: ClassVar[str] = "2d"

    def __init__(self, quantiles: Sequence[float] = (0.5, 0.9, 0.95, 0.99), max_iter: int = 60,
                 learning_rate: float = 0.1, max_leaf_nodes: int = 15, min_samples_leaf: int = 50,
                 max_origins: int = 14, train_horizon: str = "1d", max_past: str = "28d",
                 max_rows: int = 60_000, random_state: int = 0, n_threads: int | None = 1,
                 predict_stride: int = 3):
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
        origins = [origin - k * DAY for k in range(1, self.max_origins + 1)]
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
        return direct_features(v, origin, step, horizon, ctx, self._offsets(horizon)), ctx

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
            z = np.column_stack([self.models_[self.fitted_quantiles_.index(q)].predict(x) for q in qs])
        off = self._offsets(horizon)
        full = np.arange(horizon)
        out = []
        for i, (_, ctx) in enumerate(rows):
            zi = z[i * len(off):(i + 1) * len(off)]
            if len(off) != horizon:
                zi = np.column_stack([np.interp(full, off, zi[:, j]) for j in range(len(qs))])
            out.append(non_crossing(ctx.level + ctx.scale * zi, np.asarray(qs)))
        return out

    # plain-data persistence (the registry's format) ----------------------------------------------
    def to_arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able description, NumPy arrays) of the fitted model: what `from_arrays` rebuilds
        it from, and all the registry stores of it."""
        if not hasattr(self, "models_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted: nothing to save")
        arrays: dict[str, np.ndarray] = {}
        for i, m in enumerate(self.models_):
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
        models = []
        for i in range(len(qs)):
            prefix = f"q{i}."
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
