"""Shared helpers for the node-enforcer tests: fixture paths and a compact pod builder."""
from __future__ import annotations

import os

import pytest

from node_enforcer.podspec import make_pod, make_pod_obj  # noqa: F401  (the tests import them from here)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSFS = os.path.join(ROOT, "tests", "fixtures", "sysfs")
TWO_SOCKET = os.path.join(SYSFS, "two-socket")
FOUR_NUMA = os.path.join(SYSFS, "four-numa")
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
MIXED_PODS = os.path.join(DATA, "pods-mixed.yaml")
# the annotation's own JSON (contracts.reclaim.plan_document), valid ten years so that the fixture never expires
RECLAIM_PLAN = os.path.join(DATA, "reclaim-plan.json")

@pytest.fixture
def two_socket():
    from node_enforcer.collect.topology import read_topology

    return read_topology(TWO_SOCKET)


@pytest.fixture
def four_numa():
    from node_enforcer.collect.topology import read_topology

    return read_topology(FOUR_NUMA)
