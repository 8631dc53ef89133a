"""The seasonal rule as a candidate of in-place VPA decisions (issue 24 item 2): its request, and the
daily choice between it and the model by cost on the series' own scored steps."""
import numpy as np
import pandas as pd
import pytest

from autoscaler.logic.rule_choice import DAY_NS, MIN_STEPS, OVER_BUDGET, RuleChoice, Tally, cost, rule_request
from predictor.timestamps import epoch_ns

STEP = pd.Timedelta("5min")
HOUR = pd.Timedelta("1h")


def series(days=9, seed=0):
    idx = pd.date_range("2026-11-01", periods=days * 288, freq=STEP, tz="UTC")
    rng = np.random.default_rng(seed)
    v = 4 + 3 * np.sin(2 * np.pi * (idx.hour * 60 + idx.minute) / 1440) + rng.gamma(2, 0.2, len(idx))
    return pd.Series(v, index=idx)


def scorer_rule(y: pd.Series, t: pd.Timestamp) -> float:
    """The reference scorer's `vpa_seasonal_rule` at an hour's start, written out with pandas."""
    hm = y.resample("1h").max()
    days = hm.reindex([t - pd.Timedelta(days=d) for d in range(1, 8)]).dropna().to_numpy()
    return max(np.median(days), hm[t - HOUR]) * 1.05


@pytest.mark.parametrize("hour", [0, 7, 13, 23])
def test_the_rule_at_an_hours_start_is_the_scorers(hour):
    y = series()
    t = pd.Timestamp("2026-11-09", tz="UTC") + hour * HOUR
    past = y[y.index < t]
    got = rule_request(past.to_numpy(), epoch_ns(past.index), t.value, HOUR.value)
    assert got == pytest.approx(scorer_rule(past, t), rel=1e-12)
    # a step later the windows move with the origin (serve decides at each series' own step)
    t2 = t + STEP
    past2 = y[y.index < t2]
    shifted = rule_request(past2.to_numpy(), epoch_ns(past2.index), t2.value, HOUR.value)
    days = [past2[(past2.index >= t2 - pd.Timedelta(days=d)) & (past2.index < t2 - pd.Timedelta(days=d) + HOUR)].max()
            for d in range(1, 8)]
    assert shifted == pytest.approx(max(np.median(days), past2[past2.index >= t2 - HOUR].max()) * 1.05)


def test_the_rule_needs_a_sample():
    assert np.isnan(rule_request(np.array([np.nan]), np.array([0], dtype=np.int64), DAY_NS, HOUR.value))
    # only the last hour known: its peak x 1.05
    ns = np.array([DAY_NS - STEP.value], dtype=np.int64)
    assert rule_request(np.array([2.0]), ns, DAY_NS, HOUR.value) == pytest.approx(2.1)


def test_cost_prices_only_the_violations_over_the_budget():
    t = Tally()
    t.add(np.array([1.0, 1.0, 3.0, 1.0]), 2.0)  # slack 0.5 x 3, one step over
    assert (t.slack, t.over, t.steps) == (1.5, 1, 4)
    assert cost([t], 0.25, 10.0) == (pytest.approx(0.375), 4)  # at the budget: slack only
    assert cost([t], 0.05, 10.0)[0] == pytest.approx(0.375 + 10 * 0.2)
    assert np.isnan(cost([], 0.05, 1.0)[0])


def day_of_decisions(choice, day, model, rule, usage, budget=0.05):
    """24 hourly decisions on `day` (ns), each scored on 12 steps of `usage`."""
    for h in range(24):
        choice.decide(day + h * HOUR.value, model, rule, budget, 2.5)
        choice.observe(np.full(12, usage))


def test_the_cheaper_candidate_serves_the_next_day_and_the_choice_can_go_back():
    c = RuleChoice()
    d0 = pd.Timestamp("2026-11-01", tz="UTC").value
    # day 0: no scored steps yet, the model serves whatever the rule asks
    assert c.decide(d0, 10.0, 6.0, 0.05, 2.5) == (10.0, False)
    assert "model serves" in c.why
    c.observe(np.full(12, 5.0))
    day_of_decisions(c, d0, 10.0, 6.0, 5.0)  # the rule: less slack, never over
    got, is_rule = c.decide(d0 + DAY_NS, 10.0, 6.0, 0.05, 2.5)
    assert (got, is_rule) == (6.0, True)
    assert "model 0.500, seasonal rule 0.167 at violation 0.000 (budget 0.05)" in c.why
    # within the day the choice holds, even when the rule asks more
    assert c.decide(d0 + DAY_NS + HOUR.value, 10.0, 12.0, 0.05, 2.5) == (12.0, True)
    # the rule now runs over (usage 7 > 6) on every step: the next day the model serves again
    c.observe(np.full(12, 7.0))
    day_of_decisions(c, d0 + DAY_NS + 2 * HOUR.value, 10.0, 6.0, 7.0)
    got, is_rule = c.decide(d0 + 2 * DAY_NS, 10.0, 6.0, 0.05, 2.5)
    assert (got, is_rule) == (10.0, False), c.why


def test_no_choice_on_under_a_day_of_steps_and_old_days_forgotten():
    c = RuleChoice()
    d0 = pd.Timestamp("2026-11-01", tz="UTC").value
    c.decide(d0, 10.0, 6.0, 0.05, 2.5)
    c.observe(np.full(MIN_STEPS - 1, 5.0))
    assert c.decide(d0 + DAY_NS, 10.0, 6.0, 0.05, 2.5) == (10.0, False)
    c.observe(np.full(2, 5.0))
    assert c.decide(d0 + 2 * DAY_NS, 10.0, 6.0, 0.05, 2.5) == (6.0, True)
    assert c.decide(d0 + 20 * DAY_NS, 10.0, 6.0, 0.05, 2.5) == (10.0, False)  # all scores over a week old
    assert not c.tallies
    # a rule with no request (no history): the model serves even on a rule day
    c2 = RuleChoice(rule=True, day=d0)
    assert c2.decide(d0, 10.0, float("nan"), 0.05, 2.5) == (10.0, False)


def test_running_over_the_budget_is_priced_so_the_choice_does_not_buy_slack_with_it():
    """A rule with a tenth of the model's slack but 10% of its steps over a 5% budget: at the choice's
    price of going over (OVER_BUDGET, 10) the model serves; at the stock curve's 2.5 the rule would."""
    d0 = pd.Timestamp("2026-11-01", tz="UTC").value
    usage = np.where(np.arange(300) % 10 == 0, 6.0, 5.0)  # 10% of the steps at 6, over the rule's 5.5
    picks = {}
    for weight in (OVER_BUDGET, 2.5):
        c = RuleChoice()
        c.decide(d0, 10.0, 5.5, 0.05, weight)
        c.observe(usage)
        picks[weight] = c.decide(d0 + DAY_NS, 10.0, 5.5, 0.05, weight)
        assert "seasonal rule" in c.why and "at violation 0.100 (budget 0.05)" in c.why
    assert picks == {OVER_BUDGET: (10.0, False), 2.5: (5.5, True)}
