import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.reclaim import plan_document, plan_from_dict
from contracts.reclaim import NumaReclaim, ReclaimPlan
from node_enforcer.collect.pods import read_pods_file
from node_enforcer.collect.reclaim import load_reclaim_plan
from node_enforcer.collect.topology import read_topology
from node_enforcer.model.topology import parse_cpulist as cl
from node_enforcer.policy.allocation import PolicySettings
from node_enforcer.policy.plan import plan
from tests.node_enforcer.conftest import FOUR_NUMA, MIXED_PODS, RECLAIM_PLAN, make_pod

DED = "dedicated_cores"


def rp(millicpu=64000, mem=8 * 2**30, demand=None, numa=None):
    return ReclaimPlan(node="n1", window_start="2026-11-30T08:00:00Z", window_seconds=3600,
                       reclaimed_millicpu=millicpu, reclaimed_memory_bytes=mem, shared_demand_millicpu=demand,
                       numa=numa or {})


def whole_cores(topo, cpus):
    return all(set(topo.core_of(c).cpus) <= set(cpus) for c in cpus)


def test_mixed_fixture_plan(two_socket):
    pods = read_pods_file(MIXED_PODS, "fixture-node")
    a = plan(two_socket, pods, load_reclaim_plan(RECLAIM_PLAN, "fixture-node"))
    assert a.pools["reserve"] == cl("0,16")
    assert a.pod("shop/redis-0").cpus == cl("1-2,17-18") and a.pod("shop/redis-0").mems == {0}
    assert a.pod("shop/search-0").cpus == two_socket.numa_cpus[1] and a.pod("shop/search-0").mems == {1}
    assert a.pod("kube-system/node-agent").cpus == a.pools["reserve"]
    # refused: 12 cpus = 6 cores on one node, node0 has 5 free; it runs in the share pool, NUMA-bound
    assert [(r.key, r.reason) for r in a.refused] == [
        ("ml/ml-train-0", "numa_binding needs 6 free core(s) on one NUMA node; the most is 5 on node0")]
    assert "0a000000-0000-4000-8000-000000000008" not in a.dedicated
    assert a.pod("ml/ml-train-0").pool == "share"
    # the shared demand (15.5 cpus with the refused pod) exceeds what is left: reclaim held at its floor
    assert a.pools["reclaim"] == cl("7,23") and a.pools["share"] == cl("3-6,19-22")
    assert a.pod("shop/cart-5c6b").pool == "share" and a.problems[0][0] == "shop/cart-5c6b"
    spark = a.pod("batch/spark-exec-2")
    assert spark.cpus == a.pools["reclaim"] and spark.cpu_quota_millis == 2000 and spark.cpu_idle
    assert spark.memory_max_bytes == 16 * 2**30 and spark.memory_high_bytes == int(16 * 2**30 * 0.9)
    assert spark.oom_score_adj == 100 and a.pod("batch/spark-exec-1").oom_score_adj is None
    assert any("floor" in n for n in a.notes)


def test_dedicated_gets_whole_physical_cores(two_socket):
    pods = [make_pod("d1", DED, cpu="3"), make_pod("d2", DED, cpu="1"), make_pod("d3", DED, cpu="2500m")]
    a = plan(two_socket, pods)
    sizes = {p.key: len(p.cpus) for p in a.pods}
    assert sizes == {"default/d1": 4, "default/d2": 2, "default/d3": 4}
    assert a.pod("default/d3").notes == ("CPU request 2500m rounded up to 4 cpus (2 whole core(s))",)
    assert a.pod("default/d2").notes == ("CPU request 1000m rounded up to 2 cpus (1 whole core(s))",)
    for p in a.pods:
        assert whole_cores(two_socket, p.cpus)
    all_ded = [c for p in a.pods for c in p.cpus]
    assert len(all_ded) == len(set(all_ded))  # exclusive
    assert not set(all_ded) & (a.pools["reserve"] | a.pools["share"] | a.pools["reclaim"])


def test_numa_binding_and_exclusive(four_numa):
    pods = [make_pod("bind", DED, cpu="8", mem_enh={"numa_binding": "true"}, priority=10),
            make_pod("excl", DED, cpu="20", mem_enh={"numa_binding": True, "numa_exclusive": True}, priority=5)]
    a = plan(four_numa, pods)
    bind, excl = a.pod("default/bind"), a.pod("default/excl")
    assert len({four_numa.numa_of(c) for c in bind.cpus}) == 1 and len(bind.cpus) == 8
    assert bind.mems == {four_numa.numa_of(next(iter(bind.cpus)))}
    node = four_numa.numa_of(next(iter(excl.cpus)))
    assert excl.cpus == four_numa.numa_cpus[node] and excl.mems == {node}
    assert node != 0 and not bind.cpus & excl.cpus  # node0 holds the reserve: not entirely free


