"""This node's pods, in the shape the policy needs, from a Kubernetes Pod object (a dict).

Sources (`--pods-from`): the kubelet's `/pods` endpoint, the API server (`spec.nodeName` field
selector, through `kube.KubeApi`), or a file holding the same JSON/YAML shape (a PodList, a list of
pods, or one pod). A pod object without the fields the agent needs is logged and skipped.
"""
from __future__ import annotations

import json
import logging
import os
import re
from typing import Any, Callable, Mapping

from contracts.errors import InputError, TidewiseError
from contracts.quantity import parse_cpu_millis, parse_memory_bytes
from node_enforcer.model.pod import Container, Pod

log = logging.getLogger(__name__)

# Both reach cgroup paths (`kubepods/pod<uid>/<container id>`), so a `../` in either, from a pods
# file or a forged object, would point the agent's writes anywhere. A uid is the API server's RFC
# 4122 UUID or, for a static pod, the kubelet's 32-hex-digit hash; a container id (after
# `containerd://`) is a runtime's id: hex for containerd, CRI-O and Docker, never a path.
_UID = re.compile(r"^(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-fA-F]{32})$")
_CONTAINER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")

def _k8s_qos(containers: list[Container]) -> str:
    """The kubelet's QoS class, for pods whose status does not carry it yet."""
    if all(c.cpu_request_millis == 0 and c.memory_request_bytes == 0 and c.cpu_limit_millis is None
           and c.memory_limit_bytes is None for c in containers):
        return "BestEffort"
    if all(c.cpu_limit_millis is not None and c.memory_limit_bytes is not None
           and c.cpu_limit_millis == c.cpu_request_millis and c.memory_limit_bytes == c.memory_request_bytes
           for c in containers):
        return "Guaranteed"
    return "Burstable"


