"""An absurd reclaim plan grants no more than a well-formed one: a validity beyond
`MAX_PLAN_WINDOW` is cut to it, amounts are cut to the node's capacity (per NUMA node too), and a
value that is not a whole number (Infinity, NaN, true, a fraction) is refused, never a crash."""
import datetime as dt
import json
import logging
import os
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.errors import InputError
from contracts.reclaim import plan_from_annotation
from node_enforcer.collect.reclaim import reclaim_loader
from node_enforcer.collect.topology import read_topology
from tests.node_enforcer.conftest import MIXED_PODS, TWO_SOCKET
from tidewise.cli import main

GiB = 2**30
DAY = 86400  # contracts.reclaim.MAX_PLAN_WINDOW
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)


def _fixture():
    """The two-socket fixture's capacity: 32 threads, 2 NUMA nodes of 16 threads and 64 GiB each."""
    from contracts.reclaim import NodeCapacity

    return NodeCapacity(32_000, 128 * GiB, {0: 16_000, 1: 16_000}, {0: 64 * GiB, 1: 64 * GiB})


def _doc(generated="2026-12-01T11:00:00Z", until="2026-12-01T13:00:00Z", cpu=4000, mem=GiB, numa=None, node="n1"):
    return {"schema": 1, "node": node, "generated_at": generated, "valid_until": until, "reclaimed_millicpu": cpu,
            "reclaimed_memory_bytes": mem, "shared_demand_millicpu": 1000, "numa_layout": "known" if numa else "unknown",
            "numa": numa or {}}


def _iso(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_plan_valid_until_9999_is_honoured_only_a_day_from_its_generation():
    text = json.dumps(_doc(until="9999-12-31T23:59:59Z"))
    plan = plan_from_annotation(text, "n1", NOW)
    assert plan.window_seconds == DAY
    assert "honoured only until 2026-12-02T11:00:00Z" in plan.reasons[0]
    later = NOW + dt.timedelta(hours=23, minutes=1)  # a day after its generation: expired, says why
    with pytest.raises(InputError, match="expired at 2026-12-02T11:00:00Z.*more than 24 h after generated_at"):
        plan_from_annotation(text, "n1", later)
    # a plan within the window keeps its own end
    assert plan_from_annotation(json.dumps(_doc()), "n1", NOW).window_seconds == 7200


def test_a_stale_file_valid_until_9999_reclaims_nothing_and_the_log_says_why(tmp_path, caplog):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_doc(generated=_iso(NOW - dt.timedelta(hours=30)), until="9999-12-31T23:59:59Z")))
    with caplog.at_level(logging.WARNING):
        got = reclaim_loader(str(path), "n1", now=lambda: NOW)()
    assert (got.reclaimed_millicpu, got.reclaimed_memory_bytes) == (0, 0)
    assert "reclaim plan refused" in caplog.text and "is more than 24 h after generated_at" in caplog.text


@pytest.mark.parametrize("mem", [1e30, 10**30, "1" + "0" * 30])
def test_amounts_are_cut_to_the_node_and_each_numa_node(tmp_path, caplog, mem):
    numa = {"0": {"millicpu": 10**9, "memory_bytes": 200 * GiB}, "1": {"millicpu": 2000, "memory_bytes": GiB},
            "7": {"millicpu": 1000, "memory_bytes": GiB}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_doc(cpu=10**12, mem=mem, numa=numa)).replace('"1e+30"', "1e30"))
    with caplog.at_level(logging.WARNING):
        load = reclaim_loader(str(path), "n1", now=lambda: NOW, capacity=_fixture())
        got = load()
        load()
    assert (got.reclaimed_millicpu, got.reclaimed_memory_bytes) == (32_000, 128 * GiB)
    assert {n: (z.millicpu, z.memory_bytes) for n, z in got.numa.items()} == {0: (16_000, 64 * GiB), 1: (2000, GiB)}
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1 and "reclaim plan cut to what a well-formed plan could grant" in lines[0]  # once
    assert "NUMA node 7 is not on this machine" in lines[0] and "more than the node's memory" in lines[0]


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "true", "1.5", '"16Gi"', "[1]"])
def test_a_value_that_is_not_a_whole_number_is_refused_not_a_crash(tmp_path, caplog, value):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_doc(mem=0)).replace('"reclaimed_memory_bytes": 0', f'"reclaimed_memory_bytes": {value}'))
    with caplog.at_level(logging.WARNING):
        got = reclaim_loader(str(path), "n1", now=lambda: NOW)()
    assert (got.reclaimed_millicpu, got.reclaimed_memory_bytes) == (0, 0) and "reclaim plan refused" in caplog.text


