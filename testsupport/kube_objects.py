"""The words the API fake (`kube_fake.py`) speaks: the kinds it serves and where, a recorded request,
the merge patch, field and label selectors, and the `Status` body of an error."""
from __future__ import annotations

import copy
import urllib.parse
from dataclasses import dataclass
from typing import Any

# kind -> (path prefix, plural, namespaced, api version)
KINDS = {
    "Node": ("/api/v1", "nodes", False, "v1"),
    "Pod": ("/api/v1", "pods", True, "v1"),
    "Deployment": ("/apis/apps/v1", "deployments", True, "apps/v1"),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", True, "apps/v1"),
    "HorizontalPodAutoscaler": ("/apis/autoscaling/v2", "horizontalpodautoscalers", True, "autoscaling/v2"),
    "VerticalPodAutoscaler": ("/apis/autoscaling.k8s.io/v1", "verticalpodautoscalers", True, "autoscaling.k8s.io/v1"),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True, "coordination.k8s.io/v1"),
    "CustomNodeResource": ("/apis/node.katalyst.kubewharf.io/v1alpha1", "customnoderesources", False,
                           "node.katalyst.kubewharf.io/v1alpha1"),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", True, "apps/v1"),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True, "policy/v1"),
    "ServiceProfileDescriptor": ("/apis/workload.katalyst.kubewharf.io/v1alpha1", "serviceprofiledescriptors", True,
                                 "workload.katalyst.kubewharf.io/v1alpha1"),
    "IntelligentHorizontalPodAutoscaler": ("/apis/autoscaling.katalyst.kubewharf.io/v1alpha2",
                                           "intelligenthorizontalpodautoscalers", True,
                                           "autoscaling.katalyst.kubewharf.io/v1alpha2"),
    "TideNodePool": ("/apis/tide.katalyst.kubewharf.io/v1alpha1", "tidenodepools", False,
                     "tide.katalyst.kubewharf.io/v1alpha1"),
}
PLURAL = {v[1]: k for k, v in KINDS.items()}
BUILTIN = {"Node", "Pod", "Deployment", "StatefulSet", "HorizontalPodAutoscaler", "Lease", "ReplicaSet",
           "PodDisruptionBudget"}
# the fields a `fieldSelector` may name here (what the node agent asks for: its node's pods, its node)
FIELDS = {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace"),
          "spec.nodeName": ("spec", "nodeName")}


def object_path(obj: dict[str, Any]) -> str:
    prefix, plural, namespaced, _ = KINDS[obj["kind"]]
    md = obj["metadata"]
    return f"{prefix}/namespaces/{md['namespace']}/{plural}/{md['name']}" if namespaced else f"{prefix}/{plural}/{md['name']}"


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


@dataclass
class Request:
    """One request as the fake received it: `query` is the raw query string, `params` it parsed."""
    method: str
    path: str
    content_type: str
    body: Any
    query: str = ""
    auth: str | None = None  # the Authorization header (the kubelet's bearer token)

    @property
    def is_watch(self) -> bool:
        return "watch=true" in self.query.lower()

    @property
    def params(self) -> dict[str, list[str]]:
        return urllib.parse.parse_qs(self.query)


def field_match(selector: str, obj: dict[str, Any]) -> bool:
    """Whether `obj` passes a `fieldSelector` of `a=b` terms joined by commas ("" passes everything)."""
    for term in filter(None, selector.split(",")):
        field, _, want = term.partition("=")
        outer, inner = FIELDS[field]
        if ((obj.get(outer) or {}).get(inner) or "") != want:
            return False
    return True


def selects(pdb: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a PodDisruptionBudget's `matchLabels` (none: nothing) select these pod labels."""
    sel = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return bool(sel) and all(labels.get(k) == v for k, v in sel.items())


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}
