"""Shared helpers for the node-enforcer tests: fixture paths and a compact pod builder."""
from __future__ import annotations

import atexit
import datetime as dt
import json
import os
import shutil
import tempfile

import pytest

from node_enforcer.podspec import make_pod, make_pod_obj  # noqa: F401  (the tests import them from here)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSFS = os.path.join(ROOT, "tests", "fixtures", "sysfs")
TWO_SOCKET = os.path.join(SYSFS, "two-socket")
FOUR_NUMA = os.path.join(SYSFS, "four-numa")
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
MIXED_PODS = os.path.join(DATA, "pods-mixed.yaml")
# the annotation's own JSON (contracts.reclaim.plan_document): data/reclaim-plan.json's amounts, dated
# now (a plan is honoured at most contracts.reclaim.MAX_PLAN_WINDOW after its generated_at)
RECLAIM_PLAN_TEMPLATE = os.path.join(DATA, "reclaim-plan.json")


def dated_plan(template: str, folder: str, hours: float = 20.0) -> str:
    """A copy of the plan file `template` in `folder`, generated a minute ago and valid `hours`."""
    with open(template, encoding="utf-8") as fh:
        doc = json.load(fh)
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    doc["generated_at"] = (now - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc["valid_until"] = (now + dt.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
    path = os.path.join(folder, os.path.basename(template))
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    return path


_PLAN_DIR = tempfile.mkdtemp(prefix="tidewise-plan-")
atexit.register(shutil.rmtree, _PLAN_DIR, True)
RECLAIM_PLAN = dated_plan(RECLAIM_PLAN_TEMPLATE, _PLAN_DIR)


@pytest.fixture
def two_socket():
    from node_enforcer.collect.topology import read_topology

    return read_topology(TWO_SOCKET)


@pytest.fixture
def four_numa():
    from node_enforcer.collect.topology import read_topology

    return read_topology(FOUR_NUMA)
