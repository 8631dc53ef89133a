"""Fitted gradient-boosted trees as plain data, for the registry: nothing loaded can run code.

`QuantileTrees` holds one scikit-learn HistGradientBoosting quantile model as node arrays and
predicts with scikit-learn's compiled tree walker (bit-identical to the estimator). `BoosterText`
holds one LightGBM booster as LightGBM's own text model format, which LightGBM parses once it is
checked (`predictor.models.lightgbm_text`; it is data: split features, thresholds and leaf values;
no code path runs anything from it).
Both are used by the day-ahead global model (`predictor.models.gbm`) and the decision-time model.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from predictor.models.lightgbm_text import checked_model_text

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


class BoosterText:
    """One fitted LightGBM booster kept as its text dump (`model_to_string`): the registry stores
    the text in JSON, and LightGBM parses it (`lightgbm.Booster(model_str=...)`), which reads
    numbers and never unpickles. LightGBM's parser trusts its input (a malformed text aborts the
    process), so the text is checked in Python first (`checked_model_text`: ModelTextError) and
    LightGBM reads only the checked part, on `load` (a registry probes it in a child process before:
    `predictor.registry.probe`) or on first use."""

    def __init__(self, text: str, n_features: int):
        try:
            import lightgbm  # noqa: F401
        except (ImportError, OSError) as exc:  # OSError: its library without the system's libgomp.so.1
            raise ValueError(f"this model was fitted with the lightgbm backend, which cannot be loaded here ({exc}): "
                             "pip install lightgbm and install libgomp1 (Debian), or retrain with "
                             "--decision-backend hgb") from None
        self.text = text
        self.n_features = int(n_features)
        self.checked_ = checked_model_text(text, self.n_features)
        self.booster_: Any = None

    def load(self) -> Any:
        """The LightGBM booster of the checked text (parsed once)."""
        if self.booster_ is None:
            import lightgbm

            booster = lightgbm.Booster(model_str=self.checked_)
            if booster.num_feature() != self.n_features:
                raise ValueError(f"the LightGBM model reads {booster.num_feature()} features, expected {self.n_features}")
            self.booster_ = booster
        return self.booster_

    @classmethod
    def from_booster(cls, booster: Any) -> "BoosterText":
        out = cls(booster.model_to_string(), booster.num_feature())
        out.load()
        return out

    def predict(self, x: np.ndarray, n_threads: int | None = None) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"expected {self.n_features} features, got array of shape {x.shape}")
        return np.asarray(self.load().predict(x, num_threads=n_threads or 0), dtype=np.float64)
