"""Series-level location and scale, so that one global model can serve series of any unit and
sign (cores, bytes, requests per second, standardised KPIs around zero)."""
from __future__ import annotations

import numpy as np

# The level is the median of the last day before the origin: robust to a single spike, and recent
# enough to follow a level shift within a day. The scale is the mean absolute deviation from that
# level over the last week (at least the tidal swing), never below 1e-6 of the level's magnitude.
LEVEL_STEPS_DAYS = 1.0
SCALE_DAYS = 7.0


def level_and_scale(history: np.ndarray, steps_per_day: int) -> tuple[float, float]:
    """(level, scale) from values strictly before the origin (`history` ends at the origin)."""
    v = np.asarray(history, dtype=np.float64)
    recent = v[-int(LEVEL_STEPS_DAYS * steps_per_day):]
    level = float(np.nanmedian(recent)) if np.isfinite(recent).any() else float(np.nanmedian(v)) if np.isfinite(v).any() else 0.0
    week = v[-int(SCALE_DAYS * steps_per_day):]
    week = week[np.isfinite(week)]
    scale = float(np.mean(np.abs(week - level))) if len(week) else 0.0
    if not np.isfinite(scale) or scale <= 0:
        scale = float(np.nanstd(v)) if np.isfinite(v).sum() > 1 else 0.0
    floor = max(abs(level) * 1e-6, 1e-9)
    return level, max(scale, floor)
