"""Shared fixtures: a small synthetic cluster as objects and history, and schema validation."""
from __future__ import annotations

import copy

import pandas as pd
import pytest

from studies.demo import MemorySource, cluster_objects
from autoscaler.model.cluster import ClusterState
from predictor.history import History, history_from_frame
from predictor.sources.synthetic import generate_cluster
from testsupport.k8s_schemas import CRDS, K8S_SCHEMAS, ROOT, crd_validator, validate_object  # noqa: F401 (re-exported)

STEP = pd.Timedelta("5min")
END = pd.Timestamp("2026-11-02T00:00:00Z")


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


@pytest.fixture
def api_factory():
    """`start(objects) -> (fake, kube)`: an API fake holding `objects` and a `Kube` on it (no retries, no
    sleeping); every one started is stopped after the test."""
    from kubernetes import client

    from autoscaler.kube import Kube
    from testsupport.kube_fake import FakeApiServer

    made = []

    def start(objs):
        fake = FakeApiServer(objs).start()
        cfg = client.Configuration()
        cfg.host = fake.url
        kube = Kube(client.ApiClient(cfg), sleep=lambda s: None, max_retries=0)
        made.append((fake, kube))
        return fake, kube

    yield start
    for fake, kube in made:
        kube.api_client.close()
        fake.stop()
