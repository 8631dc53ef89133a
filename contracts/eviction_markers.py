"""The markers operators put on pods to keep them from being evicted, read once for every
component that evicts (serve's `movable()`, which tide and rebalance go through, and the node
agent's memory-pressure victims). Standard library only.

- `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` (the cluster autoscaler's marker);
- `tidewise.io/evict` with any false value: "false", "False", "0", "no", "off", padded or not;
- local storage: a pod with an `emptyDir` (on disk, or `medium: Memory`) or a `hostPath` volume
  loses that data when evicted; such pods are kept unless a setting allows it (`LOCAL_STORAGE_RULES`)
  or `safe-to-evict: "true"` / `safe-to-evict-local-volumes` (the autoscaler's two ways) says so.
Each refusal is one short phrase (the reason shown next to the pod).
"""
from __future__ import annotations

from typing import Any, Mapping

from contracts.annotations import EVICT_ANNOTATION as OPT_OUT

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
SAFE_LOCAL_VOLUMES = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"  # "vol-a,vol-b"
FALSE_WORDS = frozenset({"false", "0", "no", "off", "n", "f"})
TRUE_WORDS = frozenset({"true", "1", "yes", "on", "y", "t"})
# which pods with local storage may be evicted: none ("never", the default: their data is lost),
# those whose only local storage is in memory ("memory": a cache rebuilt on start), or all ("always")
LOCAL_STORAGE_RULES = ("never", "memory", "always")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _word(value: object) -> str:
    return value.strip().lower() if isinstance(value, str) else ""


def is_false(value: object) -> bool:
    """True for any written false ("false", "False", " 0 ", "no", "off"); a bool False counts too."""
    return value is False or _word(value) in FALSE_WORDS


def annotation_refusal(annotations: Mapping[str, Any] | None) -> str | None:
    """Why the pod's annotations refuse an eviction (None: they do not)."""
    ann = _mapping(annotations)
    for key in (SAFE_TO_EVICT, OPT_OUT):
        if is_false(ann.get(key)):
            return f"opted out ({key}: {str(ann[key]).strip()})"
    return None


def local_volumes(pod: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(disk, memory): names of the pod's local-storage volumes (emptyDir on disk or hostPath;
    emptyDir in memory), leaving out those `safe-to-evict-local-volumes` names."""
    ann = _mapping(_mapping(pod.get("metadata")).get("annotations"))
    allowed = {v.strip() for v in str(ann.get(SAFE_LOCAL_VOLUMES) or "").split(",") if v.strip()}
    volumes = _mapping(pod.get("spec")).get("volumes")
    volumes = volumes if isinstance(volumes, list) else []
    disk, memory = [], []
    for v in volumes:
        if not isinstance(v, Mapping) or str(v.get("name")) in allowed:
            continue
        empty = v.get("emptyDir")
        if "emptyDir" in v and isinstance(empty, Mapping) and empty.get("medium") == "Memory":
            memory.append(str(v.get("name")))
        elif "emptyDir" in v or "hostPath" in v:
            disk.append(str(v.get("name")))
    return disk, memory


def storage_refusal(pod: Mapping[str, Any], rule: str = "never") -> str | None:
    """Why the pod's local storage refuses an eviction under `rule` (one of LOCAL_STORAGE_RULES)."""
    if rule == "always":
        return None
    ann = _mapping(_mapping(pod.get("metadata")).get("annotations"))
    if _word(ann.get(SAFE_TO_EVICT)) in TRUE_WORDS:
        return None
    disk, memory = local_volumes(pod)
    if disk:
        return f"local storage (volume {disk[0]}: emptyDir/hostPath data is lost on eviction)"
    if memory and rule != "memory":
        return f"local storage (volume {memory[0]}: emptyDir in memory is lost on eviction)"
    return None


def check_rule(rule: object, where: str) -> None:
    """ValueError naming `where` when `rule` is not one of LOCAL_STORAGE_RULES."""
    if rule not in LOCAL_STORAGE_RULES:
        raise ValueError(f"{where} {rule!r}: one of {', '.join(LOCAL_STORAGE_RULES)}")
