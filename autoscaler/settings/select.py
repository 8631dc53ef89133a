"""Which objects serve may write: the opt-in selection (`serve.select` in the config).

Per kind (vpa, hpa, node, spd, ihpa, tide_pool) a list of namespaces and a label selector; or, on
the object itself, the annotation `tidewise.io/manage: "true"`. `"false"` (or any other value)
opts an object out even where the config selects it. A kind with nothing configured: VPAs and SPDs
are selected (each already opts in on its own: `spec.recommenders` names tidewise, the workload
carries `spd.katalyst.kubewharf.io/enable: "true"`); HPAs, Nodes, IHPAs and TideNodePools are not
(they carry no opt-in of their own: serve would otherwise write to every one in the cluster).

Decisions are still made for every object (tide sizes pools from HPA replicas); only the writes
of unselected objects are dropped, each named in the run report with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from contracts.annotations import MANAGE_ANNOTATION
from contracts.errors import InputError
from contracts.selector import Selector, parse_selector

KIND_KEYS = {  # API kind written -> the serve.select key that governs it
    "VerticalPodAutoscaler": "vpa", "ResourceRecommend": "vpa", "HorizontalPodAutoscaler": "hpa",
    "Node": "node", "CustomNodeResource": "node", "ServiceProfileDescriptor": "spd",
    "IntelligentHorizontalPodAutoscaler": "ihpa", "TideNodePool": "tide_pool",
}
CLUSTER_SCOPED = ("node", "tide_pool")


@dataclass
class KindSelection:
    """One kind's selection; with every criterion unset, only annotated objects are selected."""

    all: bool = False  # every object of the kind (still narrowed by the two below when they are given)
    namespaces: tuple[str, ...] = ()  # objects in these namespaces ("*": every namespace); namespaced kinds only
    selector: str = ""  # a Kubernetes label selector on the object's own labels: "app=web,tier in (a,b),!canary"
    kind: str = field(default="", repr=False)  # the serve.select key, for messages (set by SelectSettings)
    parsed_: Selector | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.namespaces, str) or not all(isinstance(n, str) and n for n in self.namespaces):
            raise InputError(f"serve.select.{self.kind or '<kind>'}.namespaces {self.namespaces!r}: give a list of "
                             "namespace names, e.g. [shop, search] (or [\"*\"] for every namespace)")
        self.namespaces = tuple(self.namespaces)
        try:
            self.parsed_ = parse_selector(self.selector) if self.selector else None
        except ValueError as exc:
            raise InputError(f"serve.select.{self.kind or '<kind>'}.selector: {exc}") from None

    def configured(self) -> bool:
        return self.all or bool(self.namespaces) or self.parsed_ is not None


def _default_all() -> KindSelection:
    return KindSelection(all=True)


@dataclass
class SelectSettings:
    """`serve.select`: what serve may write, per kind. Defaults: VPAs and SPDs as they opt in
    themselves; HPAs, Nodes, IHPAs and TideNodePools only with the annotation."""

    vpa: KindSelection = field(default_factory=_default_all)  # VPAs naming tidewise in spec.recommenders
    hpa: KindSelection = field(default_factory=KindSelection)  # spec.minReplicas
    node: KindSelection = field(default_factory=KindSelection)  # reclaimed status, plan and forecast annotations
    spd: KindSelection = field(default_factory=_default_all)  # SPDs of workloads annotated for Katalyst
    ihpa: KindSelection = field(default_factory=KindSelection)  # IHPA status
    tide_pool: KindSelection = field(default_factory=KindSelection)  # a pool's node labels, taints, drains, status
    annotation: str = MANAGE_ANNOTATION  # "true" on an object selects it; any other value opts it out

    def __post_init__(self) -> None:
        for key in ("vpa", "hpa", "node", "spd", "ihpa", "tide_pool"):
            sel = getattr(self, key)
            if isinstance(sel, dict):
                sel = KindSelection(**sel)
            sel.kind = key
            if key in CLUSTER_SCOPED and sel.namespaces:
                raise InputError(f"serve.select.{key}.namespaces: {key} objects have no namespace; "
                                 "select them with a label selector, `all: true` or the annotation")
            setattr(self, key, sel)

    def why_not(self, kind: str, obj: Mapping[str, Any] | None) -> str | None:
        """None when serve may write this object of API `kind`; else why not (one line)."""
        key = KIND_KEYS.get(kind)
        if key is None:
            return None  # not a kind the selection governs
        sel: KindSelection = getattr(self, key)
        md = (obj or {}).get("metadata") or {}
        mark = (md.get("annotations") or {}).get(self.annotation)
        if mark is not None:
            return None if str(mark).strip().lower() == "true" else f"not selected (annotation {self.annotation}: {mark!r})"
        if not sel.configured():
            return f"not selected (no serve.select.{key} and no {self.annotation}: \"true\" annotation)"
        ns = md.get("namespace") or "default"
        if sel.namespaces and "*" not in sel.namespaces and ns not in sel.namespaces:
            return f"not selected (namespace {ns} not in serve.select.{key}.namespaces)"
        if sel.parsed_ is not None and not sel.parsed_.matches(md.get("labels") or {}):
            return f"not selected (labels do not match serve.select.{key}.selector {sel.selector!r})"
        return None
