"""The pure tide decisions (autoscaler/logic/tide.py) and the pool's Node patches
(autoscaler/model/tide_pool.py): nodes per step, reserves, a stable split, hysteresis between the
lead window and lead + min_dwell, dwell, the rate limit, the cheapest nodes first, and patches that
keep every taint that is not the pool's."""
from __future__ import annotations

import numpy as np
import pytest

from autoscaler.logic.tide import (LEND, RETURN, TideNode, nodes_needed, online_targets, plan_pool, reserve_count,
                                   split_pool)
from autoscaler.model.tide_pool import PoolSplit, TidePool, node_patch
from autoscaler.settings import TideSettings
from contracts.errors import InputError
from tests.autoscaler.test_tide_serve import EVICT_OFF, EVICT_ON, GPU, OFF, ON, POOL, TIDE, node


def test_nodes_needed_takes_the_tightest_resource_with_headroom():
    demand = np.array([[3000, 1.0], [4000, 1.0], [1000, 30.0]])  # millicpu, GiB
    got = nodes_needed(demand, [4000, 16.0], 0.25)
    assert got.tolist() == [1, 2, 3]  # 3750 -> 1; 5000 -> 2; memory 37.5 GiB -> 3
    assert nodes_needed(np.array([8000.0]), 4000, 0.0).tolist() == [2]  # exactly two nodes, not three
    with pytest.raises(ValueError, match="non-finite"):
        nodes_needed(np.array([1.0, np.nan]), 4000, 0.1)
    with pytest.raises(ValueError, match="positive"):
        nodes_needed(np.array([1.0]), 0, 0.1)


@pytest.mark.parametrize("value,total,want", [(2, 10, 2), ("2", 10, 2), ("25%", 10, 3), ("0%", 10, 0),
                                              (None, 10, 0), (20, 10, 10)])
def test_reserve_counts_and_percentages_round_up(value, total, want):
    assert reserve_count(value, total) == want


@pytest.mark.parametrize("value", ["x%", "-1", -1, True, 1.5])
def test_a_bad_reserve_is_refused(value):
    with pytest.raises(ValueError):
        reserve_count(value, 10)


def test_the_split_keeps_what_the_status_reserved():
    names = ["a", "b", "c", "d", "e"]
    assert split_pool(names, 1, "20%") == PoolSplit(["a"], ["b"], ["c", "d", "e"])
    prev = PoolSplit(["d"], ["e"], ["a", "b", "c"])
    assert split_pool(names, 1, 1, prev) == prev
    # d left the pool: one node takes its place, the others stay where they were
    assert split_pool(["a", "b", "c", "e"], 1, 1, prev) == PoolSplit(["a"], ["e"], ["b", "c"])


def tide_nodes(online, lent, pods=None, moved=None):
    pods, moved = pods or {}, moved or {}
    return [TideNode(n, False, online_pods=pods.get(n, 0), moved_at=moved.get(n)) for n in online] + \
        [TideNode(n, True, batch_pods=pods.get(n, 0), moved_at=moved.get(n)) for n in lent]


def plan(nodes, needed, max_moves=5, now=10_000.0, lead=2, dwell=3):
    return plan_pool(nodes, np.array(needed), lead_steps=lead, dwell_steps=dwell, max_moves=max_moves, now=now,
                     min_dwell_seconds=3600)


def test_lending_waits_until_the_forecast_leaves_nodes_idle_for_lead_and_dwell():
    nodes = tide_nodes(["a", "b", "c"], [])
    assert plan(nodes, [1, 1, 1, 1, 1, 3]).moves == []  # needed again within lead + dwell (step 5)
    p = plan(nodes, [1, 1, 1, 1, 1, 1, 3])
    assert [(m.node, m.action) for m in p.moves] == [("a", LEND), ("b", LEND)]


def test_between_the_two_windows_nothing_moves():
    # 1 online, 2 lent; needed 1 within the lead, 3 later: neither short nor spare
    p = plan(tide_nodes(["a"], ["b", "c"]), [1, 1, 1, 3, 3, 3])
    assert p.moves == [] and (p.must_online, p.keep_online) == (1, 3)


def test_hand_back_is_lead_early_fewest_batch_pods_first_and_ignores_dwell():
    nodes = tide_nodes(["a"], ["b", "c", "d"], pods={"b": 4, "c": 0, "d": 1}, moved={"b": 9_990.0, "c": 9_990.0})
    p = plan(nodes, [1, 1, 3, 3, 3, 3])  # step 2 is the end of the lead window
    assert [(m.node, m.action) for m in p.moves] == [("c", RETURN), ("d", RETURN)]
    assert plan(nodes, [1, 1, 1, 3, 3, 3]).moves == []  # the ramp is after the lead: not yet


def test_lending_picks_fewest_pods_and_respects_dwell_blocks_and_the_rate_limit():
    nodes = tide_nodes(["a", "b", "c", "d"], [], pods={"a": 3, "b": 1, "c": 0, "d": 2}, moved={"c": 9_000.0})
    nodes[3] = TideNode("d", False, online_pods=2, blocked="online pod shop/x: opted out")
    p = plan(nodes, [0] * 6, max_moves=1)
    assert [(m.node, m.action) for m in p.moves] == [("b", LEND)]
    assert "under min_dwell" in p.held["c"] and "opted out" in p.held["d"] and "rate limit" in p.held["a"]


