"""The reclaim plan's two ends without a server: serve's per-NUMA amounts from usage and the node
annotation it writes (autoscaler), and the agent's checks when it reads one (node_enforcer)."""
from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest

from autoscaler.logic.reclaim import numa_zone, plan_node, proportional
from autoscaler.output.objects import PLAN_ANNOTATION, node_change, plan_document
from autoscaler.settings import ReclaimSettings
from contracts.reclaim import plan_from_annotation, zero_plan
from predictor.errors import InputError

GIB = 2**30
T0 = "2026-12-01T09:00:00Z"
AT = dt.datetime(2026, 12, 1, 9, 10, tzinfo=dt.timezone.utc)


def settings(**kw) -> ReclaimSettings:
    return ReclaimSettings(max_step_fraction=1.0, **kw)


def two_zone_plan(bound_zone: int = 1):
    total_cpu = np.array([3.0, 3.0])  # a bound 2-core pod and an unbound 1-core pod
    total_mem = np.array([6.0 * GIB, 6.0 * GIB])
    return plan_node("n1", 8000, 16 * GIB, total_cpu, total_mem, settings(), T0, 3600, numa_nodes=2,
                     bound_cpu={bound_zone: np.array([2.0, 2.0])}, bound_memory={bound_zone: np.array([4.0 * GIB] * 2)})


def test_per_numa_amounts_follow_usage_not_an_even_split():
    p = two_zone_plan(1)
    # zone = 4000m - 500m reserve - its peak - 200m margin; the unbound 1000m is spread 500/500
    assert {z: n.millicpu for z, n in p.numa.items()} == {0: 2800, 1: 800}
    assert p.reclaimed_millicpu == 3600 and sum(n.memory_bytes for n in p.numa.values()) == p.reclaimed_memory_bytes
    assert p.numa[1].memory_bytes < p.numa[0].memory_bytes
    assert {z: n.millicpu for z, n in two_zone_plan(0).numa.items()} == {0: 800, 1: 2800}


def test_zones_sum_to_a_smoothed_total_and_an_unknown_layout_has_no_zones():
    s = ReclaimSettings()  # increases limited to 10% of allocatable: 800m
    p = plan_node("n1", 8000, 16 * GIB, np.array([3.0]), np.array([6.0 * GIB]), s, T0, 3600, numa_nodes=2,
                  bound_cpu={1: np.array([2.0])}, bound_memory={1: np.array([4.0 * GIB])})
    assert p.reclaimed_millicpu == 800 and sum(n.millicpu for n in p.numa.values()) == 800
    assert p.numa[0].millicpu > p.numa[1].millicpu  # the limited total is split like the raw amounts
    unknown = plan_node("n1", 8000, 16 * GIB, np.array([3.0]), np.array([6.0 * GIB]), settings(), T0, 3600)
    assert unknown.numa == {} and any("NUMA layout unknown" in r for r in unknown.reasons)
    assert plan_document(unknown)["numa_layout"] == "unknown"


def test_numa_zone_and_proportional_split():
    ann = "katalyst.kubewharf.io/numa_bind_result"
    assert numa_zone({ann: "1"}, 2) == 1 and numa_zone({ann: "2"}, 2) is None
    assert numa_zone({ann: "x"}, 2) is None and numa_zone(None, 2) is None
    assert proportional(10, {0: 1, 1: 3}) == {0: 3, 1: 7} and proportional(5, {0: 0, 1: 0}) == {0: 3, 1: 2}


def node(annotations=None, reclaimed=None):
    alloc = {"cpu": "8", "memory": "16Gi"}
    if reclaimed:
        alloc.update(reclaimed)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "annotations": annotations or {}},
            "status": {"allocatable": alloc, "capacity": dict(alloc)}}


def test_node_change_writes_the_plan_annotation_and_refreshes_it_before_it_expires():
    s = settings()
    p = two_zone_plan()
    c = node_change(node(), p, s)
    assert c is not None and set(c.patch) == {"metadata", "status"}
    doc = json.loads(c.patch["metadata"]["annotations"][PLAN_ANNOTATION])
    assert doc["valid_until"] == "2026-12-01T10:00:00Z" and doc["numa"]["1"]["millicpu"] == 800
    written = node(c.obj["metadata"]["annotations"], c.obj["status"]["allocatable"])
    assert node_change(written, p, s) is None  # same numbers, 60 min left: no write
    later = plan_node("n1", 8000, 16 * GIB, np.array([3.0, 3.0]), np.array([6.0 * GIB] * 2), s,
                      "2026-12-01T09:31:00Z", 3600, previous=p, numa_nodes=2,
                      bound_cpu={1: np.array([2.0, 2.0])}, bound_memory={1: np.array([4.0 * GIB] * 2)})
    refresh = node_change(written, later, s)  # 29 min left of 60: republished, metadata only
    assert refresh is not None and set(refresh.patch) == {"metadata"} and refresh.subresource is None


def test_the_agent_reads_what_serve_writes_and_refuses_what_it_cannot_trust():
    doc = plan_document(two_zone_plan())
    text = json.dumps(doc)
    got = plan_from_annotation(text, "n1", AT)
    assert (got.reclaimed_millicpu, {z: n.millicpu for z, n in got.numa.items()}) == (3600, {0: 2800, 1: 800})
    bad = {
        "missing": None,
        "not JSON": "{",
        "schema": json.dumps(dict(doc, schema=2)),
        "other node": json.dumps(dict(doc, node="n2")),
        "expired": json.dumps(dict(doc, valid_until="2026-12-01T09:05:00Z")),
        "future": json.dumps(dict(doc, generated_at="2026-12-01T09:30:00Z", valid_until="2026-12-01T10:30:00Z")),
        "numa over total": json.dumps(dict(doc, numa={"0": {"millicpu": 9000, "memory_bytes": 0}})),
        "negative": json.dumps(dict(doc, reclaimed_millicpu=-1)),
        "no total": json.dumps({k: v for k, v in doc.items() if k != "reclaimed_memory_bytes"}),
    }
    for why, value in bad.items():
        with pytest.raises(InputError):
            plan_from_annotation(value, "n1", AT)
            pytest.fail(why)
    z = zero_plan("n1", AT)
    assert (z.reclaimed_millicpu, z.reclaimed_memory_bytes, dict(z.numa)) == (0, 0, {})
