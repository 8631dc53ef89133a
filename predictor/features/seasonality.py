"""Seasonality strength: autocorrelation of a series at one day and one week.

The one autocorrelation in Tidewise: profiles and model selection call `acf_at` on a series, the
direct features call `autocorrelation` on the array of past values.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.history import fill_short_gaps

# ACF at the season lag above which a cycle counts as present. Real traces (shared/data README):
# strongly tidal series score 0.7-0.96, weakly periodic ones below 0.25.
SEASONAL_ACF = 0.3


def acf_at(y: pd.Series, lag: pd.Timedelta, step: pd.Timedelta) -> float:
    """Autocorrelation at `lag`, on pairs where both values exist; NaN when fewer than one lag
    and a half of history is available."""
    return autocorrelation(fill_short_gaps(y, step).to_numpy(dtype=float), int(round(lag / step)))


def autocorrelation(v: np.ndarray, k: int) -> float:
    """Autocorrelation of the values `v` at a lag of `k` steps, on pairs where both values exist;
    NaN with fewer than `1.5 k` values or 10 pairs, 0 when either side is constant."""
    if k < 1 or len(v) < int(1.5 * k):
        return float("nan")
    a, b = v[k:], v[:-k]
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 10:
        return float("nan")
    a, b = a[ok], b[ok]
    sa, sb = a.std(), b.std()
    if sa == 0 or sb == 0:
        return 0.0
    return float(np.mean((a - a.mean()) * (b - b.mean())) / (sa * sb))
