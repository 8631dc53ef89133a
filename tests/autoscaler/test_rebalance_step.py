"""The rebalance step inside the serving loop (in process): off unless enabled, the forecast
horizon covers the rebalance horizon, the kill switch stops every move, a failure in the step is
reported without freezing the run's other writes, and the Evictor's window spans runs."""
from __future__ import annotations

import json

import pandas as pd

from autoscaler.output.eviction import Evictor
from autoscaler.output.sinks import DRY_RUN, DryRunSink
from autoscaler.routines.loop import OK, ServingLoop
from tests.autoscaler.conftest import StaticCluster, fast_settings, source_of
from tests.autoscaler.test_rebalance_cli import hot_cluster


def loop_for(objects, history, **rebalance):
    s = fast_settings()
    s.rebalance.enabled = True
    for k, v in rebalance.items():
        setattr(s.rebalance, k, v)
    return s, ServingLoop(s, source_of(history), StaticCluster(hot_cluster(objects)), DryRunSink())


def test_off_by_default(objects, history):
    rep = ServingLoop(fast_settings(), source_of(history), StaticCluster(hot_cluster(objects)), DryRunSink()).run_once()
    assert "rebalance" not in rep.sections and "rebalance" not in [s.name for s in rep.steps]


def test_the_forecast_reaches_past_the_rebalance_horizon(objects, history):
    s, loop = loop_for(objects, history, horizon="30h")  # longer than any other decision's window
    assert loop._needed_steps() * loop.step >= pd.Timedelta("30h")
    s.rebalance.enabled = False
    assert loop._needed_steps() * loop.step < pd.Timedelta("30h")


def test_a_hot_node_gets_moves_with_reasons(objects, history):
    _, loop = loop_for(objects, history)
    rep = loop.run_once()
    assert rep.outcome == OK and list(rep.sections["rebalance"].plan.hot) == ["node-0"]
    doc = json.loads(json.dumps(rep.sections["rebalance"].as_dict()))
    assert doc["moves"] and all(m["result"] == "dry-run" and "node-0 hot" in m["reason"] for m in doc["moves"])
    assert doc["kept"]  # the pods that stay on node-0 say why
    assert rep.count(DRY_RUN) > 0  # the other decisions were made as usual


def test_the_kill_switch_moves_nothing(objects, history, tmp_path):
    s, loop = loop_for(objects, history)
    switch = tmp_path / "switch"
    switch.write_text("stop\n")
    s.guardrails.kill_switch_file = str(switch)
    sent = []
    loop.feature("rebalance").rebalancer.evictor = Evictor(type("K", (), {"evict_pod": lambda self, ns, n: sent.append(n)})(),
                                      dry_run=False)
    rep = loop.run_once()
    assert rep.sections["rebalance"].outcomes == [] and rep.sections["rebalance"].note.startswith("kill switch") and sent == []


def test_a_failing_plan_is_reported_and_the_other_writes_still_happen(objects, history, monkeypatch):
    _, loop = loop_for(objects, history)

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr("autoscaler.routines.rebalance.plan_rebalance", broken)
    rep = loop.run_once()
    assert rep.outcome == OK and rep.skipped["rebalance"] == "RuntimeError: boom"
    assert rep.count(DRY_RUN) > 0


def test_the_per_minute_limit_spans_runs(objects, history):
    _, loop = loop_for(objects, history, per_minute=3)
    loop.feature("rebalance").rebalancer.evictor = Evictor(None, per_minute=3, clock=lambda: 0.0)
    first = [o.result for o in loop.run_once().sections["rebalance"].outcomes]
    second = [o.result for o in loop.run_once().sections["rebalance"].outcomes]
    assert first[:3] == ["dry-run"] * 3 and set(first[3:]) <= {"rate-limited"}
    assert second and set(second) == {"rate-limited"}  # the same minute: the window is full


def test_a_spike_the_forecast_missed_makes_the_node_hot_now(objects, history):
    """The last observed usage floors the first step (serve.rebalance.with_current): a surge seen in
    the newest sample counts even though yesterday's shape says the node stays cool."""
    sid = "search/Deployment/ads/app/cpu"
    y = history.series[sid]
    y.iloc[-1] = y.iloc[-1] + 200.0  # +50 cores per pod on 4 replicas
    plain = [o for o in hot_cluster(objects) if o["metadata"]["name"] != "node-0"] + \
        [o for o in objects if o["metadata"]["name"] == "node-0"]  # node-0 at its full 31.5 cores
    for with_current, hot in ((False, []), (True, ["node-0", "node-1"])):
        s = fast_settings()
        s.rebalance.enabled, s.rebalance.with_current = True, with_current
        rep = ServingLoop(s, source_of(history), StaticCluster(plain), DryRunSink()).run_once()
        assert sorted(rep.sections["rebalance"].plan.hot) == hot
