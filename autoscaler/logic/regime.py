"""How a changed request reaches a container, per VPA update mode and resource.

| updateMode | regime | what a recommendation does |
|---|---|---|
| `Off` | off | nothing: recommend only; the target is what a pod created now needs for its life |
| `Initial` | at-creation | set when a pod is created and kept for its life: the highest point of the plan over that life |
| `Recreate`, `Auto` | restart | the updater evicts a pod to apply it: at most `max_changes_per_day` changes in any 24 h |
| `InPlaceOrRecreate`, `InPlace` | in-place | a resize of the running pod, per resource where `resizePolicy` says `NotRequired` |

In the in-place modes a resource whose `resizePolicy` is `RestartContainer`, or absent, is in the restart
regime (fail closed: an absent policy cannot be told from a template written before in-place resize,
and the restart regime changes less). An unknown mode is read as the restart regime for the same reason.
Pure: names and timestamps in, a regime and a held value out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from autoscaler.model.cluster import Obj
from autoscaler.model.views import VpaView, resizes_in_place

IN_PLACE, RESTART, AT_CREATION, OFF = "in-place", "restart", "at-creation", "off"
IN_PLACE_MODES = ("InPlaceOrRecreate", "InPlace")
RESTART_MODES = ("Recreate", "Auto")
DAY = pd.Timedelta(hours=24)
# what each update mode means, in the words of a reason
MEANING = {
    "Off": "recommend only: nothing is applied to pods",
    "Initial": "a request is set when a pod is created and kept for its whole life",
    "Recreate": "the updater evicts a pod to apply a change",
    "Auto": "the updater evicts a pod to apply a change (Auto is Recreate)",
    "InPlaceOrRecreate": "the updater resizes the running pod, or evicts it when a resize cannot be done",
    "InPlace": "the updater resizes the running pod and never evicts it",
}


@dataclass(frozen=True)
class Regime:
    """One container resource's regime and why, in the words of its reason."""

    name: str  # IN_PLACE, RESTART, AT_CREATION or OFF
    why: str

    @property
    def in_place(self) -> bool:
        return self.name == IN_PLACE

    @property
    def for_life(self) -> bool:
        """The request is meant to hold for a pod's whole life (Off and Initial)."""
        return self.name in (AT_CREATION, OFF)

    def describe(self, max_changes_per_day: int) -> str:
        if self.in_place:
            return f"regime in-place ({self.why}): a change resizes the running pod, so it may follow every run"
        if self.name == OFF:
            return f"regime off ({self.why}): the target is what a pod created now would need for its life"
        if self.name == AT_CREATION:
            return f"regime at-creation ({self.why}): the target covers the pod's expected life"
        return (f"regime restart ({self.why}): each change restarts a pod, so at most {max_changes_per_day} "
                f"changes in any 24 h")


def regime(vpa: VpaView, workload: Obj, container: str, resource: str) -> Regime:
    """The regime of `container`'s `resource` from what the cluster says (fail closed: restart)."""
    mode = vpa.update_mode()
    said = f"updateMode {mode}: {MEANING[mode]}" if mode in MEANING else ""
    if mode == "Off":
        return Regime(OFF, said)
    if mode == "Initial":
        return Regime(AT_CREATION, said)
    if mode in RESTART_MODES:
        return Regime(RESTART, said)
    if mode not in IN_PLACE_MODES:
        return Regime(RESTART, f"updateMode {mode} is not one the VPA knows: read as Recreate (fail closed)")
    if not resizes_in_place(workload, container, resource):
        return Regime(RESTART, f"{said}; but container {container} declares no resizePolicy restartPolicy "
                               f"NotRequired for {resource}: a resize restarts it")
    return Regime(IN_PLACE, f"{said}; resizePolicy {resource} NotRequired")


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
