"""The fast path for long files: Arrow readers and NumPy arrays from the file to the regular grid.

A 10,000-series file holds ~23M rows; read through pandas, every row carries a Python string
(series id) and a parsed timestamp, which cost minutes and gigabytes. Here the series and
timestamp columns are dictionary-encoded as they are read (`pyarrow.csv` / `pyarrow.parquet`), so
a row is an int32 id, an int64 nanosecond and a float64: ~20 bytes. Only the distinct timestamps
(a few thousand) are parsed, by the same `predictor.history.parse_timestamps` as the pandas path,
so every reader still normalises to UTC nanoseconds in one place.

The fast path handles files that need no repair and no report: anything to report or decide (a
bad or out-of-range timestamp, a value that is not a finite number or is past its unit's bound
(`predictor.value_scale`), a negative value, a duplicate timestamp, an empty id, a reader error)
returns None, and `load_history` runs the pandas path, which names the file, the row and the fix
exactly as before. So both paths give the same `History`, and errors stay what they were.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from predictor import value_scale
from predictor.errors import InputError
from predictor.history import REQUIRED, History, parse_timestamps, series_on_grids
from predictor.timestamps import epoch_ns

log = logging.getLogger(__name__)

_DICT = pa.dictionary(pa.int32(), pa.string())


class _NeedsFullPath(Exception):
    """Something in the file that the pandas path reports or repairs (the reason is logged)."""


def read_table(path: str, parquet: bool) -> pa.Table:
    """The file as an Arrow table with `series` dictionary-encoded (and `timestamp` too when text)."""
    if parquet:
        import pyarrow.parquet as pq

        return pq.read_table(path, read_dictionary=["series", "timestamp"])
    import pyarrow.csv as pacsv

    names = _header(path)
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise _NeedsFullPath(f"no column {missing[0]!r}")
    # every label column as text, as pandas reads it with dtype={"series": str} ... keep_default_na=False
    types = {c: _DICT for c in names if c != "value"}
    types["value"] = pa.float64()
    # an empty cell: a gap in `value`, an empty text elsewhere (refused in ids and timestamps)
    convert = pacsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=False)
    return pacsv.read_csv(path, convert_options=convert)


def _header(path: str) -> list[str]:
    import csv
    import gzip

    with (gzip.open(path, "rt", newline="", encoding="utf-8") if path.endswith(".gz")
          else open(path, newline="", encoding="utf-8")) as fh:
        return next(csv.reader(fh), [])


def load_columnar(path: str, step: pd.Timedelta, *, allow_negative: bool | None = None) -> History | None:
    """The regular `History` of a long file, or None when the pandas path must run (module docstring)."""
    parquet = path.lower().endswith((".parquet", ".pq"))
    try:
        table = read_table(path, parquet)
        if table.num_rows == 0:
            raise _NeedsFullPath("no rows")
        return _to_history(table, path, step, allow_negative, parquet)
    except _NeedsFullPath as why:
        log.info("input %s: %s; reading it through the full validation path", path, why)
    except (pa.ArrowException, ValueError, TypeError, OSError, InputError) as exc:
        log.info("input %s: fast reader declined (%s: %s); reading it through the full validation path",
                 path, type(exc).__name__, exc)
    return None


def _to_history(table: pa.Table, path: str, step: pd.Timedelta, allow_negative: bool | None,
                parquet: bool) -> History:
    names, codes = _series_ids(table.column("series"))
    stamps = _timestamps(table.column("timestamp"), path, parquet)
    values = _values(table.column("value"), parquet)
    labels = [c for c in table.column_names if c not in REQUIRED]
    label_cols = {c: table.column(c) for c in labels}
    del table
    if value_scale.over_bounds(codes, values, value_scale.bounds(names)) is not None:
        raise _NeedsFullPath("a value past its unit's bound")
    neg = values < 0
    if neg.any() and allow_negative is not True:
        raise _NeedsFullPath("negative values")
    order = np.lexsort((stamps, codes))  # by series, then time; stable, so file order breaks ties
    codes, stamps, values = codes[order], stamps[order], values[order]
    same = (codes[1:] == codes[:-1]) & (stamps[1:] == stamps[:-1])
    if same.any():
        raise _NeedsFullPath("duplicate timestamps")
    hist = _regular(names, codes, stamps, values, step)
    hist.signed = sorted(str(names[c]) for c in np.unique(codes[values < 0]))
    if labels:
        hist.labels = _labels(label_cols, order, codes, names)
    return hist


def _series_ids(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(names sorted as pandas' Categorical sorts them, int codes per row into them)."""
    col = col.unify_dictionaries().combine_chunks() if pa.types.is_dictionary(col.type) else \
        pc.dictionary_encode(col.cast(pa.string())).combine_chunks()
    if col.null_count:
        raise _NeedsFullPath("an empty series id")
    raw = pd.Series(col.dictionary.to_pylist(), dtype=object).astype(str).str.strip()
    if raw.isin(["", "nan", "None"]).any():
        raise _NeedsFullPath("an empty series id")
    names, remap = np.unique(raw.to_numpy(dtype=object).astype(str), return_inverse=True)
    return names.astype(object), remap.astype(np.int32)[col.indices.to_numpy(zero_copy_only=False)]