@pytest.mark.parametrize("pod,reason", [
    (dict(cpu=None), "needs a CPU request"),
    (dict(cpu="40", mem_enh={"numa_binding": True}), "numa_binding needs 20 free core(s) on one NUMA node"),
    (dict(cpu="30"), "would leave fewer than min_share_cpus"),
    (dict(cpu="60"), "needs 30 free core(s); 15 free"),
])
def test_refusals_have_reasons_and_no_partial_allocation(two_socket, pod, reason):
    base = [make_pod("web", cpu="1")]
    before = plan(two_socket, base)
    a = plan(two_socket, base + [make_pod("big", DED, **pod)])
    assert len(a.refused) == 1 and reason in a.refused[0].reason and a.refused[0].key == "default/big"
    assert a.dedicated == {} and a.pod("default/big").pool == "share"
    assert a.pools["reserve"] == before.pools["reserve"]


def test_exclusive_refused_when_no_node_is_entirely_free(two_socket):
    pods = [make_pod("small", DED, cpu="2", priority=9, cpu_enh={"numa_binding": True}),
            make_pod("x", DED, cpu="4", mem_enh={"numa_binding": True, "numa_exclusive": True})]
    a = plan(two_socket, pods, settings=PolicySettings(reserved_cpus=0))
    # best fit puts `small` on node0; node1 stays free for the exclusive pod
    assert a.pod("default/x").cpus == two_socket.numa_cpus[1]
    pods.append(make_pod("y", DED, cpu="4", mem_enh={"numa_binding": True, "numa_exclusive": True}))
    a = plan(two_socket, pods, settings=PolicySettings(reserved_cpus=0))
    assert [r.key for r in a.refused] == ["default/y"] and "no entirely free NUMA node" in a.refused[0].reason


def test_deterministic_and_order_independent(four_numa):
    pods = [make_pod(f"p{i}", [DED, "shared_cores", "reclaimed_cores", None][i % 4], cpu=str(1 + i % 3),
                     priority=i % 5) for i in range(40)]
    a = plan(four_numa, pods, rp(demand=20000))
    shuffled = pods[:]
    random.Random(7).shuffle(shuffled)
    b = plan(four_numa, shuffled, rp(demand=20000))
    assert a == b
    # re-running with the previous allocation moves nothing
    assert plan(four_numa, pods, rp(demand=20000), previous=a.dedicated) == a


def test_running_dedicated_pod_is_never_moved_by_a_newcomer(two_socket):
    old = make_pod("old", DED, cpu="4", priority=0, mem_enh={"numa_binding": True})
    a = plan(two_socket, [old])
    newcomer = make_pod("vip", DED, cpu="4", priority=1000, mem_enh={"numa_binding": True})
    without_memory = plan(two_socket, [old, newcomer])
    assert without_memory.pod("default/old").cpus != a.pod("default/old").cpus  # priority would reshuffle...
    b = plan(two_socket, [old, newcomer], previous=a.dedicated)
    assert b.pod("default/old").cpus == a.pod("default/old").cpus  # ...but a running pod keeps its cores
    assert not b.pod("default/vip").cpus & b.pod("default/old").cpus


def test_previous_allocation_that_no_longer_fits_is_recomputed(two_socket):
    pod = make_pod("d", DED, cpu="4")
    bogus = {pod.uid: cl("0,16")}  # the reserve's core, and too small for 4 cpus
    a = plan(two_socket, [pod], previous=bogus)
    assert len(a.pod("default/d").cpus) == 4 and not a.pod("default/d").cpus & a.pools["reserve"]


def test_reclaim_shrinks_first_as_shared_demand_grows(four_numa):
    pods = [make_pod("d", DED, cpu="16", cpu_enh={"numa_binding": True}), make_pod("web", cpu="4"),
            make_pod("batch", "reclaimed_cores")]
    previous = None
    sizes = []
    for demand in range(0, 140_000, 10_000):
        a = plan(four_numa, pods, rp(demand=demand), previous=previous)
        if previous is not None:
            assert a.pod("default/d").cpus == prev_alloc.pod("default/d").cpus  # noqa: F821
            assert a.pools["reclaim"] <= prev_alloc.pools["reclaim"]  # noqa: F821 — shrinks at its edge only
        assert len(a.pools["reclaim"]) >= 2  # the floor
        sizes.append(len(a.pools["reclaim"]))
        previous, prev_alloc = a.dedicated, a
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1] == 2


