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

from contracts.quantity import parse_quantity

MAX_NODES = 5_000  # limits.Limits.max_nodes
INT64 = 2**63 - 1  # the scheduler counts quantities as int64 milli-units: a larger one is no request


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


def _strings(value: Any, where: str) -> None:
    if value is not None and not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
        raise BadRequest(f"{where} must be an object of strings")


def _object(value: Any, where: str) -> dict[str, Any]:
    """`value` when it is an object, {} when absent; BadRequest when it is anything else (a list, a string)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"{where} must be an object, not {type(value).__name__}")
    return value


def _quantities(value: Any, where: str) -> None:
    for resource, q in _object(value, where).items():
        if isinstance(q, bool) or not isinstance(q, (str, int, float)):
            raise BadRequest(f"{where}[{resource!r}] must be a quantity (e.g. 500m, 2Gi), not {type(q).__name__}")
        try:
            number = parse_quantity(q)
        except ValueError as exc:
            raise BadRequest(f"{where}[{resource!r}]: {exc}") from None
        if abs(number) * 1000 > INT64:
            raise BadRequest(f"{where}[{resource!r}] = {q!r} is beyond the int64 range quantities are counted in")


def check_pod(pod: Any) -> None:
    """The parts of a Pod the extender reads have the types Kubernetes gives them; BadRequest naming the first that does not."""
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise BadRequest("ExtenderArgs.Pod must be a Pod object with metadata")
    md = pod["metadata"]
    for key in ("name", "namespace", "generateName"):
        if md.get(key) is not None and not isinstance(md[key], str):
            raise BadRequest(f"Pod.metadata.{key} must be a string")
    _strings(md.get("annotations"), "Pod.metadata.annotations")
    spec = _object(pod.get("spec"), "Pod.spec")
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        if containers is None:
            continue
        if not isinstance(containers, list):
            raise BadRequest(f"Pod.spec.{group} must be a list")
        for i, c in enumerate(containers):
            res = _object(_object(c, f"Pod.spec.{group}[{i}]").get("resources"), f"Pod.spec.{group}[{i}].resources")
            for kind in ("requests", "limits"):
                _quantities(res.get(kind), f"Pod.spec.{group}[{i}].resources.{kind}")


def _check_node(node: Any, i: int) -> None:
    if not isinstance(node, dict) or not isinstance(node.get("metadata"), dict):
        raise BadRequest("ExtenderArgs.Nodes must be a NodeList whose items are Node objects with metadata")
    md = node["metadata"]
    if not isinstance(md.get("name"), str):
        raise BadRequest(f"ExtenderArgs.Nodes.items[{i}].metadata.name must be a string")
    _strings(md.get("annotations"), f"node {md['name']}: metadata.annotations")
    status = _object(node.get("status"), f"node {md['name']}: status")
    _object(status.get("allocatable"), f"node {md['name']}: status.allocatable")


def parse_args(body: bytes, max_nodes: int = MAX_NODES) -> ExtenderArgs:
    """ExtenderArgs from a request body; `BadRequest` naming what is wrong (malformed, or more than
    `max_nodes` candidates)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"body is not JSON ({exc}); expected ExtenderArgs {{Pod, Nodes | NodeNames}}") from None
    if not isinstance(doc, dict):
        raise BadRequest("body must be a JSON object (ExtenderArgs {Pod, Nodes | NodeNames})")
    pod = _field(doc, "Pod")
    check_pod(pod)
    nodes, names = _field(doc, "Nodes"), _field(doc, "NodeNames")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest("ExtenderArgs.NodeNames must be a list of node names")
        _count(len(names), max_nodes)
        return ExtenderArgs(pod, None, names)
    if nodes is None:
        raise BadRequest("ExtenderArgs has neither Nodes nor NodeNames")
    items = nodes.get("items") if isinstance(nodes, dict) else None
    if not isinstance(items, list):
        raise BadRequest("ExtenderArgs.Nodes must be a NodeList whose items are Node objects with metadata")
    _count(len(items), max_nodes)
    for i, n in enumerate(items):
        _check_node(n, i)
    return ExtenderArgs(pod, items, None)


def _count(n: int, max_nodes: int) -> None:
    if n > max_nodes:
        raise BadRequest(f"{n} candidate nodes is over the limit of {max_nodes} per call (tidewise extender --max-nodes)")


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
