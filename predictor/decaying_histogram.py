"""The decaying histogram of the Kubernetes VPA recommender: usage percentiles in which a sample's
weight halves every `half_life` (24 h in the VPA: a week-old sample weighs 1/128).

One implementation for its two users: the `decaying_histogram` forecaster (predictor/models) and
the stock-VPA reference the benchmarks and replays compare against (autoscaler/logic/vpa.py).
"""
from __future__ import annotations

import numpy as np


def decaying_cdf(values: np.ndarray, ages: np.ndarray, half_life: float) -> tuple[np.ndarray, np.ndarray]:
    """`values` sorted (stable) and their cumulative weight, normalised to end at 1;
    `ages` and `half_life` in the same unit. The caller drops missing values first."""
    weights = np.power(2.0, -ages / half_life)
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    return values[order], cumulative / cumulative[-1]


def cdf_quantiles(sorted_values: np.ndarray, cumulative: np.ndarray, q: np.ndarray | float) -> np.ndarray:
    """The smallest value whose cumulative weight reaches each quantile `q` (the VPA's rule)."""
    return sorted_values[np.minimum(np.searchsorted(cumulative, q), len(sorted_values) - 1)]
