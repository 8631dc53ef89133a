"""Decision-time forecasts (issue 12): quantiles of the peak of the next `span` steps, from the
latest observations, for the decision about to be made (VPA: the next hour's peak; HPA: the demand
a start-up time from now).

`DecisionTimeGBM` is one global quantile-regression model for the fleet (features and scaling in
`predictor.features.decision`), fitted on the rows of many series at once and predicting every
origin of a series in one pass. Two backends: LightGBM ("lightgbm", the default since 2026-12-07;
stored as its own text model format) and scikit-learn's HistGradientBoosting ("hgb", stored as
`QuantileTrees`). Either way a fitted model is JSON + NumPy arrays, never a pickle.

The model gives raw quantiles; their online calibration per series is the pipeline's
(`predictor.pipeline.calibration.AdaptiveConformal`, walked by `predictor.pipeline.decision`).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from predictor.features.decision import FEATURE_NAMES, Features, decision_features, training_rows
from predictor.features.hour_peak import HOUR_PEAK_NAMES, hour_peak_features
from predictor.models.base import NotFittedError, non_crossing
from predictor.models.lightgbm_text import ModelTextError
from predictor.models.trees import BoosterText, QuantileTrees, _threads

ARRAYS_FORMAT = "tidewise-decision-time/1"  # bump when the layout of to_arrays changes
BACKENDS = ("hgb", "lightgbm")
# The default backend (`tidewise train --decision-backend`, `tidewise replay --decision-model`): the
# reference scorer on both suites (BENCHMARKS.md, "LightGBM for the decision-time models"), LightGBM
# against scikit-learn at the same trees, leaves and rows: in place gap closed 0.421 vs 0.433 on dev,
# 0.374 vs 0.336 on the 40 series dev does not read; HPA 0.480x vs 0.486x and 0.390x vs 0.388x; restart
# unchanged (its day plan is a median of the last week's hourly peaks, no model). Faster to fit at the same
# size (9 levels, `python -m benchmarks.decision_fit_cost`: 8.4 vs 12.2 CPU s at 30,000 rows, 2.2 vs 5.2
# at 5,162).
DEFAULT_BACKEND = "lightgbm"

# feature sets: "recent" (issue 12: the latest samples, a day and a week ago) and "hour_peak" (issue 24:
# the same window on each of the last 7 days and 4 weeks, the tide's slope; the VPA's default)
FEATURE_SETS: dict[str, tuple[tuple[str, ...], Features]] = {
    "recent": (tuple(FEATURE_NAMES), decision_features), "hour_peak": (HOUR_PEAK_NAMES, hour_peak_features)}


def backend_problem(backend: str) -> str | None:
    """Why `backend` cannot fit or load here (None: it can): LightGBM's library needs the system's
    OpenMP runtime (libgomp1 on Debian), which a slim image may lack."""
    if backend != "lightgbm":
        return None
    try:
        import lightgbm  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"lightgbm cannot be loaded ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    return None


class DecisionTimeGBM(BaseEstimator):
    """Global quantile model of max(y[t .. t+span-1]) given y before t (see the module doc)."""

    def __init__(self, quantiles: Sequence[float] = (0.5, 0.9, 0.95, 0.99), span: int = 12,
                 backend: str = DEFAULT_BACKEND, max_iter: int = 80, learning_rate: float = 0.1,
                 max_leaf_nodes: int = 15, min_samples_leaf: int = 40, max_rows: int = 30000, random_state: int = 0,
                 n_threads: int | None = 1, features: str = "recent"):
        self.quantiles = quantiles
        self.span = span
        self.backend = backend
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.max_rows = max_rows
        self.random_state = random_state
        self.n_threads = n_threads  # OpenMP threads of one fit (1: the shared 2-core machines here)
        self.features = features  # a FEATURE_SETS key

    @property
    def feature_names(self) -> tuple[str, ...]:
        return FEATURE_SETS[self.features][0]

    def _check_params(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r}: use one of {BACKENDS}")
        if int(self.span) < 1:
            raise ValueError(f"span must be at least 1 step, got {self.span}")
        if self.features not in FEATURE_SETS:
            raise ValueError(f"features {self.features!r}: use one of {sorted(FEATURE_SETS)}")
        qs = np.asarray(self.quantiles, dtype=float)
        if len(qs) == 0 or np.any((qs <= 0) | (qs >= 1)):
            raise ValueError(f"quantiles must lie strictly between 0 and 1, got {list(self.quantiles)}")

    def fit_many(self, series: Mapping[str, pd.Series], step: pd.Timedelta,
                 before: pd.Timestamp | None = None) -> "DecisionTimeGBM":
        """Fit on the origins of all `series` whose target window ends before `before` (none of
        `before`'s day or later is seen); at most `max_rows` rows, a seeded even subsample."""
        self._check_params()
        xs, ts = [], []
        for y in series.values():
            x, t = training_rows(y, step, int(self.span), before, features=FEATURE_SETS[self.features][1])
            xs.append(x)
            ts.append(t)
        x = np.concatenate(xs) if xs else np.zeros((0, len(self.feature_names)))
        t = np.concatenate(ts) if ts else np.zeros(0)
        if len(t) < 2 * self.min_samples_leaf:
            raise ValueError(f"{len(t)} training rows before {before}: at least {2 * self.min_samples_leaf} are "
                             "needed (about a day and an hour of history per series)")
        # a feature never seen (a week ago, on less than a week of history) is held constant: the
        # trees cannot split on it, so whatever it reads at prediction time changes nothing
        x[:, ~np.isfinite(x).any(axis=0)] = 0.0
        if len(t) > self.max_rows:
            keep = np.sort(np.random.default_rng(self.random_state).choice(len(t), self.max_rows, replace=False))
            x, t = x[keep], t[keep]
        self.models_: list[Any] = []
        with _threads(self.n_threads):
            for i, q in enumerate(np.asarray(self.quantiles, dtype=float)):
                self.models_.append(self._fit_one(float(q), x, t, self.random_state + i))
        self.step_ = pd.Timedelta(step)
        self.n_rows_ = int(len(t))
        self.n_series_ = len(series)
        return self

    def _fit_one(self, q: float, x: np.ndarray, t: np.ndarray, seed: int) -> Any:
        if self.backend == "lightgbm":
            import lightgbm

            m = lightgbm.LGBMRegressor(objective="quantile", alpha=q, n_estimators=self.max_iter,
                                       learning_rate=self.learning_rate, num_leaves=self.max_leaf_nodes,
                                       min_child_samples=self.min_samples_leaf, random_state=seed,
                                       n_jobs=self.n_threads or 0, verbose=-1)
            m.fit(x, t)
            return BoosterText.from_booster(m.booster_)
        from sklearn.ensemble import HistGradientBoostingRegressor

        m = HistGradientBoostingRegressor(loss="quantile", quantile=q, max_iter=self.max_iter,
                                          learning_rate=self.learning_rate, max_leaf_nodes=self.max_leaf_nodes,
                                          min_samples_leaf=self.min_samples_leaf, early_stopping=False,
                                          random_state=seed)
        m.fit(x, t)
        return QuantileTrees.from_estimator(m)

    def predict_scaled(self, x: np.ndarray) -> np.ndarray:
        """Quantiles [n, len(quantiles)] in scaled units (rows with NaN features are allowed)."""
        if not hasattr(self, "models_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit_many(series, step) first")
        # both take their thread count: no pool cap (threadpoolctl scans libraries, ~10 ms a call)
        cols = [m.predict(x, self.n_threads) for m in self.models_]
        return np.column_stack(cols) if cols else np.zeros((len(x), 0))

    def predict_series(self, y: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        """(quantiles [len(y), len(quantiles)] in y's units, scale [len(y)]): row i is the forecast
        made at origin y.index[i] from y[:i] only; non-crossing; NaN where the level is unknown."""
        if not hasattr(self, "step_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit_many(series, step) first")
        x, level, scale = FEATURE_SETS[self.features][1](y, self.step_, int(self.span))
        qs = np.asarray(self.quantiles, dtype=float)
        out = non_crossing(self.predict_scaled(x), qs) * scale[:, None] + level[:, None]
        return out, scale

    def to_arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able description, NumPy arrays) of the fitted model; `from_arrays` rebuilds it."""
        if not hasattr(self, "models_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted: nothing to save")
        arrays: dict[str, np.ndarray] = {}
        texts: list[str] = []
        for i, m in enumerate(self.models_):
            if self.backend == "lightgbm":
                texts.append(m.text)
                continue
            arrays[f"q{i}.baseline"] = m.baseline
            arrays[f"q{i}.offsets"] = m.offsets
            for k, v in m.fields.items():
                arrays[f"q{i}.{k}"] = v
        params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.get_params().items()}
        meta = {"format": ARRAYS_FORMAT, "params": params, "feature_names": list(self.feature_names),
                "lightgbm_models": texts, "n_rows": self.n_rows_, "n_series": self.n_series_,
                "step_seconds": int(self.step_.total_seconds())}
        return meta, arrays

    @classmethod
    def from_arrays(cls, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> "DecisionTimeGBM":
        """Rebuild from `to_arrays` output; ValueError when it does not fit this version (format,
        features, parameters, missing arrays). LightGBM's text format is parsed, never executed."""
        if meta.get("format") != ARRAYS_FORMAT:
            raise ValueError(f"model format {meta.get('format')!r}, this tidewise reads {ARRAYS_FORMAT!r}")
        params = dict(meta.get("params") or {})
        if set(params) - set(cls().get_params()):
            raise ValueError(f"unknown model parameter(s) {sorted(set(params) - set(cls().get_params()))}")
        params["quantiles"] = tuple(params.get("quantiles") or ())
        m = cls(**params)
        m._check_params()
        if list(meta.get("feature_names") or []) != list(m.feature_names):
            raise ValueError("the model was trained on other features than this tidewise computes")
        if m.backend == "lightgbm":  # checked, then parsed by LightGBM (a text model), never executed
            m.models_ = []
            for i, text in enumerate(meta.get("lightgbm_models") or []):
                try:
                    m.models_.append(BoosterText(text, len(m.feature_names)))
                except ModelTextError as exc:
                    q = f"quantile {m.quantiles[i]:g}" if i < len(m.quantiles) else f"model {i}"
                    raise ModelTextError(f"the LightGBM model of {q}: {exc}") from None
        else:
            m.models_ = []
            for i in range(len(m.quantiles)):
                p = f"q{i}."
                if p + "baseline" not in arrays or p + "offsets" not in arrays:
                    raise ValueError(f"the arrays of quantile {m.quantiles[i]:g} are missing")
                fields = {k[len(p):]: v for k, v in arrays.items() if k.startswith(p)
                          and k not in (p + "baseline", p + "offsets")}
                m.models_.append(QuantileTrees(arrays[p + "baseline"], fields, arrays[p + "offsets"],
                                               len(m.feature_names)))
        if len(m.models_) != len(m.quantiles):
            raise ValueError(f"{len(m.models_)} fitted quantile models for {len(m.quantiles)} quantiles")
        m.step_ = pd.Timedelta(seconds=int(meta["step_seconds"]))
        m.n_rows_, m.n_series_ = int(meta.get("n_rows", 0)), int(meta.get("n_series", 0))
        return m