def test_reclaim_is_capped_by_the_plan_and_follows_its_numa_split(four_numa):
    pods = [make_pod("web", cpu="2")]
    a = plan(four_numa, pods, rp(millicpu=8000))
    assert len(a.pools["reclaim"]) == 8 and whole_cores(four_numa, a.pools["reclaim"])
    numa = {0: NumaReclaim(0, 0), 1: NumaReclaim(0, 0), 2: NumaReclaim(6000, 0), 3: NumaReclaim(2000, 0)}
    b = plan(four_numa, pods, rp(millicpu=8000, numa=numa))
    per_node = {n: len(b.pools["reclaim"] & four_numa.numa_cpus[n]) for n in range(4)}
    assert per_node == {0: 0, 1: 0, 2: 6, 3: 2}
    # without a plan the reclaim pool is spread over the nodes
    c = plan(four_numa, pods, settings=PolicySettings(share_headroom=0))
    assert all(len(c.pools["reclaim"] & four_numa.numa_cpus[n]) >= 28 for n in range(4))


def test_reclaim_input_file_matches_reclaim_plan(four_numa, tmp_path):
    plan_obj = rp(millicpu=12000, demand=30000, numa={1: NumaReclaim(8000, 2**30), 3: NumaReclaim(4000, 2**30)})
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_document(plan_obj)))
    pods = [make_pod("web", cpu="2"), make_pod("b", "reclaimed_cores", limit_memory="64Gi")]
    assert load_reclaim_plan(str(path)) == plan_obj  # the file holds the annotation's JSON: one schema
    assert plan(four_numa, pods, plan_obj) == plan(four_numa, pods, load_reclaim_plan(str(path)))


@pytest.mark.parametrize("bad", [{}, {"node": "n"}, {**rp().to_dict(), "reclaimed_millicpu": "lots"},
                                 {**rp().to_dict(), "window_start": "yesterday"},
                                 {**rp().to_dict(), "reclaimed_millicpu": -5}])
def test_bad_reclaim_plan_is_an_input_error(bad):
    from predictor.errors import InputError

    with pytest.raises(InputError, match="reclaim plan"):
        plan_from_dict(bad)


def test_reclaimed_limits(two_socket):
    pods = [make_pod("lim", "reclaimed_cores", limit_cpu="1", limit_memory="1Gi"), make_pod("free", "reclaimed_cores")]
    a = plan(two_socket, pods, rp(mem=4 * 2**30))
    assert a.pod("default/lim").cpu_quota_millis == 1000 and a.pod("default/lim").memory_max_bytes == 2**30
    free = a.pod("default/free")
    # the two span QoS classes (Guaranteed, BestEffort), so no root cap holds them: "free" gets what
    # "lim" leaves of the plan's 4 GiB, not the whole 4 GiB beside lim's 1 GiB
    assert free.cpu_quota_millis == len(a.pools["reclaim"]) * 1000 and free.memory_max_bytes == 3 * 2**30
    assert plan(two_socket, [make_pod("nolimit", "reclaimed_cores")]).pod("default/nolimit").memory_max_bytes is None


def test_oom_priority_maps_to_oom_score_adj(two_socket):
    pods = [make_pod("hi", mem_enh={"oom_priority": 1000}), make_pod("lo", mem_enh={"oom_priority": -300})]
    a = plan(two_socket, pods)
    assert a.pod("default/hi").oom_score_adj == -998 and a.pod("default/lo").oom_score_adj == 300


def test_shared_numa_binding_spreads_over_nodes(two_socket):
    pods = [make_pod(f"s{i}", cpu="1", mem_enh={"numa_binding": True}) for i in range(4)]
    a = plan(two_socket, pods, settings=PolicySettings(share_headroom=0, reclaim_floor_cpus=0), reclaim=rp(millicpu=0))
    nodes = [next(iter(a.pod(f"default/s{i}").mems)) for i in range(4)]
    assert sorted(nodes) == [0, 0, 1, 1]
    for i in range(4):
        p = a.pod(f"default/s{i}")
        assert p.cpus == a.pools["share"] & two_socket.numa_cpus[nodes[i]]


def test_tiny_machine_overlaps_reclaim_with_share():
    topo = read_topology("/sys")
    a = plan(topo, [make_pod("web", cpu="1"), make_pod("batch", "reclaimed_cores")],
             settings=PolicySettings(reserved_cpus=0, reclaim_floor_cpus=len(topo.cpus)))
    assert a.pools["share"] and a.pod("default/batch").cpus and a.pod("default/web").cpus


pod_strategy = st.tuples(
    st.sampled_from([DED, "shared_cores", "reclaimed_cores", "system_cores"]),
    st.integers(0, 20),  # cpus
    st.booleans(), st.booleans(), st.integers(-5, 5), st.sampled_from([None, None, "flink", "etl"]))