def test_node_capacity_reads_the_numa_nodes_and_else_proc_meminfo(tmp_path):
    from contracts.reclaim import NodeCapacity, within_capacity
    from node_enforcer.collect.reclaim import node_capacity
    from node_enforcer.model.topology import Topology

    assert node_capacity(read_topology(TWO_SOCKET)) == _fixture()

    (tmp_path / "meminfo").write_text("MemTotal:       8388608 kB\nMemFree: 1 kB\n")
    assert node_capacity(Topology.uniform(8), str(tmp_path)).memory_bytes == 8 * GiB
    assert node_capacity(Topology.uniform(8), str(tmp_path / "none")).memory_bytes is None
    unknown = within_capacity(plan_from_annotation(json.dumps(_doc()), "n1", NOW), NodeCapacity(8000, None))
    assert unknown.reclaimed_memory_bytes == 0 and unknown.reclaimed_millicpu == 4000  # fail closed


amount = st.one_of(st.integers(-10, 10**40), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                   st.text(max_size=5), st.just("9" * 40))
day = st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30)).map(_iso)


@settings(max_examples=300, deadline=None)
@given(cpu=amount, mem=amount, zones=st.dictionaries(st.sampled_from(["0", "1", "5"]), st.tuples(amount, amount)),
       generated=st.one_of(day, st.just(_iso(NOW - dt.timedelta(minutes=5)))),
       until=st.one_of(day, st.just("9999-12-31T23:59:59Z")))
def test_no_plan_grants_more_than_the_node_has_or_for_longer_than_a_day(cpu, mem, zones, generated, until):
    numa = {k: {"millicpu": c, "memory_bytes": m} for k, (c, m) in zones.items()}
    try:
        text = json.dumps(_doc(generated, until, cpu, mem, numa))
    except ValueError:
        return
    cap = _fixture()
    got = reclaim_loader(None, "n1", now=lambda: NOW, annotations=lambda: {"tidewise.io/reclaim-plan": text},
                         capacity=cap)()
    assert 0 <= got.reclaimed_millicpu <= cap.millicpu and 0 <= got.reclaimed_memory_bytes <= cap.memory_bytes
    assert got.window_seconds <= DAY
    for n, z in got.numa.items():
        assert z.millicpu <= cap.numa_millicpu[n] and z.memory_bytes <= cap.numa_memory_bytes[n]
    assert sum(z.millicpu for z in got.numa.values()) <= got.reclaimed_millicpu
    assert sum(z.memory_bytes for z in got.numa.values()) <= got.reclaimed_memory_bytes


def test_enforce_cuts_an_absurd_plan_to_the_fixture_node(tmp_path, capsys, caplog):
    cg = tmp_path / "cgroup"
    shutil.copytree(os.path.join(TWO_SOCKET, "fs", "cgroup"), cg)
    now = dt.datetime.now(dt.timezone.utc)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_doc(_iso(now - dt.timedelta(minutes=1)), "9999-12-31T23:59:59Z", 6000, 1e30,
                                    node="fixture-node")))
    with caplog.at_level(logging.WARNING):
        rc = main(["enforce", "--once", "--dry-run", "--node", "fixture-node", "--pods-from", "file", "--pods",
                   MIXED_PODS, "--sysfs-root", TWO_SOCKET, "--cgroup-root", str(cg), "--reclaim-plan", str(path),
                   "--checkpoint", str(tmp_path / "ck.json"), "--no-eviction", "--plan-out", str(tmp_path / "o.json")])
    assert rc == 0
    doc = json.loads((tmp_path / "o.json").read_text())
    batch = [p for p in doc["allocation"]["pods"] if p["qos"] == "reclaimed_cores"]
    assert batch and all(p["memory_max_bytes"] <= 128 * GiB for p in batch)
    assert doc["isolation"]["reclaimed_root"]["memory_max_bytes"] == 128 * GiB
    assert doc["allocation"]["batch_memory"]["lent_bytes"] == 128 * GiB
    assert "reclaim plan cut to what a well-formed plan could grant" in caplog.text
    assert "honoured only until" in caplog.text
