"""Choice by cost (issue 12 item 2): the cost arithmetic, the budget, the once-a-day choice from
the past only, and the reason naming the winner and the costs it beat."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from autoscaler.logic.choice_by_cost import (DEFAULT, Candidate, Cost, CostLedger, candidate_cost, candidates, choose,
                                             choose_by_cost, serve_choice)
from autoscaler.settings import VpaSettings
from predictor.types import Forecast

S = VpaSettings(violation_weight=2.5, change_weight=0.01, violation_budget=0.1)
T0 = pd.Timestamp("2026-01-05", tz="UTC")


def cand(name: str, value: float) -> Candidate:
    return Candidate(name, value, "test", 0.9, 0.0, "1h")


def test_cost_weighs_slack_violations_and_changes():
    usage = np.array([1.0, 1.0, 2.0, 2.0])
    request = np.array([2.0, 2.0, 1.0, 1.0])  # slack 0.5, 0.5, 0, 0; two violations; one change
    c = candidate_cost("x", usage, request, days=2.0, settings=S)
    assert c is not None
    assert c.slack == pytest.approx(0.25) and c.violation == pytest.approx(0.5)
    assert c.changes_per_day == pytest.approx(0.5)
    assert c.cost == pytest.approx(0.25 + 2.5 * 0.5 + 0.01 * 0.5)
    assert candidate_cost("x", usage, np.full(4, np.nan), 2.0, S) is None


def test_the_cheapest_eligible_wins_and_the_reason_names_the_costs():
    costs = [Cost(DEFAULT, 0.55, 0.5, 0.02, 1.0), Cost("stock", 0.41, 0.3, 0.04, 0.0),
             Cost("q0.9+0%", 0.30, 0.1, 0.2, 3.0)]  # cheapest, but over the 0.1 violation budget
    ch = choose(costs, budget=0.1, window="2d")
    assert ch.name == "stock"
    assert ch.reason.startswith("stock chosen by cost 0.41")
    assert "forecast 0.55" in ch.reason and "q0.9+0% 0.30 (over the violation budget)" in ch.reason
    assert ch.reason.endswith("over the last 2d")
    # nobody within budget: the one violating least
    assert choose([Cost("a", 0.1, 0, 0.5, 0), Cost("b", 0.9, 0, 0.3, 0)], 0.1, "2d").name == "b"
    # a tie goes to the forecast
    assert choose([Cost("stock", 0.4, 0.4, 0, 0), Cost(DEFAULT, 0.4, 0.4, 0, 0)], 0.1, "2d").name == DEFAULT


def _usage(days: int, level: float = 1.0) -> pd.Series:
    idx = pd.date_range(T0 - pd.Timedelta(days=days), T0 + pd.Timedelta("1D"), freq="5min", inclusive="left")
    return pd.Series(level, index=idx)


def test_choice_is_made_once_a_day_from_the_past_and_warms_up_first():
    usage = _usage(3)
    ledger = CostLedger()
    # a lean forecast candidate (violated) and a roomy stock one, recorded hourly for the past 2 days
    first_day = [choose_by_cost(ledger, "s", [cand(DEFAULT, 0.8), cand("stock", 1.2)], usage, t, S)
                 for t in pd.date_range(T0 - pd.Timedelta("2D"), T0 - pd.Timedelta("1D"), freq="1h", inclusive="left")]
    assert first_day == [None] * 24  # less than cost_min_past (1d) recorded before that day's midnight
    for t in pd.date_range(T0 - pd.Timedelta("1D"), T0, freq="1h", inclusive="left"):
        choose_by_cost(ledger, "s", [cand(DEFAULT, 0.8), cand("stock", 1.2)], usage, t, S)
    ch = choose_by_cost(ledger, "s", [cand(DEFAULT, 0.8), cand("stock", 1.2)], usage, T0, S)
    assert ch is not None and ch.name == "stock"
    # later the same day the candidates change, and usage after midnight would favour the forecast:
    # today's choice stands (made on the past before midnight)
    later = usage.copy()
    later[later.index >= T0] = 0.5
    again = choose_by_cost(ledger, "s", [cand(DEFAULT, 0.6), cand("stock", 3.0)], later, T0 + pd.Timedelta("6h"), S)
    assert again == ch


def test_the_served_candidate_and_the_warm_up_reason():
    found = [cand(DEFAULT, 1.0), cand("stock", 2.0)]
    assert serve_choice(None, found)[0] is None and "warming up" in serve_choice(None, found)[1]
    ledger = CostLedger()
    usage = _usage(3, level=1.5)  # the forecast's 1.0 is always violated; stock's 2.0 never
    for t in pd.date_range(T0 - pd.Timedelta("2D"), T0, freq="1h"):
        ch = choose_by_cost(ledger, "s", found, usage, t, S)
    chosen, why = serve_choice(ch, found)
    assert chosen is not None and chosen.name == "stock" and chosen.value == 2.0 and "stock chosen" in why


def test_candidates_are_the_forecast_points_the_stock_rule_and_a_flat_percentile():
    idx = pd.date_range(T0, periods=12, freq="5min")
    fc = Forecast("s", idx, (0.5, 0.9, 0.95), np.column_stack([np.full(12, 1.0), np.full(12, 2.0), np.full(12, 3.0)]),
                  "m")
    past = pd.Series(np.arange(1.0, 2017.0) / 1000, index=pd.date_range(T0 - pd.Timedelta("7D"), T0, freq="5min",
                                                                           inclusive="left"))
    found = {c.name: c.value for c in candidates(fc, 12, past, T0, VpaSettings(quantile=0.9, margin=0.1, cost_forecast_points=((0.9, 0.0), (0.95, 0.2), (0.9, 0.1))), "m")}
    assert found[DEFAULT] == pytest.approx(2.2)
    assert found["q0.9+0%"] == pytest.approx(2.0) and found["q0.95+20%"] == pytest.approx(3.6)
    assert len(found) == 5  # (0.9, 0.1) is the settings' own point: not twice
    assert found["flat p95"] == pytest.approx(np.quantile(past.to_numpy(), 0.95))
    assert 1.0 < found["stock"] < 2.016 * 1.15


def test_serve_decides_with_the_chosen_candidate_and_says_so():
    from autoscaler.logic.decide_vpa import VpaInputs, decide_vpa
    from autoscaler.model.views import VpaView
    from predictor.history import History
    from tests.autoscaler.test_decide import SERIES, SID, STEP, WORKLOAD, vpa

    end = T0 + pd.Timedelta("3D")
    history = History({SID: pd.Series(1.5, index=pd.date_range(T0, end - STEP, freq=STEP))}, STEP)
    settings = VpaSettings(quantile=0.9, margin=0.0, window="1h", choose_by_cost=True)
    ledger = CostLedger()

    def decide(now: pd.Timestamp, s: VpaSettings = settings):
        fc = Forecast(SID, pd.date_range(now, periods=12, freq=STEP), (0.5, 0.9, 0.95, 0.99), np.full((12, 4), 1.0),
                      "m")  # a forecast of 1 core where 1.5 are used: always violated
        past = History({SID: history.series[SID][history.series[SID].index < now]}, STEP)
        inp = VpaInputs(VpaView(vpa()), WORKLOAD, 2, SERIES, {SID: fc}, past, now, STEP, ledger=ledger)
        return decide_vpa(inp, s).containers[0].resources["cpu"]

    warm = decide(T0 + pd.Timedelta("1D"))
    assert warm.target == 500 and "warming up" in warm.reason.steps[0]
    for now in pd.date_range(T0 + pd.Timedelta("1D"), end, freq="1h", inclusive="left"):
        decide(now)
    rec = decide(end)
    assert rec.target == 750  # the flat p95 of 1.5 cores over 2 replicas: no slack, no violation
    assert rec.reason.model == "flat percentile" and rec.reason.steps[0].startswith("flat p95 chosen by cost 0.00")
    assert "forecast 2.50 (over the violation budget)" in rec.reason.steps[0]
    off = decide(end, VpaSettings(quantile=0.9, margin=0.0, window="1h"))
    assert off.target == 500 and not any("chosen" in s for s in off.reason.steps)


def test_within_a_recorded_hour_only_the_serving_candidate_is_computed():
    ledger = CostLedger()
    usage = _usage(3, level=1.5)
    found = [cand(DEFAULT, 1.0), cand("stock", 2.0)]
    for t in pd.date_range(T0 - pd.Timedelta("2D"), T0, freq="1h"):
        assert ledger.needed("s", t) is None  # a new hour: every candidate is recorded
        choose_by_cost(ledger, "s", found, usage, t, S)
    assert ledger.needed("s", T0 + pd.Timedelta("1min")) == {"stock"}
    assert ledger.needed("s", T0 + pd.Timedelta("1h")) is None
    idx = pd.date_range(T0, periods=12, freq="5min")
    fc = Forecast("s", idx, (0.9,), np.full((12, 1), 1.0), "m")
    only = candidates(fc, 12, usage[usage.index < T0], T0, S, "m", only={"stock"})
    assert [c.name for c in only] == ["stock"]
