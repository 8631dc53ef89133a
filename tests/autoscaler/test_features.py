"""Serving features as objects (issue 23): one explicit tuple of seven, the loop's steps, serve's extra
kinds and the report built from it, the IHPA deciding through the HPA decider it is handed, a loop
built with one feature, and the one change policy holding every feature's changes."""
from __future__ import annotations

import json


from autoscaler.features import ACT, DECIDE, extra_kinds, features
from autoscaler.model.cluster import OPTIONAL_KINDS
from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.loop import KILLED, OK, ServingLoop
from tests.autoscaler.conftest import StaticCluster, fast_settings, source_of
from tests.autoscaler.test_rebalance_cli import hot_cluster

SEVEN = ("vpa", "hpa", "ihpa", "reclaim", "spd", "tide", "rebalance")


def test_the_tuple_holds_the_seven_features_in_step_order():
    feats = features(fast_settings())
    assert tuple(f.name for f in feats) == SEVEN
    assert [f.phase for f in feats] == [DECIDE] * 5 + [ACT] * 2  # tide, then rebalance: steps of their own
    assert len({f.write_rank for f in feats}) == len({f.report_rank for f in feats}) == 7


def test_serve_reads_the_optional_kinds_of_the_enabled_features_only():
    s = fast_settings()
    assert extra_kinds(features(s)) == ("IntelligentHorizontalPodAutoscaler", "ServiceProfileDescriptor")
    s.spd.enabled = s.ihpa.enabled = False
    assert extra_kinds(features(s)) == ()
    s.tide.enabled = s.rebalance.enabled = True
    kinds = extra_kinds(features(s))
    assert sorted(kinds) == ["PodDisruptionBudget", "TideNodePool"] and set(kinds) <= set(OPTIONAL_KINDS)


def test_the_ihpa_feature_decides_through_the_hpa_decider_it_is_handed():
    vpa, hpa, ihpa, *_ = features(fast_settings())
    assert ihpa.decide is hpa.decider  # one decider, one set of stabilisers; no copy of the HPA decision


def test_the_loop_runs_each_enabled_act_feature_as_a_step_before_write(objects, history):
    s = fast_settings()
    s.rebalance.enabled = True
    rep = ServingLoop(s, source_of(history), StaticCluster(hot_cluster(objects)), DryRunSink()).run_once()
    names = [st.name for st in rep.steps]
    assert rep.outcome == OK and names.index("guardrails") < names.index("rebalance") < names.index("write")
    assert "tide" not in names and rep.vpa and "rebalance" in rep.sections


def test_a_loop_built_with_one_feature_decides_nothing_else(objects, history):
    s = fast_settings()
    s.rebalance.enabled = True
    loop = ServingLoop(s, source_of(history), StaticCluster(hot_cluster(objects)), DryRunSink(), only=("rebalance",))
    rep = loop.run_once()
    assert [f.name for f in loop.features] == ["rebalance"]
    assert rep.outcome == OK and not rep.vpa and not rep.hpa and not rep.reclaim and not rep.changes
    assert list(rep.sections) == ["rebalance"] and list(rep.sections["rebalance"].plan.hot) == ["node-0"]


def test_the_one_feature_loop_plans_what_the_full_loop_plans(objects, history):
    """Its forecast is the full loop's (horizon, quantiles, series): with a model chosen by backtest,
    a shorter horizon or fewer quantiles would give other numbers (the CPU peak 0.92 instead of 1.01)."""
    plans = []
    for only in (None, ("rebalance",)):
        s = fast_settings()
        s.rebalance.enabled, s.loop.forecast_model = True, "auto"
        loop = ServingLoop(s, source_of(history), StaticCluster(hot_cluster(objects)), DryRunSink(), only=only)
        plans.append(json.dumps(loop.run_once().sections["rebalance"].as_dict(), sort_keys=True, default=str))
    assert plans[0] == plans[1] and "node-0" in json.loads(plans[0])["hot"]


def test_an_act_feature_asks_the_change_policy_which_node_it_may_move_pods_off(objects, history):
    objs = hot_cluster(objects)
    node = next(o for o in objs if o["kind"] == "Node" and o["metadata"]["name"] == "node-0")
    s = fast_settings()
    s.rebalance.enabled = True
    node["metadata"].setdefault("annotations", {})[s.select.annotation] = "false"  # opted out
    rep = ServingLoop(s, source_of(history), StaticCluster(objs), DryRunSink()).run_once()
    assert rep.sections["rebalance"].plan.hot and not rep.sections["rebalance"].plan.moves
    skipped = [why for key, why in rep.skipped.items() if key.startswith("Eviction/")]
    assert skipped and all(why.startswith("node node-0 not selected (annotation") for why in skipped)


def test_the_kill_switch_holds_the_changes_of_every_feature(objects, history, tmp_path):
    switch = tmp_path / "switch"
    switch.write_text("stop\n")
    s = fast_settings()
    s.guardrails.kill_switch_file = str(switch)
    sink = DryRunSink()
    rep = ServingLoop(s, source_of(history), StaticCluster(hot_cluster(objects)), sink).run_once()
    assert rep.outcome == KILLED and rep.changes and not rep.results and not sink.changes
    kinds = {key.split("/", 1)[0] for key, why in rep.held.items() if why == "kill switch"}
    assert {"VerticalPodAutoscaler", "Node"} <= kinds
