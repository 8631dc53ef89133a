"""A Katalyst ServiceProfileDescriptor (workload.katalyst.kubewharf.io/v1alpha1) as serve reads it:
the one place that knows which of its parts Tidewise owns (`logic/spd.py` builds the desired SPD;
everything else in it belongs to the user or to Katalyst and is kept as it is).

Tidewise owns `spec.targetRef`, the extended indicator named `INDICATOR` in
`spec.extendedIndicator`, and the `status.aggMetrics` entries whose scope starts with `SCOPE_PREFIX`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

from autoscaler.model.cluster import Obj, meta
from autoscaler.model.views import ObjectView
from contracts.annotations import PREFIX as SCOPE_PREFIX

INDICATOR = "TidewiseProfile"  # Katalyst names an extended indicator X and its object XIndicators


def _ours(entries: Any, key: str, mine: Callable[[str], bool]) -> tuple[list[Any], list[Any]]:
    """(entries Tidewise wrote, the others) of a list of dicts, by `mine(entry[key])`."""
    items = entries if isinstance(entries, list) else []
    is_ours = [isinstance(e, dict) and mine(str(e.get(key, ""))) for e in items]
    return [e for e, o in zip(items, is_ours) if o], [e for e, o in zip(items, is_ours) if not o]


def _our_indicator(name: str) -> bool:
    return name == INDICATOR


def _our_scope(scope: str) -> bool:
    return scope.startswith(SCOPE_PREFIX)


@dataclass(frozen=True)
class SpdView(ObjectView):
    """One SPD, in the cluster or as Tidewise wants it."""

    def target_ref(self) -> Any:
        """spec.targetRef as written (None when absent)."""
        return self.spec.get("targetRef")

    def targets(self, namespace: str, kind: str, name: str) -> bool:
        """The SPD's targetRef names this workload."""
        ref = self.target_ref() or {}
        return meta(self.obj).get("namespace") == namespace and ref.get("kind") == kind and ref.get("name") == name

    def extended_indicators(self) -> Any:
        """spec.extendedIndicator as written."""
        return self.spec.get("extendedIndicator")

    def agg_metrics(self) -> Any:
        """status.aggMetrics as written."""
        return self.status.get("aggMetrics")

    def owned_part(self) -> list[Any]:
        """What of the SPD Tidewise writes: compared with the cluster on every read (drift), and with
        the desired SPD before any write."""
        return [self.target_ref(), _ours(self.extended_indicators(), "name", _our_indicator)[0],
                _ours(self.agg_metrics(), "scope", _our_scope)[0]]

    def merged(self, desired: SpdView) -> Obj:
        """This SPD with Tidewise's parts replaced by `desired`'s; everything else kept as it is."""
        obj = copy.deepcopy(self.obj)
        spec, status = obj.setdefault("spec", {}), obj.get("status") or {}
        spec["targetRef"] = desired.target_ref()
        spec["extendedIndicator"] = _ours(spec.get("extendedIndicator"), "name", _our_indicator)[1] \
            + desired.extended_indicators()
        status["aggMetrics"] = _ours(status.get("aggMetrics"), "scope", _our_scope)[1] + desired.agg_metrics()
        obj["status"] = status
        return obj
