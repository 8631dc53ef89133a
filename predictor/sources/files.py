"""History from long files (CSV, CSV.gz, Parquet): `series,timestamp,value[,labels...]`."""
from __future__ import annotations

import pandas as pd

from predictor.history import History, load_history


class FileSource:
    name = "file"

    def __init__(self, path: str, allow_negative: bool | None = None, duplicates: str = "error"):
        self.path = path
        self.allow_negative = allow_negative
        self.duplicates = duplicates

    def fetch(self, start: pd.Timestamp | None, end: pd.Timestamp | None, step: pd.Timedelta) -> History:
        hist = load_history(self.path, step, allow_negative=self.allow_negative, duplicates=self.duplicates)
        return hist.window(start, end) if (start is not None or end is not None) else hist


class SyntheticSource:
    """The seeded generator as a source (demo, tests, load runs)."""

    name = "synthetic"

    def __init__(self, cluster):  # predictor.sources.synthetic.SyntheticCluster
        self.cluster = cluster

    def fetch(self, start: pd.Timestamp | None, end: pd.Timestamp | None, step: pd.Timedelta) -> History:
        from predictor.history import history_from_frame

        hist = history_from_frame(self.cluster.history(step), step, "synthetic")
        return hist.window(start, end) if (start is not None or end is not None) else hist