def pod_from_object(obj: Mapping[str, Any]) -> Pod:
    """One Kubernetes Pod dict -> `Pod`; raises ValueError naming the missing or bad field."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"pod is a {type(obj).__name__}, not a mapping")
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    uid, name = meta.get("uid"), meta.get("name")
    if not uid or not name:
        raise ValueError("pod without metadata.uid or metadata.name")
    if not isinstance(uid, str) or not _UID.match(uid):
        raise ValueError(f"pod {name}: metadata.uid {str(uid)[:80]!r} is not a Kubernetes uid (a UUID or "
                         "32 hex digits); it would name a cgroup path")
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise ValueError(f"pod {name}: metadata.annotations is not a mapping")
    ids = {}
    for cs in status.get("containerStatuses") or []:
        cid = cs.get("containerID") or ""
        if cs.get("name") and cid:
            ids[cs["name"]] = cid = str(cid).split("://", 1)[-1]
            if not _CONTAINER_ID.match(cid):
                raise ValueError(f"pod {name}: container {cs['name']}: containerID {cid[:80]!r} is not a "
                                 "runtime's id (letters, digits, '_', '.', '-'); it would name a cgroup path")
    containers = []
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        cpu_lim = parse_cpu_millis(lim["cpu"]) if "cpu" in lim else None
        mem_lim = parse_memory_bytes(lim["memory"]) if "memory" in lim else None
        # as the API server does: a limit without a request defaults the request to the limit
        cpu_req = parse_cpu_millis(req["cpu"]) if "cpu" in req else (cpu_lim or 0)
        mem_req = parse_memory_bytes(req["memory"]) if "memory" in req else (mem_lim or 0)
        containers.append(Container(name=c.get("name", ""), id=ids.get(c.get("name", "")),
                                    cpu_request_millis=cpu_req, cpu_limit_millis=cpu_lim,
                                    memory_request_bytes=mem_req, memory_limit_bytes=mem_lim))
    if not containers:
        raise ValueError(f"pod {name}: spec.containers is empty")
    return Pod(
        uid=str(uid), namespace=str(meta.get("namespace") or "default"), name=str(name),
        node_name=spec.get("nodeName"), k8s_qos=status.get("qosClass") or _k8s_qos(containers),
        priority=int(spec.get("priority") or 0), annotations={str(k): str(v) for k, v in annotations.items()},
        containers=tuple(containers), phase=str(status.get("phase") or "Running"),
        created=str(meta.get("creationTimestamp") or ""),
    )


def pods_from_objects(objs: Any, node: str | None = None) -> list[Pod]:
    """A PodList / list / single pod -> the running pods of `node` (all nodes when None).

    Bad pod objects are logged with their name and skipped; finished pods hold no cgroups."""
    if isinstance(objs, Mapping):
        objs = objs.get("items", [objs]) if objs.get("kind") != "Pod" else [objs]
    if not isinstance(objs, list):
        raise InputError(f"pods: expected a PodList, a list of pods or one pod, got {type(objs).__name__}")
    out = []
    for obj in objs:
        try:
            pod = pod_from_object(obj)
        except (ValueError, TypeError, KeyError, OverflowError) as exc:
            name = (obj.get("metadata") or {}).get("name", "?") if isinstance(obj, Mapping) else "?"
            log.warning("skipping pod %s: %s", name, exc, extra={"pod": name})
            continue
        if node and pod.node_name and pod.node_name != node:
            continue
        if pod.phase in ("Succeeded", "Failed"):
            continue
        out.append(pod)
    out.sort(key=lambda p: (p.namespace, p.name, p.uid))
    return out


POD_CONTAINERS = {"Pod", "PodList", "List"}  # what `kubectl get pods -o yaml|json` and the kubelet give


def _kinds(data: Any) -> set[str]:
    """The `kind`s of the objects in a pods file (items without a kind, as in a PodList, count as pods)."""
    objs = data if isinstance(data, list) else [data]
    kinds = set()
    for obj in objs:
        if isinstance(obj, Mapping):
            kinds.add(str(obj.get("kind") or "Pod"))
            if isinstance(obj.get("items"), list):
                kinds |= _kinds(obj["items"])
    return kinds


def read_pods_file(path: str, node: str | None = None) -> list[Pod]:
    """The pods of a file; InputError when it holds other kinds of objects (a Node list read as pods
    once gave an empty plan and exit 0)."""
    if os.path.isdir(path):
        raise InputError(f"--pods {path} is a folder; give a file of Pods (kubectl get pods -o yaml)")
    if not os.path.exists(path):
        raise InputError(f"--pods {path}: no such file")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        import yaml

        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            raise InputError(f"--pods {path}: neither JSON nor YAML: {exc}") from exc
        data = docs[0] if len(docs) == 1 else docs
    other = _kinds(data) - POD_CONTAINERS
    if other:
        raise InputError(f"--pods {path} holds {', '.join(sorted(other))} objects, not Pods; give a Pod, a PodList "
                         "or `kubectl get pods -o yaml` output")
    return pods_from_objects(data, node)


class KubeletPods:
    """GET the kubelet's `/pods` (a PodList of this node), with the service-account token.

    `get` is injectable (defaults to `requests.get`) so tests reach a local HTTP fake."""

    def __init__(self, url: str = "https://127.0.0.1:10250", token_file: str | None =
                 "/var/run/secrets/kubernetes.io/serviceaccount/token", verify: bool | str = True,
                 timeout: float = 5.0, get: Callable[..., Any] | None = None) -> None:
        self.url, self.token_file, self.verify, self.timeout, self._get = url, token_file, verify, timeout, get

    def list(self, node: str | None = None) -> list[Pod]:
        get = self._get
        if get is None:
            import requests

            get = requests.get
        headers = {}
        if self.token_file and os.path.exists(self.token_file):
            with open(self.token_file, encoding="utf-8") as fh:
                headers["Authorization"] = f"Bearer {fh.read().strip()}"
        try:
            resp = get(self.url.rstrip("/") + "/pods", headers=headers, verify=self.verify, timeout=self.timeout)
            resp.raise_for_status()
            data = resp.json()
        except Exception as exc:  # requests' exception tree plus JSON errors: one clear message
            raise TidewiseError(f"kubelet {self.url}/pods: {exc}") from exc
        return pods_from_objects(data, node)
