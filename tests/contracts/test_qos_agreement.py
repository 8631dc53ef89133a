"""Every component reads a pod's QoS annotations alike (contracts.qos.parse_qos), fail-closed (issue 22,
defects 3 and 4): one table of annotations, each run through the node agent (pool, CPU quota, memory
cap, the reclaimed root's cap, memory-pressure victims), serve (online demand of the reclaim plan,
`movable()`, tide's batch/online split, rebalance's order) and the scheduler extender (reclaim room
check), and each must treat the pod as the same level."""
from __future__ import annotations

import datetime as dt
import json
import logging

import pytest

from extender.filter import filter_node
from extender.pod import pod_needs
from autoscaler.logic.decide_node import NodeInputs, decide_node
from autoscaler.logic.rebalance import QOS_ORDER
from autoscaler.model.views import NodeView, PodView, report_qos
from autoscaler.output.eviction import movable
from autoscaler.routines.tide import _batch
from autoscaler.settings import ReclaimSettings
from contracts.qos import CPU_ENHANCEMENT as CPU, MEMORY_ENHANCEMENT as MEM, QOS_ANNOTATION as Q
from contracts.qos import QosLevel, QosReporter
from contracts.reclaim import ReclaimPlan
from node_enforcer.collect.pods import pod_from_object
from node_enforcer.collect.qos import QosResolver
from node_enforcer.model.pressure import Pressure
from node_enforcer.policy.eviction import EvictionSettings, choose_victims
from node_enforcer.policy.isolation import IsolationSettings, plan_isolation
from node_enforcer.policy.plan import plan
from node_enforcer.podspec import make_pod_obj



@pytest.fixture(scope="module")
def two_socket():
    from node_enforcer.collect.topology import read_topology
    from tests.node_enforcer.conftest import TWO_SOCKET

    return read_topology(TWO_SOCKET)


R, S, D, SYS = QosLevel.RECLAIMED, QosLevel.SHARED, QosLevel.DEDICATED, QosLevel.SYSTEM
CASES = [
    ("absent", {}, S),
    ("reclaimed", {Q: "reclaimed_cores"}, R),
    ("dedicated", {Q: "dedicated_cores"}, D),
    ("system", {Q: "system_cores"}, SYS),
    ("shared", {Q: "shared_cores"}, S),
    ("dedicated, trailing space", {Q: "dedicated_cores "}, D),
    ("system, newline", {Q: "system_cores\n"}, SYS),
    ("system, wrong case and newline", {Q: "System_Cores\n"}, SYS),
    ("reclaimed, trailing space", {Q: "reclaimed_cores "}, R),
    ("reclaimed, upper case and tab", {Q: "\tRECLAIMED_CORES"}, R),
    ("reclaimed, huge padding", {Q: " " * 100_000 + "reclaimed_cores"}, R),
    ("unknown level", {Q: "gold"}, S),
    ("empty level", {Q: ""}, S),
    ("dash instead of underscore", {Q: "dedicated-cores"}, S),
    ("huge level", {Q: "dedicated_cores" + "x" * 300_000}, S),
    ("non-string level", {Q: 5}, S),
    ("list level", {Q: ["dedicated_cores"]}, S),
    ("reclaimed, oom_priority 99999999", {Q: "reclaimed_cores", MEM: '{"oom_priority": 99999999}'}, R),
    ("reclaimed, numa_binding", {Q: "reclaimed_cores", MEM: '{"numa_binding": true}'}, R),
    ("reclaimed, enhancement not JSON", {Q: "reclaimed_cores", CPU: "{numa_binding: yes"}, R),
    ("reclaimed, oom_priority 1e999", {Q: "reclaimed_cores", MEM: '{"oom_priority": 1e999}'}, R),
    ("reclaimed, huge enhancement", {Q: "reclaimed_cores", MEM: json.dumps({"oom_priority": 1, "x": "y" * 100_000})}, R),
    ("reclaimed, deep enhancement", {Q: "reclaimed_cores", MEM: "[" * 900 + "]" * 900}, R),
    ("reclaimed, non-string enhancement", {Q: "reclaimed_cores", MEM: {"oom_priority": 5}}, R),
    ("dedicated, numa_binding", {Q: "dedicated_cores", CPU: '{"numa_binding": true}'}, D),
    ("dedicated, malformed enhancement", {Q: "dedicated_cores", CPU: '{"numa_binding": "yes"}'}, S),
    ("system, malformed enhancement", {Q: "system_cores", MEM: "[1]"}, S),
    ("unknown level with numa_binding", {Q: "platinum", CPU: '{"numa_binding": true}'}, S),
]
IDS = [c[0] for c in CASES]
NOW = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone.utc)
OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "job-5f", "uid": "u1", "controller": True}]
PLAN = ReclaimPlan(node="n1", window_start="2026-12-01T08:45:00Z", window_seconds=3600,
                   reclaimed_millicpu=8000, reclaimed_memory_bytes=8 * 2**30)


