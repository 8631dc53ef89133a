"""Reclaimed pods' memory as a whole never exceeds what the plan lends, whatever else runs on the node:
the pure policy over random mixes of pods, the agent when the reclaimed root's cap does not take,
and `tidewise enforce --once --dry-run --plan-out` on the two-socket fixture (policy.batch_memory)."""
import functools
import json
import logging
import os
import shutil

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.reclaim import ReclaimPlan
from node_enforcer.agent import Agent
from node_enforcer.collect.topology import read_topology
from node_enforcer.enforce.cgroups import V2Driver, pod_cgroup
from node_enforcer.enforce.files import HostFiles
from node_enforcer.policy.allocation import PolicySettings
from node_enforcer.policy.isolation import IsolationSettings, plan_isolation
from node_enforcer.policy.plan import plan
from node_enforcer.settings import EnforcerSettings
from tests.node_enforcer.conftest import RECLAIM_PLAN, TWO_SOCKET, make_pod, make_pod_obj
from tests.node_enforcer.test_cgroups import v2_tree
from tidewise.cli import main

MiB, GiB = 2**20, 2**30
FLOOR = PolicySettings().reclaimed_memory_floor_bytes
# the level of a pod that is not batch but may sit in the BestEffort cgroup beside it: none, typos,
# a zero-width space, other levels; `Reclaimed_Cores ` is batch (read stripped and in any case)
LEVELS = [None, "reclaimed", "reclaimed_cores\u200b", "reclaimed-cores", "\u200breclaimed_cores", "shared_cores",
          "gold", "", "Reclaimed_Cores ", "reclaimed_cores", "system_cores"]
_uid = iter(range(1, 10**6))


def _pod(level, k8s_qos, limit_mib):
    n = next(_uid)
    return make_pod(f"p{n}", level, limit_memory=f"{limit_mib}Mi" if limit_mib else None, k8s_qos=k8s_qos,
                    uid=f"00000000-0000-4000-9000-{n:012d}")


pod_st = st.builds(_pod, st.sampled_from(LEVELS), st.sampled_from(["BestEffort"] * 4 + ["Burstable", "Guaranteed"]),
                   st.one_of(st.none(), st.integers(1, 64 * 1024)))
mix_st = st.lists(pod_st, max_size=40)
lent_st = st.one_of(st.just(0), st.integers(0, 2**41), st.sampled_from([16 * GiB, 64 * MiB, 100 * MiB + 1]))


@functools.lru_cache(maxsize=1)
def _two_socket():
    return read_topology(TWO_SOCKET)


def batch_total_bound(alloc, iso, pods):
    """The most the reclaimed pods can use together with these caps written: the root's cap when
    their cgroup holds them alone and is capped, else the sum of their own caps (None: unbounded)."""
    batch = [a for a in alloc.pods if a.qos == "reclaimed_cores"]
    per_pod = None if any(a.memory_max_bytes is None for a in batch) else sum(a.memory_max_bytes for a in batch)
    root = iso.root
    if root is not None and root.memory_max_bytes is not None:
        batch_uids = {a.uid for a in batch}
        inside = {p.uid for p in pods if p.k8s_qos == root.k8s_qos}
        assert inside == batch_uids, "the reclaimed root's cap holds online pods too"
        return root.memory_max_bytes if per_pod is None else min(root.memory_max_bytes, per_pod)
    return per_pod


