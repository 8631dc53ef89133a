"""Guardrails that are not tied to one estimator: staleness, cool-down, the kill switch."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import pandas as pd

STOP_WORDS = {"", "stop", "true", "1", "on", "yes", "off-writes"}


def is_stale(history_end: pd.Timestamp | None, now: pd.Timestamp, stale_after: pd.Timedelta) -> bool:
    """No sample newer than `stale_after` before now: decisions from it would describe the past."""
    return history_end is None or now - history_end > stale_after


def kill_switch_engaged(path: str | None) -> bool:
    """The global kill switch: a file (a mounted ConfigMap key) that exists and says stop (or is
    empty). `echo stop > FILE` stops every write at the next run; `echo run > FILE` resumes."""
    if not path or not os.path.exists(path):
        return False
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip().lower() in STOP_WORDS
    except OSError:
        return True  # unreadable: the safe side is not to write


@dataclass
class Cooldown:
    """An object is rewritten at most once per `period`, except in its safe direction (a higher
    HPA floor, less reclaimable room), which must never wait."""

    period: pd.Timedelta
    last: dict[str, pd.Timestamp] = field(default_factory=dict)

    def allows(self, key: str, now: pd.Timestamp, safe_direction: bool = False) -> bool:
        t = self.last.get(key)
        return safe_direction or t is None or now - t >= self.period

    def record(self, key: str, now: pd.Timestamp) -> None:
        self.last[key] = now
