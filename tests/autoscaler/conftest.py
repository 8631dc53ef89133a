"""Shared fixtures: a small synthetic cluster as objects and history, and schema validation."""
from __future__ import annotations

import copy
import functools
import os

import jsonschema
import pandas as pd
import pytest
import yaml

from studies.demo import MemorySource, cluster_objects
from autoscaler.model.cluster import ClusterState
from predictor.history import History, history_from_frame
from predictor.sources.synthetic import generate_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The CRD schemas vendored with the project (schemas/k8s/README.md names their sources and licences).
K8S_SCHEMAS = os.path.join(ROOT, "schemas", "k8s")
STEP = pd.Timedelta("5min")
END = pd.Timestamp("2026-11-02T00:00:00Z")
CRDS = {
    "VerticalPodAutoscaler": "vpa-v1-crd.yaml",
    "CustomNodeResource": "katalyst-node.katalyst.kubewharf.io_customnoderesources.yaml",
    "ResourceRecommend": "katalyst-recommendation.katalyst.kubewharf.io_resourcerecommends.yaml",
}
K8S_VERSION = "1.33.0"


@functools.lru_cache(maxsize=None)
def crd_validator(kind: str) -> jsonschema.Draft7Validator:
    path = os.path.join(K8S_SCHEMAS, CRDS[kind])
    with open(path) as fh:
        crd = next(d for d in yaml.safe_load_all(fh) if d and d["spec"]["names"]["kind"] == kind)
    version = next(v for v in crd["spec"]["versions"] if v.get("served") and v.get("storage"))
    return jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"],
                                      format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def validate_object(obj: dict) -> None:
    """Raise unless `obj` is valid for its kind: the published CRD schema, or Kubernetes' own."""
    kind = obj.get("kind")
    if kind in CRDS:
        errors = sorted(crd_validator(kind).iter_errors(obj), key=lambda e: list(e.path))
        if errors:
            raise AssertionError(f"{kind} {obj.get('metadata', {}).get('name')}: " +
                                 "; ".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:5]))
        group, _, version = obj["apiVersion"].rpartition("/")
        crd = yaml.safe_load(open(os.path.join(K8S_SCHEMAS, CRDS[kind]))) if kind != "VerticalPodAutoscaler" else None
        if crd is not None:
            assert crd["spec"]["group"] == group, f"{kind} apiVersion group {group} != {crd['spec']['group']}"
        return
    import kubernetes_validate

    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def fast_settings():
    """Default settings, but one cheap named model instead of the per-series backtest (`auto`):
    the loop's behaviour is under test here, not model selection, and 2 cores are shared."""
    from autoscaler.settings import ServeSettings

    s = ServeSettings()
    s.loop.forecast_model = "seasonal_naive_daily"
    return s


class StaticCluster:
    """The cluster as a list of objects (our ClusterReader protocol); each read is a fresh copy."""

    def __init__(self, objects):
        self.objects = objects

    def read(self) -> ClusterState:
        return ClusterState.from_objects(copy.deepcopy(self.objects))


@pytest.fixture(scope="session")
def small():
    """6 workloads (4 with an HPA), 2 nodes, 9 days of 5-minute history ending at a midnight."""
    c = generate_cluster(seed=3, workloads=6, namespaces=2, nodes=2, days=9, end=END, gaps=False)
    frame = c.history()
    return c, frame, history_from_frame(frame, STEP, "test")


@pytest.fixture
def objects(small):
    return cluster_objects(small[0])


@pytest.fixture
def history(small) -> History:
    return copy.deepcopy(small[2])


def source_of(history: History) -> MemorySource:
    return MemorySource(history)