@settings(max_examples=300, deadline=None)
@given(mix_st, lent_st, st.sampled_from([True, False]))
def test_the_batch_total_never_exceeds_the_plan_for_any_mix_of_pods(pods, lent, root_on):
    two_socket = _two_socket()
    reclaim = ReclaimPlan("n1", "2026-12-01T00:00:00Z", 3600, 4000, lent, 0)
    alloc = plan(two_socket, pods, reclaim, **({} if root_on else {"root_memory": False}))
    iso = plan_isolation(alloc, pods, reclaim, [], None, IsolationSettings(root_memory=root_on))
    batch = [a for a in alloc.pods if a.qos == "reclaimed_cores"]
    if not batch:
        return
    bound = batch_total_bound(alloc, iso, pods)
    assert bound is not None and bound <= max(lent, FLOOR)
    by_uid = {p.uid: p for p in pods}
    for a in batch:  # never above the pod's own limit either
        limit = by_uid[a.uid].memory_limit_bytes
        assert limit is None or a.memory_max_bytes <= limit
    if iso.root is None or iso.root.memory_max_bytes is None:
        assert f"split among {len(batch)} reclaimed pod" in alloc.batch_memory.note
        assert alloc.batch_memory.note in alloc.notes


@settings(max_examples=100, deadline=None)
@given(st.lists(mix_st, min_size=2, max_size=5), lent_st)
def test_pods_added_and_removed_between_passes_keep_the_bound(passes, lent):
    two_socket = _two_socket()
    reclaim = ReclaimPlan("n1", "2026-12-01T00:00:00Z", 3600, 4000, lent, 0)
    kept: list = []
    for mix in passes:  # each pass keeps half of the pods before it and adds new ones
        pods = kept[::2] + mix
        alloc = plan(two_socket, pods, reclaim)
        iso = plan_isolation(alloc, pods, reclaim, [], None, IsolationSettings())
        if any(a.qos == "reclaimed_cores" for a in alloc.pods):
            assert batch_total_bound(alloc, iso, pods) <= max(lent, FLOOR)
        kept = pods


def test_fair_split_gives_what_a_small_limit_leaves_to_the_others_in_whole_pages():
    from node_enforcer.policy.batch_memory import PAGE, fair_split

    pods = [make_pod("a", "reclaimed_cores", limit_memory="1Gi"), make_pod("b", "reclaimed_cores"),
            make_pod("c", "reclaimed_cores")]
    caps = fair_split(16 * GiB + 123, pods)
    assert caps[pods[0].uid] == GiB and caps[pods[1].uid] == caps[pods[2].uid] == 15 * GiB // 2
    assert all(v % PAGE == 0 for v in caps.values())
    # many pods on a small plan: small caps, never more than was lent together
    many = [make_pod(f"m{i}", "reclaimed_cores") for i in range(300)]
    assert sum(fair_split(FLOOR, many).values()) <= FLOOR


def test_the_root_is_used_only_when_batch_holds_its_cgroup_alone(two_socket):
    reclaim = ReclaimPlan("n1", "2026-12-01T00:00:00Z", 3600, 4000, 16 * GiB, 0)
    web = make_pod("web", cpu="1", memory="1Gi", k8s_qos="Burstable")
    batch = [make_pod(f"b{i}", "reclaimed_cores", k8s_qos="BestEffort") for i in range(3)]
    for level in (None, "reclaimed", "reclaimed_cores\u200b"):
        intruder = make_pod("intruder", level, k8s_qos="BestEffort")
        shared = plan(two_socket, [web, *batch, intruder], reclaim)
        caps = [shared.pod(b.key).memory_max_bytes for b in batch]
        assert sum(caps) <= 16 * GiB and min(caps) >= 5 * GiB and shared.batch_memory.root_qos is None
        assert "split among 3 reclaimed pods: default/b0 5.3Gi" in shared.batch_memory.note
        assert "BestEffort cgroup also holds 1 online pod(s) (default/intruder)" in shared.batch_memory.note
    alone = plan(two_socket, [web, *batch], reclaim)
    assert [alone.pod(b.key).memory_max_bytes for b in batch] == [16 * GiB] * 3  # the root holds the total
    assert alone.batch_memory.root_qos == "BestEffort"


