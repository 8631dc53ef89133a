"""The one unit check of every history reader: a value no workload can have (nanocores read as
cores, bytes as KiB, 1e300 among values of 4) is refused before any model sees it.

A series' resource is the last part of its id (`shop/Deployment/web/app/cpu`): cpu and memory are
held to `contracts.quantity`'s bounds (a million cores, a PiB), any other unit to the largest of
them. Every reader applies it: `predictor.history.validate_long` (files, replay, the cost report,
synthetic data) names the file, the row, the series and the time; the columnar fast path hands such
a file to it; the Prometheus source leaves such a series out with the reason (one bad exporter must
not stop the fleet's fetch), as it does a failed query.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from contracts.errors import InputError
from contracts.quantity import usage_limit, usage_scale_problem
from predictor.plain import plain

# the last part of a series id -> the resource whose bound holds it (requests are in the same units)
RESOURCES = {"cpu": "cpu", "cpu_request": "cpu", "memory": "memory", "memory_request": "memory"}


def resource_of(series_id: str, read_as: str | None = None) -> str | None:
    """cpu or memory as the id names it; `read_as` (None: any unit) for an id naming neither."""
    return RESOURCES.get(str(series_id).rsplit("/", 1)[-1], read_as)


def bounds(names: np.ndarray, read_as: str | None = None) -> np.ndarray:
    """The bound of each series name (float64, one per name)."""
    return np.array([usage_limit(resource_of(n, read_as))[0] for n in names], dtype=float)


def over_bounds(codes: np.ndarray, values: np.ndarray, limits: np.ndarray) -> np.ndarray | None:
    """Positions of the rows whose value is past its series' bound (`limits[codes]`; NaN gaps pass),
    or None when none is. The common file passes on two reductions, with no array per row."""
    # fmax/fmin skip NaN; an all-gap series leaves +-inf, and the per-row test below finds nothing
    peak = max(float(np.fmax.reduce(values, initial=-np.inf)), -float(np.fmin.reduce(values, initial=np.inf)))
    if peak <= limits.min(initial=np.inf):
        return None
    bad = np.abs(values) > limits[codes]  # NaN compares False: a gap is no value
    return np.flatnonzero(bad) if bad.any() else None


def problem(series_id: str, value: float, read_as: str | None = None) -> str:
    """What is wrong with `value` in `series_id` and the fix (for a value `over_bounds` found)."""
    return usage_scale_problem(resource_of(series_id, read_as), value) or ""


def check_rows(frame: pd.DataFrame, where: Callable[[int], str], read_as: str | None = None) -> None:
    """InputError naming the first row of a long frame (series, timestamp, value) whose value is past
    its series' bound: `where(position)` names the file and row, then the series, the time and the fix."""
    ids = pd.Categorical(frame["series"])
    values = frame["value"].to_numpy(dtype=float)
    bad = over_bounds(ids.codes, values, bounds(np.asarray(ids.categories, dtype=object), read_as))
    if bad is None:
        return
    pos = int(bad[0])
    key, at = str(frame["series"].iloc[pos]), pd.Timestamp(frame["timestamp"].iloc[pos])
    raise InputError(f"{where(pos)} (series {plain(key)} at {at.isoformat()}): {problem(key, values[pos], read_as)}, "
                     f"or drop the row ({len(bad)} such row{'s' if len(bad) > 1 else ''})")