@settings(max_examples=60, deadline=None)
@given(specs=st.lists(pod_strategy, max_size=30), demand=st.integers(0, 150_000), cap=st.integers(0, 130_000))
def test_invariants_on_the_four_numa_machine(specs, demand, cap):
    topo = _four_numa()
    pods = []
    for i, (qos, cpus, bind, excl, prio, pool) in enumerate(specs):
        enh = {"numa_binding": bind or excl, "numa_exclusive": excl and qos == DED} if qos in (DED, "shared_cores") else None
        cpu_enh = {"cpuset_pool": pool} if pool and qos == "shared_cores" else None
        pods.append(make_pod(f"p{i}", qos, cpu=str(cpus) if cpus else None, priority=prio, mem_enh=enh, cpu_enh=cpu_enh))
    a = plan(topo, pods, rp(millicpu=cap, demand=demand))
    ded = [c for cpus in a.dedicated.values() for c in cpus]
    assert len(ded) == len(set(ded))
    named = [v for k, v in a.pools.items() if k.startswith("share-")]
    union = a.pools["reserve"] | a.pools["share"] | a.pools["reclaim"] | frozenset().union(*named)
    assert not set(ded) & union
    assert not a.pools["reserve"] & (a.pools["share"] | a.pools["reclaim"])
    for i, pool in enumerate(named):  # named pools are exclusive of every other pool
        others = a.pools["reserve"] | a.pools["share"] | a.pools["reclaim"] | frozenset().union(*named[:i], *named[i + 1:])
        assert pool and not pool & others and whole_cores(topo, pool)
    assert set(ded) | union == topo.cpus
    assert len(a.pools["reclaim"]) >= min(2, len(topo.cpus - a.pools["reserve"] - set(ded)))
    for p in a.pods:
        assert p.cpus, p  # every pod runs somewhere
        if p.pool == "dedicated":
            assert whole_cores(topo, p.cpus)
    assert {r.uid for r in a.refused}.isdisjoint(a.dedicated)
    assert all(r.reason for r in a.refused)
    again = plan(topo, pods, rp(millicpu=cap, demand=demand), previous=a.dedicated)
    # nothing moves; only a refusal's free-core counts may read differently (kept pods go first)
    assert (again.pools, again.dedicated, again.pods) == (a.pools, a.dedicated, a.pods)
    assert [r.uid for r in again.refused] == [r.uid for r in a.refused]


_CACHE: dict = {}


def _four_numa():
    return _CACHE.get("t") or _CACHE.setdefault("t", read_topology(FOUR_NUMA))


def test_cpuset_pool_gets_its_own_share_pool(two_socket):
    pods = [make_pod("web", cpu="2"), make_pod("f1", cpu="1500m", cpu_enh={"cpuset_pool": "flink"}),
            make_pod("f2", cpu="1", cpu_enh={"cpuset_pool": "flink"}), make_pod("b", "reclaimed_cores")]
    a = plan(two_socket, pods, rp(demand=10000))
    flink = a.pools["share-flink"]
    assert len(flink) == 4 and whole_cores(two_socket, flink)  # 2.5 cpus + 10% -> 3 threads -> 2 cores
    assert not flink & (a.pools["share"] | a.pools["reclaim"] | a.pools["reserve"])
    assert a.pod("default/f1").cpus == flink and a.pod("default/f1").pool == "share-flink"
    assert a.pod("default/web").cpus == a.pools["share"]
    # no room: the pool is not made, its pods stay in the share pool with a note
    tight = plan(two_socket, pods, rp(demand=10000), settings=PolicySettings(min_share_cpus=24))
    assert "share-flink" not in tight.pools and tight.pod("default/f1").pool == "share"
    assert any("cannot spare" in n for n in tight.notes) and "no room of its own" in tight.pod("default/f1").notes[0]


def test_a_plan_that_lends_no_memory_still_caps_batch_memory(two_socket):
    """Fail closed: a zero (refused, expired) plan caps batch memory at the floor, never 'no limit'."""
    pods = [make_pod("batch", "reclaimed_cores", cpu="1")]
    a = plan(two_socket, pods, rp(millicpu=0, mem=0))
    floor = PolicySettings().reclaimed_memory_floor_bytes
    assert a.pod("default/batch").memory_max_bytes == floor
    assert a.pod("default/batch").memory_high_bytes == int(floor * PolicySettings().reclaimed_memory_high_ratio)
    # a plan that lends memory caps at what it lends
    a = plan(two_socket, pods, rp(millicpu=0, mem=2 << 30))
    assert a.pod("default/batch").memory_max_bytes == 2 << 30