def case_pod(annotations: dict) -> dict:
    """The pod under test: 2 cores / 1 GiB requested, BestEffort cgroup class (the reclaimed root's)."""
    obj = make_pod_obj("case", cpu="2", memory="1Gi", uid="00000000-0000-4000-8000-00000000c0de", k8s_qos="BestEffort")
    obj["metadata"]["annotations"] = dict(annotations)
    obj["metadata"]["ownerReferences"] = OWNER
    return obj


def agent_view(obj: dict, two_socket):
    """What the node agent does with the pod next to one well-formed batch pod."""
    batch = pod_from_object(make_pod_obj("batch", "reclaimed_cores", cpu="1", k8s_qos="BestEffort"))
    pod = pod_from_object(obj)
    alloc = plan(two_socket, [pod, batch], PLAN)
    iso = plan_isolation(alloc, [pod, batch], PLAN, (), None, IsolationSettings())
    psi_only = Pressure(64 * 2**30, 32 * 2**30, 90.0)  # stalls, free memory fine: batch only
    short = Pressure(64 * 2**30, 2**20, None)  # below the watermark: batch, then shared pods
    # the first candidate is enough under PSI alone: the pod is asked about on its own
    victims = {kind: {p.name for p, _ in choose_victims(pr, [pod], alloc, {}, EvictionSettings())}
               for kind, pr in (("psi", psi_only), ("deficit", short))}
    return alloc.pod(pod.key), iso, victims


@pytest.mark.parametrize("annotations,level", [c[1:] for c in CASES], ids=IDS)
def test_the_agent_places_caps_and_evicts_as_the_level(annotations, level, two_socket):
    got, iso, victims = agent_view(case_pod(annotations), two_socket)
    assert got.qos == level.value
    assert got.pool == {R: "reclaim", D: "dedicated", SYS: "reserve", S: "share"}[level]
    if level is R:  # capped: a CPU quota and the plan's memory cap, at the lowest weight
        assert got.cpu_quota_millis is not None and got.memory_max_bytes == PLAN.reclaimed_memory_bytes
        assert got.cpu_idle
    else:
        assert got.cpu_quota_millis is None and got.memory_max_bytes is None
    # the reclaimed root keeps its memory cap only while no online pod shares the BestEffort class;
    # else it is lifted and the plan is split among the batch pods
    assert (iso.root is not None and iso.root.memory_max_bytes is not None) == (level is R)
    assert ("case" in victims["psi"]) == (level is R)
    assert ("case" in victims["deficit"]) == (level in (R, S))


@pytest.mark.parametrize("annotations,level", [c[1:] for c in CASES], ids=IDS)
def test_serve_tide_rebalance_and_movable_read_the_same_level(annotations, level):
    obj = case_pod(annotations)
    view = PodView(obj)
    assert view.qos(Q) == level.value
    # reclaim plan: the pod's 2 cores are online demand unless it is a borrower
    node = NodeView({"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}})
    got = decide_node(NodeInputs(node, [view], lambda p: None, None, "2026-12-01T09:00:00Z", 3600, 12), ReclaimSettings())
    assert got.shared_demand_millicpu == (0 if level is R else 2000)
    assert _batch(obj) == (level is R)  # tide: a batch pod, or an online one that keeps a node from being lent
    assert movable(obj) == (None if level in (R, S) else f"{level.value} pod")
    assert (view.qos(Q) in QOS_ORDER) == (level in (R, S))  # rebalance: taken at all


@pytest.mark.parametrize("annotations,level", [c[1:] for c in CASES], ids=IDS)
def test_the_extender_checks_reclaim_room_exactly_for_reclaimed_pods(annotations, level):
    obj = case_pod(annotations)
    needs = pod_needs(obj)
    assert needs.level == level.value and needs.is_reclaimed == (level is R)
    assert needs.needs_whole_numa == (annotations.get(CPU) == '{"numa_binding": true}' and level is D)
    node = {"metadata": {"name": "n1", "annotations": {}}}  # no reclaim plan: lends nothing
    verdict = filter_node(needs, node, None, None, NOW)
    assert ("reclaim plan" in verdict.reason and not verdict.ok) == (level is R)


def test_a_malformed_reclaimed_pod_is_reported_once_by_the_agent_and_by_serve(caplog):
    """Defect 3's example: reported (once per pod), yet still reclaimed."""
    obj = case_pod({Q: "reclaimed_cores", MEM: '{"oom_priority": 99999999}'})
    resolver, reporter = QosResolver(), QosReporter()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert resolver.resolve(pod_from_object(obj)).level is R
            assert report_qos([obj, case_pod({Q: "shared_cores"})], reporter) == 1
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # one from the agent, one from serve
    assert all("default/case" in m and "treated as reclaimed_cores" in m and "99999999" in m for m in lines)


def test_huge_values_are_cut_in_the_report():
    from contracts.qos import parse_qos

    spec = parse_qos({Q: "x" * 300_000, MEM: "y" * 300_000})
    assert spec.level is S and len(spec.problem or "") < 400 and "300000 chars" in (spec.problem or "")
