"""How long a workload's pods live: the span a request set at a pod's creation must cover.

With `updateMode: Initial` a request is applied when a pod is created and stays for the pod's whole
life, so it must cover the highest point of the plan over that life, not the coming hour. The life is
`vpa.pod_life` (24 h: a pod created at night lives through the day's peak) until the cluster has shown
how long this workload's pods live: once serve has seen `MIN_ENDED` of them go, the longest of the last
`KEPT` lives, or the age of an older pod still running. A pod's life is read from what serve sees: its
creation time, and the first run that no longer lists it.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import pandas as pd

from autoscaler.model.views import WorkloadKey

MIN_ENDED = 3  # fewer ended lives say little: the setting serves
KEPT = 20  # lives kept per workload: the recent ones describe how it is run now
SHORTEST = pd.Timedelta("1h")  # a life is never read as shorter (a crash loop is not a lifetime)


@dataclass
class PodLives:
    """The loop's memory of each workload's pods (kept between runs): creation and last sighting of the
    pods it lists, and the lives of those it no longer lists."""

    seen: dict[WorkloadKey, dict[str, pd.Timestamp]] = field(default_factory=dict)
    ended: dict[WorkloadKey, deque[pd.Timedelta]] = field(default_factory=dict)

    def observe(self, key: WorkloadKey, started: dict[str, pd.Timestamp], now: pd.Timestamp) -> None:
        """This run's pods of `key` (uid -> creation): a pod listed before and gone now has ended, at most
        `now` after its creation (the longer reading: a request must cover the whole life)."""
        for uid, created in self.seen.get(key, {}).items():
            if uid not in started and now > created:
                self.ended.setdefault(key, deque(maxlen=KEPT)).append(now - created)
        self.seen[key] = dict(started)

    def keep(self, keys: set[WorkloadKey]) -> None:
        """Forget the workloads no longer served."""
        for d in (self.seen, self.ended):
            for key in [k for k in d if k not in keys]:
                del d[key]

    def expected(self, key: WorkloadKey, default: pd.Timedelta, now: pd.Timestamp) -> tuple[pd.Timedelta, str]:
        """The life a request set now must cover, and why."""
        ended = list(self.ended.get(key, ()))
        if len(ended) < MIN_ENDED:
            return default, f"a pod's expected life {_text(default)} (vpa.pod_life: too few of its pods seen to end)"
        longest = max(ended)
        ages = [now - created for created in self.seen.get(key, {}).values()]
        oldest = max(ages, default=pd.Timedelta(0))
        life = max(longest, oldest, SHORTEST)
        why = f"the longest life of its last {len(ended)} pods seen to end, {_text(longest)}"
        if oldest > longest:
            why = f"its oldest running pod's age, {_text(oldest)}, over {why}"
        return life, f"a pod's expected life {_text(life)} ({why})"


def _text(span: pd.Timedelta) -> str:
    hours = span / pd.Timedelta("1h")
    return f"{hours / 24:.1f} d" if hours >= 48 else f"{hours:.1f} h" if hours < 10 else f"{hours:.0f} h"
