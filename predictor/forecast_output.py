"""Write forecasts as the long forecast file (`series,timestamp,q<quantile>...,model`), columnar.

The CSV is byte for byte what `pandas.DataFrame.to_csv` wrote before (numbers as Python's `repr`,
timestamps `%Y-%m-%dT%H:%M:%SZ`, minimal quoting), but built with Arrow: one array per column for
a chunk of series, the timestamps of a forecast grid formatted once and shared, and the lines
joined by Arrow compute and written as one buffer. At 10,000 series x 288 steps that is seconds instead of a minute, and
memory holds one chunk of text at a time. `.parquet`/`.pq` writes Parquet, `.gz` gzip-compressed CSV.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from predictor.timestamps import epoch_ns
from predictor.types import Forecast, quantile_column

CHUNK = 1000  # series per Arrow batch: ~290k rows, ~30 MB of text at a time
# Arrow's float text has the same shortest round-trip digits as Python's repr, in another layout
# in places: integral values without ".0", and an exponent from 16 significant digits on or below
# 1e-4 on a different scale. `float_text` lays Arrow's digits out as repr does; values under 1e-4
# (rare in usage data) are formatted by repr itself.
_REPR_BELOW, _SCI_FROM = 1e-4, 1e16
_SCI = r"^(?P<sign>-?)(?P<lead>[0-9])(?:\.(?P<frac>[0-9]+))?e(?P<exp>[-+][0-9]+)$"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def float_text(values: np.ndarray) -> pa.Array:
    """float64 -> the text `repr(float(v))` gives (NaN -> null, written as an empty cell)."""
    values = np.asarray(values, dtype="float64")
    nan = np.isnan(values)
    text = pc.cast(pa.array(values, mask=nan), pa.string())
    mag = np.abs(values)
    sci = (mag >= _REPR_BELOW) & (mag < _SCI_FROM)
    if sci.any():
        sci &= pc.fill_null(pc.match_substring(text, "e"), False).to_numpy(zero_copy_only=False)
    if sci.any():
        text = _positional(text, sci)
    # an integral value: Arrow writes "2", repr "2.0" (and "-0" for "-0.0")
    plain = pc.invert(pc.or_(pc.match_substring(text, "."), pc.match_substring(text, "e")))
    text = pc.if_else(plain, pc.binary_join_element_wise(text, ".0", ""), text)
    odd = ~nan & (mag < _REPR_BELOW) & (mag > 0)
    if odd.any():
        pos = np.flatnonzero(odd)
        fixed = text.to_numpy(zero_copy_only=False).astype(object)
        fixed[pos] = [repr(float(v)) for v in values[pos]]
        text = pa.array(fixed, pa.string(), mask=nan)
    return text


def _positional(text: pa.Array, sci: np.ndarray) -> pa.Array:
    """Arrow's `d.ddde+k` as repr lays it out between 1e-4 and 1e16: the digits with the point
    moved (`dddd.d`, `0.000ddd`); only the rows in `sci` are touched."""
    parts = pc.extract_regex(text.filter(pa.array(sci)), _SCI)
    sign, lead = parts.field("sign"), parts.field("lead")
    digits = pc.binary_join_element_wise(lead, pc.fill_null(parts.field("frac"), ""), "")
    exp = pc.cast(pc.replace_substring(parts.field("exp"), "+", ""), pa.int64()).to_numpy()
    laid = pa.nulls(len(exp), pa.string())
    for k in np.unique(exp):
        rows = pa.array(exp == k)
        if k >= 0:
            padded = pc.utf8_rpad(digits.filter(rows), int(k) + 1, "0")
            whole = pc.utf8_slice_codeunits(padded, 0, int(k) + 1)
            frac = pc.utf8_slice_codeunits(padded, int(k) + 1)
            frac = pc.if_else(pc.equal(frac, ""), "0", frac)
            part = pc.binary_join_element_wise(sign.filter(rows), whole, ".", frac, "")
        else:
            part = pc.binary_join_element_wise(sign.filter(rows), "0." + "0" * (int(-k) - 1), digits.filter(rows), "")
        laid = pc.replace_with_mask(laid, rows, part)
    return pc.replace_with_mask(text, pa.array(sci), laid)


class _Grids:
    """Timestamp text per forecast grid; the forecasts of one run share one or a few grids."""

    def __init__(self) -> None:
        self._text: dict[tuple[int, int, int], pa.Array] = {}

    def text(self, fc: Forecast) -> pa.Array:
        idx = fc.index
        key = (idx[0].value, idx[-1].value, len(idx)) if len(idx) else (0, 0, 0)  # .value: ns on any pandas
        if key not in self._text:
            self._text[key] = pa.array(fc.index.tz_convert("UTC").strftime(TIME_FORMAT).tolist(), pa.string())
        return self._text[key]


def _chunk_arrays(chunk: Sequence[Forecast], quantiles: tuple[float, ...], grids: _Grids,
                  as_text: bool) -> dict[str, pa.Array]:
    lengths = np.array([len(f.index) for f in chunk])
    field = csv_field if as_text else str
    names = pa.array([field(f.series) for f in chunk], pa.string())
    models = pa.array([field(f.model) for f in chunk], pa.string())
    rows = np.repeat(np.arange(len(chunk)), lengths)
    values = np.concatenate([f.values for f in chunk]) if len(chunk) else np.empty((0, len(quantiles)))
    if as_text:
        stamps = pa.concat_arrays([grids.text(f) for f in chunk])
    else:
        stamps = pa.array(np.concatenate([epoch_ns(f.index) for f in chunk]), pa.timestamp("ns", tz="UTC"))
    cols: dict[str, pa.Array] = {"series": names.take(rows), "timestamp": stamps}
    for j, q in enumerate(quantiles):
        col = values[:, j]
        cols[quantile_column(q)] = float_text(col) if as_text else pa.array(col, mask=np.isnan(col))
    cols["model"] = models.take(rows)
    return cols


def _chunks(forecasts: Sequence[Forecast]) -> Iterable[Sequence[Forecast]]:
    for i in range(0, len(forecasts), CHUNK):
        yield forecasts[i:i + CHUNK]


def _quantiles(forecasts: Sequence[Forecast]) -> tuple[float, ...]:
    qs = {tuple(f.quantiles) for f in forecasts}
    if len(qs) > 1:
        raise ValueError(f"forecasts with different quantiles cannot share one file: {sorted(qs)}")
    return next(iter(qs)) if qs else ()


def write_forecasts(forecasts: Sequence[Forecast], path: str) -> None:
    """The forecast file at `path`, atomically (temp + rename): CSV, CSV.gz or Parquet by suffix."""
    from contracts.atomic import atomic_path

    quantiles = _quantiles(forecasts)
    columns = ["series", "timestamp", *(quantile_column(q) for q in quantiles), "model"]
    parquet = path.lower().endswith((".parquet", ".pq"))
    with atomic_path(path) as tmp:
        if parquet:
            _write_parquet(forecasts, quantiles, tmp)
        else:
            _write_csv(forecasts, quantiles, columns, tmp, gzip=path.endswith(".gz"))


def _write_csv(forecasts: Sequence[Forecast], quantiles: tuple[float, ...], columns: list[str], tmp: str,
               gzip: bool) -> None:
    grids = _Grids()
    sink = pa.CompressedOutputStream(tmp, "gzip") if gzip else pa.OSFile(tmp, "wb")
    with sink:
        sink.write((",".join(columns) + "\n").encode())
        for chunk in _chunks(forecasts):
            cols = _chunk_arrays(chunk, quantiles, grids, as_text=True)
            # one text line per row, joined by Arrow; the lines' bytes are then one contiguous buffer
            lines = pc.binary_join_element_wise(*cols.values(), ",", null_handling="replace", null_replacement="")
            lines = pc.binary_join_element_wise(lines, "", "\n")
            sink.write(_text_bytes(lines))


def _text_bytes(text: pa.Array) -> pa.Buffer:
    """The concatenated bytes of a string array without nulls (its data buffer, sliced)."""
    text = pa.concat_arrays([text]) if isinstance(text, pa.ChunkedArray) else text
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32)[text.offset: text.offset + len(text) + 1]
    return text.buffers()[2][int(offsets[0]):int(offsets[-1])] if len(text) else pa.py_buffer(b"")


def csv_field(text: str) -> str:
    """A cell as the csv module writes it with minimal quoting (a comma, quote or newline: quoted)."""
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\r\n') else text


def _write_parquet(forecasts: Sequence[Forecast], quantiles: tuple[float, ...], tmp: str) -> None:
    import pyarrow.parquet as pq

    schema = pa.schema([("series", pa.string()), ("timestamp", pa.timestamp("ns", tz="UTC")),
                        *((quantile_column(q), pa.float64()) for q in quantiles), ("model", pa.string())])
    with pq.ParquetWriter(tmp, schema) as writer:
        for chunk in _chunks(forecasts):
            writer.write_table(pa.table(_chunk_arrays(chunk, quantiles, _Grids(), as_text=False), schema=schema))


def summary(forecasts: Sequence[Forecast]) -> tuple[object, dict[str, int]]:
    """(the first forecast timestamp, series per model) for the command's one-line summary."""
    first = min((f.index[0] for f in forecasts if len(f.index)), default=None)
    models: dict[str, int] = {}
    for f in forecasts:
        models[f.model] = models.get(f.model, 0) + 1
    return first, models