def test_a_forecast_shorter_than_lead_and_dwell_is_no_decision():
    with pytest.raises(ValueError, match="does not cover"):
        online_targets(np.array([1, 1, 1]), 2, 3)


def test_settings_check_names_the_bad_one():
    TideSettings().check()
    with pytest.raises(InputError, match="serve.tide.lead"):
        TideSettings(lead="soon").check()
    with pytest.raises(ValueError, match="quantile"):
        TideSettings(quantile=1.5).check()


def test_the_node_patch_swaps_only_the_pools_taints_and_carries_the_resource_version():
    pool = TidePool.from_object(POOL)
    n = node("n1", labels={ON: "true"}, taints=[GPU, EVICT_OFF])
    n["metadata"]["resourceVersion"] = "42"
    patch = node_patch(n, pool, "tide", True, {"tidewise.io/tide-moved-at": "T"})
    assert patch["metadata"]["labels"] == {ON: None, OFF: "true", TIDE: "true"}
    assert patch["spec"]["taints"] == [GPU, EVICT_ON]
    assert patch["metadata"]["resourceVersion"] == "42"
    done = node("n1", labels={OFF: "true", TIDE: "true"}, taints=[GPU, EVICT_ON])
    assert node_patch(done, pool, "tide", True) is None  # already there: nothing to write


def test_shared_label_key_and_a_missing_effect():
    obj = {"metadata": {"name": "p"}, "spec": {"nodeConfigs": {
        "nodeSelector": {"pool": "a"}, "onlineLabel": {"key": "mode", "value": "online"},
        "offlineLabel": {"key": "mode", "value": "offline"}},
        "evictStrategy": {"type": "Watermark", "watermark": {"evictOnlinePodTaint": {"key": "k", "value": "v"}}}}}
    pool = TidePool.from_object(obj)
    assert pool.desired_labels("tide", lent=True) == {"mode": "offline"}
    assert pool.desired_labels("online") == {"mode": "online"}
    assert pool.online_taint == {"key": "k", "value": "v", "effect": "NoSchedule"}


@pytest.mark.parametrize("spec,match", [({}, "nodeConfigs"), ({"nodeConfigs": {}}, "nodeSelector"),
                                        ({"nodeConfigs": {"nodeSelector": {"a": "b"}}}, "offlineLabel")])
def test_a_pool_that_cannot_be_served_is_refused_by_name(spec, match):
    with pytest.raises(ValueError, match=match):
        TidePool.from_object({"metadata": {"name": "p"}, "spec": spec})


def test_a_one_node_shortfall_is_waited_out_while_the_need_measured_now_is_clear():
    nodes = tide_nodes(["a", "b", "c"], ["d", "e"])
    short_by_one = [2, 3, 4, 4, 4, 4]  # must 4, online 3
    p = plan_pool(nodes, np.array(short_by_one), lead_steps=2, dwell_steps=3, max_moves=5, now=10_000.0,
                  min_dwell_seconds=3600, return_slack=1, needed_now=1)
    assert p.moves == [] and "waiting" in p.summary
    # the measured need comes within the slack of the online side: hand back
    p = plan_pool(nodes, np.array(short_by_one), lead_steps=2, dwell_steps=3, max_moves=5, now=10_000.0,
                  min_dwell_seconds=3600, return_slack=1, needed_now=2)
    assert [(m.node, m.action) for m in p.moves] == [("d", RETURN)]
    # short by more than the slack, or the need now unknown: hand back at once
    for needed, now_need in (([2, 3, 5, 5, 5, 5], 1), (short_by_one, None)):
        p = plan_pool(nodes, np.array(needed), lead_steps=2, dwell_steps=3, max_moves=5, now=10_000.0,
                      min_dwell_seconds=3600, return_slack=1, needed_now=now_need)
        assert {m.action for m in p.moves} == {RETURN}
    assert plan(nodes, short_by_one).moves[0].action == RETURN  # no slack: the old rule
    with pytest.raises(ValueError, match="return_slack"):
        plan_pool(nodes, np.array(short_by_one), lead_steps=2, dwell_steps=3, max_moves=5, now=0.0,
                  min_dwell_seconds=1, return_slack=-1)


def test_no_node_is_lent_while_one_handed_back_within_the_hold_serves_online():
    # b came back 10 minutes ago; a and c have been online for hours and are spare
    nodes = tide_nodes(["a", "b", "c"], [], moved={"b": 10_000.0 - 600})
    p = plan_pool(nodes, np.array([0] * 6), lead_steps=2, dwell_steps=3, max_moves=5, now=10_000.0,
                  min_dwell_seconds=7200, hold_after_return=3600)
    assert p.moves == [] and "holding" in p.summary
    p = plan_pool(nodes, np.array([0] * 6), lead_steps=2, dwell_steps=3, max_moves=5, now=10_000.0,
                  min_dwell_seconds=7200, hold_after_return=300)
    assert [m.node for m in p.moves] == ["a", "c"]  # past the hold: the others lent, b still inside its dwell
    assert TideSettings().hold_after_return == "1h"
    with pytest.raises(InputError, match="serve.tide.hold_after_return"):
        TideSettings(hold_after_return="later").check()
