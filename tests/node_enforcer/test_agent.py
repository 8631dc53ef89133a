import datetime as dt
import json
import os

from contracts.reclaim import ReclaimPlan, plan_document
from node_enforcer.agent import Agent
from node_enforcer.collect.reclaim import reclaim_loader
from node_enforcer.enforce.cgroups import V2Driver
from node_enforcer.enforce.evictor import Evictor
from node_enforcer.enforce.files import DryRunFiles, HostFiles
from node_enforcer.model.pressure import Pressure
from node_enforcer.policy.eviction import EvictionSettings
from node_enforcer.settings import EnforcerSettings
from predictor.errors import TidewiseError
from tests.node_enforcer.conftest import make_pod
from tests.node_enforcer.test_cgroups import v2_tree

DED = "dedicated_cores"


def _agent(tmp_path, topo, pods, writer=None, **kw):
    cg = str(tmp_path / "cg")
    driver = V2Driver(cg)
    v2_tree(cg, [p for p in pods if not os.path.isdir(driver.pod_dir(p))])  # a restart keeps existing cgroups
    s = EnforcerSettings(node="n1", checkpoint=str(tmp_path / "ck.json"), **kw)
    return Agent(s, topo, lambda: pods, driver, writer or HostFiles(),
                 read_pressure_fn=lambda: Pressure(64 * 2**30, 32 * 2**30, 0.0),
                 evictor=Evictor(EvictionSettings()))


def test_reconcile_enforces_checkpoints_then_is_a_no_op(tmp_path, two_socket):
    pods = [make_pod("db", DED, cpu="4"), make_pod("web", cpu="2"), make_pod("batch", "reclaimed_cores")]
    agent = _agent(tmp_path, two_socket, pods)
    first = agent.reconcile_once()
    assert first.error is None and first.report.changes and first.checkpoint_written
    assert first.restored.source == "empty"
    assert list(first.timings) == ["pods", "reclaim", "restore", "policy", "enforce", "isolate", "checkpoint", "eviction"]
    second = agent.reconcile_once()
    assert second.report.changes == [] and not second.checkpoint_written and second.evictions == []
    assert second.allocation == first.allocation


def test_restarted_agent_keeps_dedicated_pods_in_place(tmp_path, two_socket):
    pods = [make_pod("db", DED, cpu="4")]
    first = _agent(tmp_path, two_socket, pods).reconcile_once()
    # restart; a higher-priority dedicated pod has arrived meanwhile
    pods2 = pods + [make_pod("vip", DED, cpu="4", priority=1000)]
    restarted = _agent(tmp_path, two_socket, pods2)
    res = restarted.reconcile_once()
    assert res.restored.source == "checkpoint"
    assert res.allocation.pod("default/db").cpus == first.allocation.pod("default/db").cpus
    assert not any(c.path.endswith("cpuset.cpus") and pods[0].uid in c.path for c in res.report.changes)


def test_corrupt_checkpoint_rebuilt_from_cgroups_on_restart(tmp_path, two_socket):
    pods = [make_pod("db", DED, cpu="4")]
    first = _agent(tmp_path, two_socket, pods).reconcile_once()
    (tmp_path / "ck.json").write_bytes(b"\x00garbage")
    pods2 = pods + [make_pod("vip", DED, cpu="4", priority=1000)]
    res = _agent(tmp_path, two_socket, pods2).reconcile_once()
    assert res.restored.source == "cgroups"
    assert res.allocation.pod("default/db").cpus == first.allocation.pod("default/db").cpus
    assert json.loads((tmp_path / "ck.json").read_text())["payload"]["node"] == "n1"  # rewritten, valid


def test_pod_source_failure_freezes_the_node(tmp_path, two_socket):
    pods = [make_pod("web", cpu="1")]
    agent = _agent(tmp_path, two_socket, pods)

    def broken():
        raise TidewiseError("kubelet https://127.0.0.1:10250/pods: connection refused")

    agent.list_pods = broken
    res = agent.reconcile_once()
    assert res.error and "connection refused" in res.error and res.report is None
    assert not (tmp_path / "ck.json").exists()


