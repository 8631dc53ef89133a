"""Reclaimed (batch) pods' memory as a whole: together they never get more than the plan lends. Pure.

`lent` is the plan's `reclaimed_memory_bytes`, at least `reclaimed_memory_floor_bytes`. It holds in
one of two ways:

- **the reclaimed root**: when every reclaimed pod sits in one k8s QoS cgroup (BestEffort, as
  Katalyst's batch pods are, or Burstable) that holds no other pod, that cgroup gets `memory.max` =
  `lent` (`policy.isolation`) and each pod may use up to `lent` on its own (less when its limit is);
- **a split**: otherwise — an online pod shares that cgroup (an unannotated BestEffort pod, a level
  with a typo or a zero-width character), the batch pods span QoS classes, the root cap is turned
  off, or its write did not take — each reclaimed pod's own cap is its share of `lent`, so that
  the caps sum to at most `lent`.

Why not a cgroup parent of their own, as Katalyst and Koordinator give batch pods: the kubelet makes
every pod's cgroup under `kubepods/<class>/pod<uid>` and keeps it there, so an agent cannot move it.

The split is max-min fair: pods in the order of their own memory limit (none last), each takes the
lesser of its limit and an equal part of what is left. A pod whose limit is below its part leaves
the rest to the others. Shares are whole pages, so the kernel's rounding cannot push the sum past
`lent`. There is no per-pod floor: many pods on a small plan get small caps rather than more than
was lent together. The split moves only when the pods, their limits or the plan change.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from contracts.reclaim import ReclaimPlan
from node_enforcer.model.pod import Pod

PAGE = 4096  # the kernel counts memory limits in pages
SHOWN = 8  # pods named in the note; the rest are counted (each pod's cap is in its own row anyway)


@dataclass(frozen=True)
class BatchMemory:
    """How this pass holds the reclaimed pods to what the plan lends."""

    lent_bytes: int
    root_qos: str | None  # the QoS class whose cgroup is capped at lent_bytes; None: the plan is split
    caps: Mapping[str, int] = field(default_factory=dict)  # pod uid -> its memory cap
    shared_qos: str | None = None  # the batch pods' one QoS class when online pods share its cgroup
    note: str = ""  # what was done and why, for the log and the printed plan
    names: Mapping[str, str] = field(default_factory=dict)  # pod uid -> namespace/name

    def to_dict(self) -> dict[str, Any]:
        caps = [{"pod": self.names.get(u, u), "uid": u, "memory_max_bytes": v} for u, v in self.caps.items()]
        return {"lent_bytes": self.lent_bytes, "root_qos": self.root_qos, "shared_qos": self.shared_qos,
                "split": None if self.root_qos else caps,
                "split_sum_bytes": None if self.root_qos else sum(self.caps.values()), "note": self.note}


def _size(v: int) -> str:
    return f"{v / 2**30:.1f}Gi" if v >= 2**30 else f"{v / 2**20:.0f}Mi"


def _names(keys: Sequence[str]) -> str:
    return ", ".join(keys[:SHOWN]) + (f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else "")


def root_class(pods: Sequence[Pod], reclaimed: set[str]) -> tuple[str | None, str | None, str]:
    """(the QoS class whose cgroup holds every reclaimed pod and nothing else, or None; the batch
    pods' one class when online pods share its cgroup, or None; why there is no root cap)."""
    classes = {p.k8s_qos for p in pods if p.uid in reclaimed}
    if len(classes) != 1 or "Guaranteed" in classes:  # Guaranteed pods sit right under kubepods
        return None, None, f"the reclaimed pods span QoS classes {sorted(classes)}"
    qos = next(iter(classes))
    others = sorted(p.key for p in pods if p.k8s_qos == qos and p.uid not in reclaimed)
    if others:
        return None, qos, (f"the {qos} cgroup also holds {len(others)} online pod(s) ({_names(others)}); "
                           "a cap there would cap them too")
    return qos, None, ""


def _limit(pod: Pod) -> int | None:
    """The pod's own memory limit; 0 is none, as the kubelet reads it."""
    return pod.memory_limit_bytes or None


def fair_split(lent_bytes: int, pods: Sequence[Pod]) -> dict[str, int]:
    """Each pod's share of `lent_bytes` (module docstring): whole pages, summing to at most it."""
    left = lent_bytes // PAGE
    order = sorted(pods, key=lambda p: (_limit(p) is None, _limit(p) or 0, p.uid))
    out: dict[str, int] = {}
    for i, pod in enumerate(order):
        part = left // (len(order) - i)
        limit = _limit(pod)
        if limit is not None:
            part = min(part, limit // PAGE)
        out[pod.uid] = part * PAGE
        left -= part
    return out


def batch_memory(pods: Sequence[Pod], reclaimed: set[str], reclaim: ReclaimPlan | None, floor_bytes: int,
                 root_memory: bool) -> BatchMemory | None:
    """How the reclaimed pods' memory is held to the plan; None without a plan or without batch pods
    (their own limits alone then apply). `root_memory`: the reclaimed root cap may be used (turned
    on, and written where it was asked for)."""
    if reclaim is None or not reclaimed:
        return None
    lent = max(int(reclaim.reclaimed_memory_bytes), floor_bytes)
    batch = sorted((p for p in pods if p.uid in reclaimed), key=lambda p: (p.key, p.uid))
    names = {p.uid: p.key for p in batch}
    qos, shared, why = root_class(pods, reclaimed)
    if qos is not None and root_memory:
        caps = {p.uid: min(lent, _limit(p) or lent) for p in batch}
        return BatchMemory(lent, qos, caps, names=names, note=(
            f"reclaimed memory: one cap of {_size(lent)} on the {qos} cgroup (the reclaimed root), which holds "
            f"the {len(batch)} reclaimed pod(s) and nothing else"))
    caps = fair_split(lent, batch)
    each = _names([f"{p.key} {_size(caps[p.uid])}" for p in batch])
    pods_word = "pods" if len(batch) != 1 else "pod"
    return BatchMemory(lent, None, caps, shared, names=names, note=(
        f"reclaimed memory: {_size(lent)} lent, split among {len(batch)} reclaimed {pods_word}: "
        f"{each} (sum {_size(sum(caps.values()))}; no reclaimed root cap: "
        f"{why or 'the reclaimed root cap is off, or its write did not take'})"))
