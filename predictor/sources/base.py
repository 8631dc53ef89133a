"""The one interface every history source implements."""
from __future__ import annotations

from typing import Protocol

import pandas as pd

from predictor.history import History


class HistorySource(Protocol):
    """Fetch regular history for every series the source knows, between `start` and `end`.

    Implementations: `FileSource` (long CSV/Parquet), `SyntheticSource` (seeded generator),
    `PrometheusSource` (PromQL over HTTP). Errors are `predictor.errors.SourceError` for the source as
    a whole; a single series that fails is reported in `History.failed` and the others kept.
    """

    name: str

    def fetch(self, start: pd.Timestamp | None, end: pd.Timestamp | None, step: pd.Timedelta) -> History:
        ...
