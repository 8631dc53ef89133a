"""The kube-scheduler extender wire format (k8s.io/kube-scheduler/extender/v1), parsed and built.

The scheduler posts `ExtenderArgs` — `{"Pod": {...}, "Nodes": {"items": [...]}}` when the extender
is not node-cache capable, `{"Pod": {...}, "NodeNames": ["n1", ...]}` when it is — and reads back
`ExtenderFilterResult` (`Nodes` or `NodeNames` as it sent them, `FailedNodes`,
`FailedAndUnresolvableNodes`, `Error`) from the filter verb and a `HostPriorityList`
(`[{"Host": "n1", "Score": 7}]`) from the prioritize verb. The Go types carry no JSON tags, so the
keys are the field names; Go's decoder matches keys case-insensitively, and so does this one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

MAX_BODY = 64 * 2**20  # 64 MiB: 5,000 full Node objects are ~50 MiB; anything larger is refused, not buffered


class BadRequest(ValueError):
    """The request is not an ExtenderArgs the extender can answer (HTTP 400, `Error` says why)."""


@dataclass(frozen=True)
class ExtenderArgs:
    pod: dict[str, Any]
    nodes: list[dict[str, Any]] | None  # nodeCacheCapable: false
    node_names: list[str] | None  # nodeCacheCapable: true

    @property
    def names(self) -> list[str]:
        if self.node_names is not None:
            return list(self.node_names)
        return [str((n.get("metadata") or {}).get("name") or "") for n in self.nodes or []]


def _field(doc: Mapping[str, Any], name: str) -> Any:
    lower = name.lower()
    return next((v for k, v in doc.items() if k.lower() == lower), None)


def parse_args(body: bytes) -> ExtenderArgs:
    """ExtenderArgs from a request body; `BadRequest` naming what is wrong."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"body is not JSON ({exc}); expected ExtenderArgs {{Pod, Nodes | NodeNames}}") from None
    if not isinstance(doc, dict):
        raise BadRequest("body must be a JSON object (ExtenderArgs {Pod, Nodes | NodeNames})")
    pod = _field(doc, "Pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise BadRequest("ExtenderArgs.Pod must be a Pod object with metadata")
    nodes, names = _field(doc, "Nodes"), _field(doc, "NodeNames")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest("ExtenderArgs.NodeNames must be a list of node names")
        return ExtenderArgs(pod, None, names)
    if nodes is None:
        raise BadRequest("ExtenderArgs has neither Nodes nor NodeNames")
    items = nodes.get("items") if isinstance(nodes, dict) else None
    if not isinstance(items, list) or not all(isinstance(n, dict) and isinstance(n.get("metadata"), dict)
                                              for n in items):
        raise BadRequest("ExtenderArgs.Nodes must be a NodeList whose items are Node objects with metadata")
    return ExtenderArgs(pod, items, None)


def filter_result(args: ExtenderArgs, passed: list[str], failed: dict[str, str],
                  unresolvable: dict[str, str]) -> dict[str, Any]:
    """ExtenderFilterResult in the form the request came in (names for names, Nodes for Nodes)."""
    out: dict[str, Any] = {"FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
    if args.node_names is not None:
        out["NodeNames"] = passed
    else:
        keep = set(passed)
        out["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                        "items": [n for n in args.nodes or [] if (n.get("metadata") or {}).get("name") in keep]}
    return out


def error_filter_result(message: str) -> dict[str, Any]:
    """A filter answer carrying only `Error` (the scheduler logs it; with `ignorable: true` it goes on without us)."""
    return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def priority_list(scores: Mapping[str, int]) -> list[dict[str, Any]]:
    """HostPriorityList."""
    return [{"Host": host, "Score": int(score)} for host, score in scores.items()]
