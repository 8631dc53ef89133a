"""Values as a message shows them to a user: `1709251`, not `np.int64(1709251)`; `5m`, not
`0 days 00:05:00`. Use `{plain(x)}` where a message would say `{x!r}` of a value read from a frame."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from predictor.durations import format_duration


def plain(value: Any) -> str:
    """repr() of the Python value behind a NumPy or pandas one (strings keep their quotes, so an
    empty or padded cell stays visible); durations in the shortest exact form, times in ISO-8601."""
    if isinstance(value, (pd.Timedelta, np.timedelta64)):
        return format_duration(pd.Timedelta(value))
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if isinstance(value, np.generic):
        return repr(value.item())
    if isinstance(value, (list, tuple, np.ndarray, pd.Series)):
        return "[" + ", ".join(plain(v) for v in list(value)) + "]"
    return repr(value)
