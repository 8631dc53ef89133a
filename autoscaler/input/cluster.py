"""Read the cluster: from the API through `Kube`, or from a YAML file (`--cluster-state`).

The file is what `kubectl get vpa,hpa,deploy,sts,pods,nodes -A -o yaml` (or `-o json`) prints (a
`List` with `items`), or a multi-document YAML of objects, or a plain YAML list of objects.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

import yaml

from autoscaler.kube import Kube
from autoscaler.model.cluster import KINDS, ClusterState
from contracts.errors import InputError
from contracts.kube_errors import NotFound

log = logging.getLogger(__name__)
CRD_KINDS = frozenset({"VerticalPodAutoscaler", "ServiceProfileDescriptor", "IntelligentHorizontalPodAutoscaler",
                       "TideNodePool"})
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster on 50,000 objects


def parse_objects(docs: list[Any], source: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for doc in docs:
        if doc is None:
            continue
        if isinstance(doc, list):
            objects.extend(doc)
        elif isinstance(doc, dict) and isinstance(doc.get("items"), list):
            objects.extend(doc["items"])
        elif isinstance(doc, dict):
            objects.append(doc)
        else:
            raise InputError(f"cluster state {source}: a document is a {type(doc).__name__}, expected objects or a List")
    return objects


def read_objects(path: str) -> list[dict[str, Any]]:
    """The objects of a `--cluster-state` file (a List, multi-document YAML, or a YAML/JSON list)."""
    if not os.path.isfile(path):
        raise InputError(f"--cluster-state {path}: no such file")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if text.lstrip()[:1] in ("{", "["):
            # `kubectl get ... -o json`: JSON is YAML too, but the json module reads it ~20x faster
            docs = [json.loads(text)]
        else:
            docs = list(yaml.load_all(text, Loader=SafeLoader))
    except (yaml.YAMLError, ValueError) as exc:
        raise InputError(f"--cluster-state {path} is not valid YAML or JSON: {str(exc).splitlines()[0]}") from None
    return parse_objects(docs, path)


def load_cluster_state(path: str) -> ClusterState:
    state = ClusterState.from_objects(read_objects(path))
    for why in state.skipped:
        log.warning("cluster state %s: %s", path, why)
    return state


@dataclass
class FileCluster:
    """The cluster as a file says it is; read again whenever the file changes (a GitOps checkout
    can move under the loop). The loop never mutates the state, so an unchanged file is not re-parsed."""

    path: str

    def __post_init__(self) -> None:
        self._seen: tuple[int, int] | None = None
        self._state: ClusterState | None = None

    def read(self) -> ClusterState:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp is None or stamp != self._seen or self._state is None:
            self._state = load_cluster_state(self.path)
            self._seen = stamp
        return self._state


_MISSING_LOGGED: set[str] = set()


def missing_crd(kind: str) -> None:
    """Note that `kind`'s CRD is not installed: the cluster has none of them, which is not an error.
    Warned once per process (serve probes again every run), then at debug level."""
    level = logging.DEBUG if kind in _MISSING_LOGGED else logging.WARNING
    _MISSING_LOGGED.add(kind)
    log.log(level, "the %s CRD is not installed: none are read (probed again every run)", kind)


@dataclass
class ApiCluster:
    """The cluster as the API server says it is; `extra_kinds` (from `OPTIONAL_KINDS`) are read too.
    A missing CRD (VPA or Katalyst) means none of that kind, not an error."""

    kube: Kube
    extra_kinds: tuple[str, ...] = ()

    def read(self) -> ClusterState:
        objects: list[dict[str, Any]] = []
        for kind in KINDS + self.extra_kinds:
            try:
                objects += self.kube.list_kind(kind)
            except NotFound:
                if kind not in CRD_KINDS:
                    raise
                missing_crd(kind)
        return ClusterState.from_objects(objects)