def test_run_backs_off_after_failures(tmp_path, two_socket):
    agent = _agent(tmp_path, two_socket, [make_pod("web", cpu="1")], interval_seconds=5)
    calls = iter([True, False, False, True])

    def flaky():
        if next(calls):
            return [make_pod("web", cpu="1")]
        raise TidewiseError("down")

    agent.list_pods = flaky
    sleeps = []
    agent.run(iterations=4, sleep=sleeps.append)
    assert sleeps == [5, 10, 20]


def test_dry_run_agent_writes_nothing(tmp_path, two_socket):
    pods = [make_pod("batch", "reclaimed_cores")]
    agent = _agent(tmp_path, two_socket, pods, writer=DryRunFiles())
    res = agent.reconcile_once()
    assert res.report.changes and "checkpoint" not in res.timings
    assert not (tmp_path / "ck.json").exists()
    assert (tmp_path / "cg" / f"kubepods/besteffort/pod{pods[0].uid}/cpu.max").read_text().strip() == "max 100000"


def test_reclaim_loader_refuses_expired_and_bad_plans_and_reclaims_nothing(tmp_path, caplog):
    path = tmp_path / "plan.json"
    plan = ReclaimPlan("n1", "2026-11-30T08:00:00Z", 3600, 4000, 2**30, 1000)
    path.write_text(json.dumps(plan_document(plan)))
    at = lambda h: (lambda: dt.datetime(2026, 11, 30, h, 30, tzinfo=dt.timezone.utc))  # noqa: E731
    assert reclaim_loader(str(path), "n1", now=at(8))().reclaimed_millicpu == 4000
    # fail closed: a refused plan is a zero plan (the pool keeps its floor), not "no plan" (pool = all free)
    zero = (0, 0, {})
    got = reclaim_loader(str(path), "n1", now=at(9))()
    assert (got.reclaimed_millicpu, got.reclaimed_memory_bytes, dict(got.numa)) == zero
    assert "window" in caplog.text
    got = reclaim_loader(str(path), "other", now=at(8))()  # for another node
    assert (got.reclaimed_millicpu, got.reclaimed_memory_bytes, dict(got.numa)) == zero
    path.write_text("{")
    got = reclaim_loader(str(path), "n1", now=at(8))()
    assert (got.reclaimed_millicpu, got.reclaimed_memory_bytes, dict(got.numa)) == zero
    assert reclaim_loader(None, "n1")() is None


def test_agent_reads_pressure_from_the_configured_psi_file(tmp_path, two_socket):
    pods = [make_pod("batch", "reclaimed_cores")]
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal: 1048576 kB\nMemAvailable: 524288 kB\n")
    (tmp_path / "psi").write_text("some avg10=80.00 avg60=1.00 avg300=0.00 total=9\n")
    cg = str(tmp_path / "cg")
    v2_tree(cg, pods)
    s = EnforcerSettings(node="n1", checkpoint=str(tmp_path / "ck.json"), proc_root=str(tmp_path / "proc"),
                         psi_path=str(tmp_path / "psi"))
    agent = Agent(s, two_socket, lambda: pods, V2Driver(cg), HostFiles(), evictor=Evictor(EvictionSettings()))
    res = agent.reconcile_once()
    assert res.pressure.psi_some_avg10 == 80.0
    assert [e.pod for e in res.evictions] == ["default/batch"] and "PSI some avg10 80.0%" in res.evictions[0].reason


def test_refusal_logged_once_while_it_lasts(tmp_path, two_socket, caplog):
    import logging

    pods = [make_pod("huge", DED, cpu="64"), make_pod("web", cpu="1")]
    agent = _agent(tmp_path, two_socket, pods)
    with caplog.at_level(logging.WARNING, logger="node_enforcer"):
        for _ in range(3):
            assert [r.key for r in agent.reconcile_once().allocation.refused] == ["default/huge"]
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert lines == ["dedicated_cores refused for default/huge (runs in the share pool): needs 32 free core(s); 15 free"]