def test_a_root_cap_that_does_not_take_splits_the_plan_and_says_so(tmp_path, two_socket, caplog):
    """v2 without the memory controller on the QoS cgroup (here: no memory.max there at all)."""
    pods = [make_pod(f"b{i}", "reclaimed_cores", k8s_qos="BestEffort") for i in range(2)]
    cg = str(tmp_path / "cg")
    v2_tree(cg, pods)
    reclaim = ReclaimPlan("n1", "2026-12-01T00:00:00Z", 3600, 4000, GiB, 0)
    s = EnforcerSettings(node="n1", checkpoint=str(tmp_path / "ck.json"))
    agent = Agent(s, two_socket, lambda: pods, V2Driver(cg), HostFiles(), reclaim=lambda: reclaim)
    with caplog.at_level(logging.INFO, logger="node_enforcer"):
        res = agent.reconcile_once()
    assert not res.report.errors and f"{cg}/kubepods/besteffort/memory.max" in res.report.unsupported
    written = [int(open(os.path.join(cg, pod_cgroup("cgroupfs", p.k8s_qos, p.uid), "memory.max")).read())
               for p in pods]
    assert written == [GiB // 2, GiB // 2]
    assert "memory cap not in force" in caplog.text and "split among 2 reclaimed pods" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="node_enforcer"):
        agent.reconcile_once()
    assert "split among" not in caplog.text  # the note is logged when it changes, not every pass


def _repro_pods(path, extra_level):
    """One Burstable online pod, 3 batch pods and, unless None, one more BestEffort pod of `extra_level`."""
    objs = [make_pod_obj("web", cpu="1", memory="1Gi", limit_memory="2Gi", node="fixture-node", k8s_qos="Burstable")]
    objs += [make_pod_obj(f"batch-{i}", "reclaimed_cores", node="fixture-node", k8s_qos="BestEffort") for i in range(3)]
    if extra_level is not None:
        objs.append(make_pod_obj("intruder", extra_level or None, node="fixture-node", k8s_qos="BestEffort"))
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "PodList", "items": objs}))
    return objs


def test_enforce_dry_run_plan_out_splits_the_plan_when_an_online_pod_shares_besteffort(tmp_path, capsys):
    cg = tmp_path / "cgroup"
    shutil.copytree(os.path.join(TWO_SOCKET, "fs", "cgroup"), cg)
    for extra, split in (("", True), ("reclaimed", True), ("reclaimed_cores\u200b", True), (None, False)):
        pods = tmp_path / "pods.json"
        objs = _repro_pods(pods, extra)
        out = tmp_path / "plan.json"
        assert main(["enforce", "--once", "--dry-run", "--node", "fixture-node", "--pods-from", "file", "--pods",
                     str(pods), "--sysfs-root", TWO_SOCKET, "--cgroup-root", str(cg), "--reclaim-plan", RECLAIM_PLAN,
                     "--checkpoint", str(tmp_path / "ck.json"), "--no-eviction", "--plan-out", str(out)]) == 0
        printed = capsys.readouterr().out
        doc = json.loads(out.read_text())
        batch = {o["metadata"]["uid"] for o in objs if o["metadata"]["name"].startswith("batch-")}
        caps = [p["memory_max_bytes"] for p in doc["allocation"]["pods"] if p["uid"] in batch]
        assert len(caps) == 3
        if split:
            assert sum(caps) <= 16 * GiB
        memory = doc["allocation"]["batch_memory"]
        assert memory["lent_bytes"] == 16 * GiB
        if split:
            assert memory["root_qos"] is None and memory["split_sum_bytes"] == sum(caps)
            assert "split among 3 reclaimed pods: default/batch-0 5.3Gi" in printed
            assert [c["memory_max_bytes"] for c in memory["split"]] == caps
            assert doc["isolation"]["reclaimed_root"] == {"k8s_qos": "BestEffort", "memory_max_bytes": None,
                                                          "memory_high_bytes": None}
        else:  # the reclaimed root holds the three: the BestEffort cgroup capped at the plan
            assert memory["root_qos"] == "BestEffort" and doc["isolation"]["reclaimed_root"]["memory_max_bytes"] == \
                16 * GiB
            assert f"kubepods/besteffort/memory.max: max -> {16 * GiB}" in printed
