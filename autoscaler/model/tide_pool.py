"""A Katalyst `TideNodePool` (tide.katalyst.kubewharf.io/v1alpha1) as the tide controller reads it,
and the Node patches and pool status it writes. The one place that knows the pool's field paths
(schemas/k8s/katalyst-tide...tidenodepools.yaml) and how a tide node's side shows on the Node.

A tide node is lent (offline) when it carries the pool's offlineLabel; its taints follow its side:
lent nodes carry evictStrategy.watermark.evictOnlinePodTaint, online ones evictOfflinePodTaint.
A merge patch replaces a Node's whole `spec.taints` list, so a patch carries every taint the node
has, ours swapped, and the resourceVersion it was computed from (a concurrent change conflicts
instead of being lost).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contracts.selector import has_labels

Obj = dict[str, Any]
Label = tuple[str, str]
# a taint without an effect: NoSchedule. The drain itself goes through the Eviction API (which
# honours PodDisruptionBudgets); NoExecute would let the taint manager evict without them
DEFAULT_EFFECT = "NoSchedule"


@dataclass(frozen=True)
class PoolSplit:
    """A pool's nodes by role, each list sorted by name (`logic/tide.split_pool` computes it)."""

    online: list[str]
    offline: list[str]
    tide: list[str]


def _label(spec: Obj, field: str) -> Label | None:
    v = spec.get(field)
    if v is None:
        return None
    if not isinstance(v, dict) or not isinstance(v.get("key"), str) or not isinstance(v.get("value"), str):
        raise ValueError(f"spec.nodeConfigs.{field} needs string key and value")
    return v["key"], v["value"]


def _taint(wm: Obj, field: str) -> Obj | None:
    v = wm.get(field)
    if v is None:
        return None
    if not isinstance(v, dict) or not v.get("key"):
        raise ValueError(f"spec.evictStrategy.watermark.{field} needs a key")
    return {"key": v["key"], "value": str(v.get("value", "")), "effect": v.get("effect") or DEFAULT_EFFECT}


@dataclass(frozen=True)
class TidePool:
    name: str
    selector: dict[str, str]
    online_label: Label | None
    offline_label: Label | None
    tide_label: Label | None
    reserve_online: int | str | None
    reserve_offline: int | str | None
    online_taint: Obj | None  # evictOnlinePodTaint: on lent nodes (online pods must leave)
    offline_taint: Obj | None  # evictOfflinePodTaint: on online tide nodes (batch pods must leave)
    previous: PoolSplit | None  # the split the pool's status holds
    status: Obj

    @classmethod
    def from_object(cls, obj: Obj) -> "TidePool":
        """ValueError naming the field when the pool cannot be served."""
        md, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        nc = spec.get("nodeConfigs")
        if not isinstance(nc, dict):
            raise ValueError("spec.nodeConfigs is missing")
        selector = nc.get("nodeSelector") or {}
        if not selector:
            raise ValueError("spec.nodeConfigs.nodeSelector is empty: a pool must select its nodes")
        offline = _label(nc, "offlineLabel")
        if offline is None:
            raise ValueError("spec.nodeConfigs.offlineLabel is missing: a lent node could not be told apart")
        wm = ((spec.get("evictStrategy") or {}).get("watermark")) or {}
        reserve = nc.get("reserve") or {}
        status = obj.get("status") or {}
        rn = status.get("reserveNodes") or {}
        previous = PoolSplit(list(rn.get("onlineNodes") or []), list(rn.get("offlineNodes") or []),
                             list((status.get("tideNodes") or {}).get("nodes") or [])) if status else None
        return cls(str(md.get("name")), {str(k): str(v) for k, v in selector.items()}, _label(nc, "onlineLabel"),
                   offline, _label(nc, "tideLabel"), reserve.get("online"), reserve.get("offline"),
                   _taint(wm, "evictOnlinePodTaint"), _taint(wm, "evictOfflinePodTaint"), previous, status)

    def selects(self, node: Obj) -> bool:
        return has_labels(self.selector, (node.get("metadata") or {}).get("labels"))

    def is_lent(self, node: Obj) -> bool:
        key, value = self.offline_label or ("", "")
        return ((node.get("metadata") or {}).get("labels") or {}).get(key) == value

    def desired_labels(self, role: str, lent: bool = False) -> dict[str, str | None]:
        """Labels of a node in `role` (online, offline or tide); None removes a key of the other side."""
        side = self.offline_label if role == "offline" or (role == "tide" and lent) else self.online_label
        other = self.online_label if side == self.offline_label else self.offline_label
        out: dict[str, str | None] = {}
        if other is not None:
            out[other[0]] = None
        if side is not None:
            out[side[0]] = side[1]
        if role == "tide" and self.tide_label is not None:
            out[self.tide_label[0]] = self.tide_label[1]
        return out

    def desired_taints(self, taints: list[Obj], lent: bool) -> list[Obj]:
        """The node's taints with ours swapped for its side; every other taint kept as it is."""
        ours = [t for t in (self.online_taint, self.offline_taint) if t is not None]
        kept = [t for t in taints if not any(t.get("key") == o["key"] and t.get("effect") == o["effect"] for o in ours)]
        want = self.online_taint if lent else self.offline_taint
        return kept + ([dict(want)] if want is not None else [])

    def wanted_status(self, split: PoolSplit) -> Obj | None:
        """The status `split` needs (its merge patch is {"status": it}), None when the status already says it."""
        want = {"reserveNodes": {"onlineNodes": split.online, "offlineNodes": split.offline},
                "tideNodes": {"nodes": split.tide}}
        have = {"reserveNodes": {"onlineNodes": list((self.status.get("reserveNodes") or {}).get("onlineNodes") or []),
                                 "offlineNodes": list((self.status.get("reserveNodes") or {}).get("offlineNodes") or [])},
                "tideNodes": {"nodes": list((self.status.get("tideNodes") or {}).get("nodes") or [])}}
        return None if want == have else want


def node_patch(node: Obj, pool: TidePool, role: str, lent: bool, annotations: dict[str, str] | None = None) -> Obj | None:
    """The merge patch that puts `node` in `role` (tide nodes: on the side `lent` says, taints
    included), or None when it is there already. Carries the node's resourceVersion."""
    md = node.get("metadata") or {}
    labels = md.get("labels") or {}
    want = pool.desired_labels(role, lent)
    label_patch = {k: v for k, v in want.items() if labels.get(k) != v}
    patch: Obj = {"metadata": {}}
    if label_patch:
        patch["metadata"]["labels"] = label_patch
    if role == "tide":
        taints = list((node.get("spec") or {}).get("taints") or [])
        new = pool.desired_taints(taints, lent)
        if new != taints:
            patch["spec"] = {"taints": new}
    if not label_patch and "spec" not in patch:
        return None
    if annotations:
        patch["metadata"]["annotations"] = dict(annotations)
    if md.get("resourceVersion"):
        patch["metadata"]["resourceVersion"] = md["resourceVersion"]
    return patch
