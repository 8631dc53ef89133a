"""Guardrails that are not tied to one estimator: staleness, cool-down, the kill switch, and the
change limit applied to a VPA decision after it is made."""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from functools import partial
from typing import Mapping

import pandas as pd

from autoscaler.logic.vpa import PodPeaks, container_policy, limit_change
from autoscaler.model.cluster import Obj
from autoscaler.model.decisions import VpaDecision

RUN_WORD = "run"  # the only content that lets writes go ahead
STOP_WORDS = {"", "stop", "true", "1", "on", "yes", "off-writes"}  # deliberate stops (anything else stops too)


def is_stale(history_end: pd.Timestamp | None, now: pd.Timestamp, stale_after: pd.Timedelta) -> bool:
    """No sample newer than `stale_after` before now: decisions from it would describe the past."""
    return history_end is None or now - history_end > stale_after


@dataclass(frozen=True)
class KillSwitch:
    """What the kill-switch file says this run. `engaged` stops every write; `deliberate` tells an
    operator's explicit stop apart from a switch that could not be read or was not understood
    (a fault to fix, reported as a failed run by `serve --once`)."""

    engaged: bool
    deliberate: bool = False
    reason: str = ""


def read_kill_switch(path: str | None) -> KillSwitch:
    """The global kill switch: a file (a mounted ConfigMap key). It fails closed: writes go ahead
    only when the file holds exactly `run` (case and surrounding whitespace ignored). `stop` or an empty
    file (STOP_WORDS) is a deliberate stop; any other text, a missing file, a folder or an
    unreadable file stops writes too, as a fault. No path configured: no kill switch."""
    if not path:
        return KillSwitch(False)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a folder, or a FIFO that would block the loop
            return KillSwitch(True, False, f"kill switch {path} is not a regular file; writes stopped")
        with open(path, encoding="utf-8") as fh:
            text = fh.read(4097)  # a switch is one word: a longer file is not `run`, whatever it starts with
        word = text.strip().lower() if len(text) <= 4096 else "<over 4096 characters>"
    except FileNotFoundError:
        # deploy/serve.yaml always provides the key: a configured file that is missing is a broken
        # mount or a typo, and guessing "run" from it would be failing open
        return KillSwitch(True, False, f"kill switch {path} is missing (write `run` into it to allow writes)")
    except (OSError, UnicodeDecodeError) as exc:
        return KillSwitch(True, False, f"kill switch {path} cannot be read ({exc}); writes stopped")
    if word == RUN_WORD:
        return KillSwitch(False)
    if word in STOP_WORDS:
        return KillSwitch(True, True, f"kill switch {path} says {word!r}")
    shown = word[:40] + ("..." if len(word) > 40 else "")
    return KillSwitch(True, False, f"kill switch {path} says {shown!r}, not {RUN_WORD!r}: writes stopped "
                                   f"(write `run` to allow writes, `stop` to stop them)")


def kill_switch_engaged(path: str | None) -> bool:
    """True when the kill switch stops writes (see `read_kill_switch`)."""
    return read_kill_switch(path).engaged


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


def limit_vpa_decision(decision: VpaDecision, published: Mapping[tuple[str, str], int], vpa: Obj,
                       max_decrease_ratio: float, max_increase_ratio: float,
                       peaks: PodPeaks | None = None) -> VpaDecision:
    """The change guardrail as a post-processor: each target moves at most the allowed ratio from
    what is published, or as far as `peaks(container, resource)`, the workload's own recent hourly
    peaks per pod, reach (`limit_change`; read only where the ratios would limit), never above the
    container's maxAllowed; the bounds widen to keep lower <= target <= upper and the reason names
    the step. Changes `decision` in place."""
    for c in decision.containers:
        policy = container_policy(vpa, c.container)
        for res, rec in c.resources.items():
            seen = partial(peaks, c.container, res) if peaks is not None else None
            limited, why = limit_change(published.get((c.container, res)), rec.target, max_decrease_ratio,
                                        max_increase_ratio, floor=rec.floor, seen=seen)
            if why:
                limited = min(limited, policy.max_allowed.get(res, limited))
                rec.reason.steps.append(why)
                rec.target = limited
                rec.lower, rec.upper = min(rec.lower, limited), max(rec.upper, limited)
    return decision