def _timestamps(col: pa.ChunkedArray, path: str, parquet: bool) -> np.ndarray:
    """UTC epoch nanoseconds per row: the distinct values parsed once by `parse_timestamps`."""
    col = col.unify_dictionaries().combine_chunks() if pa.types.is_dictionary(col.type) else \
        pc.dictionary_encode(col).combine_chunks()
    if col.null_count:
        raise _NeedsFullPath("an empty timestamp")
    distinct = col.dictionary.to_pandas()
    if not parquet:  # text: as pandas' CSV reader would type the column (int, float or text)
        distinct = _as_read_csv_would(distinct.astype(str))
    parsed = parse_timestamps(distinct.reset_index(drop=True), path, parquet)  # InputError: full path
    ns = epoch_ns(pd.DatetimeIndex(parsed))
    return ns[col.indices.to_numpy(zero_copy_only=False)]


def _as_read_csv_would(text: pd.Series) -> pd.Series:
    stripped = text.str.strip()
    if stripped.str.fullmatch(r"-?\d+").all():
        return pd.Series(stripped.astype("int64").to_numpy())
    if stripped.str.fullmatch(r"-?\d+\.\d*|-?\d*\.\d+").all():
        return pd.Series(stripped.astype("float64").to_numpy())
    return text


def _values(col: pa.ChunkedArray, parquet: bool) -> np.ndarray:
    """float64 per row, NaN for a gap: an empty cell, or a NaN stored in a Parquet float column
    (what pandas reads as missing); text `nan` or an infinity is left to the full path to refuse."""
    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
        raise _NeedsFullPath(f"value column of type {col.type}")
    values = col.cast(pa.float64()).to_numpy()  # nulls (empty cells: gaps) come out NaN
    given = ~(col.is_null().to_numpy(zero_copy_only=False))
    if parquet:
        given &= ~np.isnan(values)
    if not np.isfinite(values[given]).all():
        raise _NeedsFullPath("a value that is not a finite number")
    return values


def _regular(names: np.ndarray, codes: np.ndarray, stamps: np.ndarray, values: np.ndarray,
             step: pd.Timedelta) -> History:
    """Mean per (series, epoch-aligned bucket of `step`) over the sorted rows, as `regularize` does."""
    ok = ~np.isnan(values)
    for c in np.setdiff1d(np.unique(codes), np.unique(codes[ok])):
        log.warning("series %s has no values and is skipped", names[c])
    codes, stamps, values = codes[ok], stamps[ok], values[ok]
    step_ns = step.value  # Timedelta.value is nanoseconds on every pandas
    buckets = stamps - stamps % step_ns  # floor to the epoch-aligned grid (timestamps are after 1990)
    new = np.r_[True, (codes[1:] != codes[:-1]) | (buckets[1:] != buckets[:-1])]
    if new.all():  # one sample per bucket, the usual case: no averaging to do
        means = values
    else:  # pandas' group mean (compensated sums), as `regularize` computes it
        means = pd.Series(values).groupby(np.cumsum(new), sort=False).mean().to_numpy()
        codes, buckets = codes[new], buckets[new]
    series, gaps = series_on_grids(names, codes, buckets, means, step)
    return History(series=series, step=step, gaps=gaps)


def _labels(cols: dict[str, pa.ChunkedArray], order: np.ndarray, codes: np.ndarray,
            names: np.ndarray) -> pd.DataFrame:
    """The first non-empty value of every label column per series (`groupby(...).first()`)."""
    out = {}
    for name, col in cols.items():
        vals = col.to_pandas().to_numpy(dtype=object)[order]
        known = pd.notna(vals)
        first_code, first_pos = np.unique(codes[known], return_index=True)
        column = np.full(len(names), None, dtype=object)
        column[first_code] = vals[known][first_pos]
        out[name] = column
    return pd.DataFrame(out, index=pd.Index(names, name="series"))
