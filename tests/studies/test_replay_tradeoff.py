"""The trade-off curves (issue 12 item 6): computed on a replay's input they are the reference
scorer's own curves; read from the scorer's JSON they keep every setting; the report shows them."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from studies.replay.tradeoff import (HPA_TARGETS, VPA_MARGINS, VPA_PCTS, hpa_series_curves, scorer_curves,
                                     vpa_series_curves)
from tests.autoscaler.test_logic_hpa import _reference
from tests.studies.test_replay import tidal


def test_vpa_curves_are_the_reference_scorers_frontier_on_the_same_series():
    ref = _reference()
    y = tidal(days=10)
    start, end = y.index[0] + pd.Timedelta("8D"), y.index[0] + pd.Timedelta("10D")
    use = y[start:end]
    c = vpa_series_curves(y, start, end, use, use * 1.2)
    theirs = ref.vpa_histogram_requests(y, start, end, VPA_PCTS)
    for p in VPA_PCTS:
        line = c.lines[f"stock VPA p{p * 100:g} (margins 1.0-1.4)"]
        for (viol, slack), m in zip(line, VPA_MARGINS):
            want_slack, want_viol = ref.vpa_scores(use, (theirs[p] * m).reindex(use.index))
            assert (viol, slack) == pytest.approx((want_viol, want_slack))
    assert c.points["perfect foresight (each hour's max)"][0] == 0.0
    assert c.points["tidewise"] == pytest.approx((0.0, 1 - 1 / 1.2))  # 20% over usage: slack 1/6, never violated


def test_hpa_curves_are_the_reactive_hpa_at_each_target():
    ref = _reference()
    y = tidal(days=4) * 10
    start = y.index[0] + pd.Timedelta("3D")
    d1 = y.resample("1min").ffill()[start:].to_numpy()
    per = float(np.nanpercentile(y[y.index < start], 95)) / 8
    r = {"demand": d1, "serving": np.full(len(d1), 20.0), "per": per}
    c = hpa_series_curves(r, y[y.index < start].iloc[-12:], 0.7, 0.1, 5, 2)
    for (reps, over), tg in zip(c.lines["reactive HPA (targets 0.75-0.45)"], HPA_TARGETS):
        r0 = max(1, int(np.ceil(y[y.index < start].iloc[-12:].mean() / (per * tg))))
        assert (reps, over) == pytest.approx(ref.hpa_scores(d1, ref.hpa_reactive(d1, per, r0, tg), per))
    assert c.points["perfect foresight (replicas = demand)"][1] == 0.0
    assert c.points["tidewise"][0] == 20.0


def test_scorer_json_gives_every_setting_and_each_tidewise_run():
    pol = {f"vpa_frontier p{p} x{m}": {"slack": p * m, "violation": 1 - p} for p in VPA_PCTS for m in VPA_MARGINS}
    pol.update({"vpa_default": {"slack": 0.5, "violation": 0.05}, "vpa_perfect_foresight": {"slack": 0.3, "violation": 0.0},
                "hpa_reactive": {"mean_replicas": 6.7, "over_target": 0.08},
                **{f"hpa_frontier target {t}": {"mean_replicas": 5 / t, "over_target": t / 10} for t in HPA_TARGETS}})
    runs = {"tidewise (default)": {"project_vpa": {"slack": 0.47, "violation": 0.052},
                                   "project_hpa": {"mean_replicas": 8.7, "over_target": 0.02}},
            "tidewise --choose-by-cost": {"project_vpa": {"slack": 0.5, "violation": 0.04}}}
    v = scorer_curves("vpa", pol, runs)
    assert len(v.lines) == len(VPA_PCTS) and all(len(pts) == len(VPA_MARGINS) for pts in v.lines.values())
    assert v.points["tidewise --choose-by-cost"] == (0.04, 0.5) and v.points["stock VPA (p90 x1.15)"] == (0.05, 0.5)
    h = scorer_curves("hpa", pol, runs)
    assert len(h.lines["reactive HPA (targets 0.75-0.45)"]) == len(HPA_TARGETS)
    assert h.points["tidewise (default)"] == (8.7, 0.02) and "tidewise --choose-by-cost" not in h.points
    # a setting that leaves a kind alone is named beside the equal point, not drawn on top of it
    runs["tidewise --choose-by-cost"]["project_hpa"] = {"mean_replicas": 8.7, "over_target": 0.02}
    assert scorer_curves("hpa", pol, runs).points["tidewise (default) = --choose-by-cost"] == (8.7, 0.02)
