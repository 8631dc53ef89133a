"""How a changed request reaches a container, per resource (issue 24 item 1): in place or by restart.

In place: the VPA's `spec.updatePolicy.updateMode` is `InPlaceOrRecreate` AND the pod template's
container declares `resizePolicy` `restartPolicy: NotRequired` for that resource; the updater then
resizes the running pod, so a request may follow the tide every run (the dead band still applies).
Restart otherwise: an absent resizePolicy is not in place (fail closed: fewer changes), and with
`Off`/`Initial` a change lands only when a pod is created. Each change then costs a restart, so the
written recommendation of a container resource changes at most `max_changes_per_day` times in any 24 h.
Pure: names and timestamps in, a regime and a held value out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from autoscaler.model.cluster import Obj
from autoscaler.model.views import VpaView, resizes_in_place

IN_PLACE, RESTART = "in-place", "restart"
IN_PLACE_MODE = "InPlaceOrRecreate"
DAY = pd.Timedelta(hours=24)


@dataclass(frozen=True)
class Regime:
    """One container resource's regime and why, in the words of its reason."""

    name: str  # IN_PLACE or RESTART
    why: str

    @property
    def in_place(self) -> bool:
        return self.name == IN_PLACE

    def describe(self, max_changes_per_day: int) -> str:
        if self.in_place:
            return f"regime in-place ({self.why}): a change resizes the running pod, so it may follow every run"
        return (f"regime restart ({self.why}): each change restarts a pod, so at most {max_changes_per_day} "
                f"changes in any 24 h")


def regime(vpa: VpaView, workload: Obj, container: str, resource: str) -> Regime:
    """The regime of `container`'s `resource` from what the cluster says (fail closed: restart)."""
    mode = vpa.update_mode()
    if mode in ("Off", "Initial"):
        return Regime(RESTART, f"updateMode {mode}: a change lands only when a pod is created")
    if mode != IN_PLACE_MODE:
        return Regime(RESTART, f"updateMode {mode}, not {IN_PLACE_MODE}: the updater evicts to apply a change")
    if not resizes_in_place(workload, container, resource):
        return Regime(RESTART, f"updateMode {IN_PLACE_MODE} but container {container} declares no resizePolicy "
                               f"restartPolicy NotRequired for {resource}: a resize would restart it")
    return Regime(IN_PLACE, f"updateMode {IN_PLACE_MODE} and resizePolicy {resource} NotRequired")


def changes_in_day(changed_at: Sequence[pd.Timestamp], now: pd.Timestamp) -> int:
    """Changes of a written recommendation in the 24 h before `now`."""
    return sum(1 for t in changed_at if now - DAY < t <= now)


def restart_limit(previous: int | None, target: int, changed_at: Sequence[pd.Timestamp], now: pd.Timestamp,
                  max_changes_per_day: int, raise_after_oom: bool = False) -> tuple[int, str | None]:
    """The target a restart-regime resource may publish: `previous` (held) once its written value has
    changed `max_changes_per_day` times in the last 24 h, except a memory raise after an OOM kill
    (`raise_after_oom`), which goes through: a container that was killed needs it now. Returns
    (target, why it was held or let through; None when the limit did not apply)."""
    if previous is None or previous <= 0 or target == previous:
        return target, None
    used = changes_in_day(changed_at, now)
    if used < max_changes_per_day:
        return target, None
    if raise_after_oom and target > previous:
        return target, (f"restart regime: {used} changes in the last 24 h (limit {max_changes_per_day}), "
                        f"but a memory raise after an OOM kill goes through")
    return previous, (f"restart regime: held at {previous}, {used} changes in the last 24 h already "
                      f"(vpa.max_changes_per_day {max_changes_per_day})")
