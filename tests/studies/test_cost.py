"""The cost report's pricing (issue 17 item 3), on inputs priced by hand (tests/studies/cost_fixtures.py).

Prices: cpu 4 (peak) / 1 (off-peak) per core-hour, memory 0.5 / 0.25 per GiB-hour; hours 06, 07
off-peak and 08, 09 peak, so one unit held all four hours costs 1 + 1 + 4 + 4 = 10 (cpu).
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

from contracts.errors import InputError
from studies.cost.prices import load_prices, parse_prices
from studies.cost.report import CostInputs, build_report
from tests.studies.cost_fixtures import PRICES, write_inputs


def _report(tmp_path, tide_extra=None, **drop):
    f = write_inputs(tmp_path)
    if tide_extra:
        doc = json.loads((tmp_path / "tide.json").read_text())
        (tmp_path / "tide.json").write_text(json.dumps({**doc, **tide_extra}))
    given = {"history": f["--history"], "cluster_state": f["--cluster-state"], "vpa_replay": f["--vpa-replay"],
             "colocation": f["--colocation"], "tide": f["--tide"], "node_size": (32.0, 128.0)}
    given.update(drop)
    return build_report(load_prices(f["--cost"]), CostInputs(**given))


def test_every_price_is_the_hand_computed_one(tmp_path):
    r = _report(tmp_path)
    ns = {row["namespace"]: row for row in r.namespaces}
    assert set(ns) == {"etl", "shop"}
    shop, etl = ns["shop"], ns["etl"]
    # shop used: cpu 1x1 + 1x1 + 3x4 + 3x4 = 26, memory 1 GiB x (0.25 + 0.25 + 0.5 + 0.5) = 1.5
    assert shop["used_cost"] == pytest.approx(27.5) and shop["used_core_hours"] == pytest.approx(8)
    assert shop["used_gib_hours"] == pytest.approx(4)
    # shop requested: 2 cores x 2 running pods = 4 cores x 10 = 40; 1 GiB x 2 pods x 1.5 = 3
    assert shop["requested_cost"] == pytest.approx(43) and shop["idle_cost"] == pytest.approx(15.5)
    # etl: used 2x1 + 2x1 = 4; requested 2 cores x spec.replicas 1 x 10 = 20; no memory series
    assert etl["used_cost"] == pytest.approx(4) and etl["requested_cost"] == pytest.approx(20)
    assert etl["used_gib_hours"] is None  # no memory series: unknown, not zero
    # tidal requests: shop 4 before vs 1.5, 1.5, 3.5, 3.5 -> 40 - 31 = 9; etl 2 vs 2.5, 2.5, 0.5, 0.5 ->
    # 20 - 9 = 11 (night batch pays more at night, cheaply, and much less at the peak)
    assert shop["vpa_before_cost"] == pytest.approx(40) and shop["vpa_tidewise_cost"] == pytest.approx(31)
    assert shop["vpa_saved"] == pytest.approx(9) and etl["vpa_saved"] == pytest.approx(11)
    vpa, coloc, tide = r.levers
    assert vpa.saved == pytest.approx(20)
    # colocation: tidewise's 100 goodput core-hours x 1 off-peak (not its 120 batch core-hours)
    assert coloc.saved == pytest.approx(100)
    assert {row["policy"]: row["value"] for row in coloc.rows} == pytest.approx(
        {"none": 0, "katalyst": 70, "tidewise": 100})
    # tide: 30 node-hours x (32 cores x 1 + 128 GiB x 0.25) = 30 x 64
    assert tide.saved == pytest.approx(1920)
    assert {row["policy"]: row["value"] for row in tide.rows}["watermark@low=0.3"] == pytest.approx(640)
    assert any("not-a-workload-id" in n for n in r.notes)


def test_hourly_costs_follow_the_peak_window(tmp_path):
    h = _report(tmp_path).hourly
    assert list(h.index) == list(pd.date_range("2026-11-30T06:00:00Z", periods=4, freq="1h"))
    # used: shop 1 + 0.25, etl 2 at 06:00; shop 3 x 4 + 1 x 0.5 at 08:00
    assert list(h["used"]) == pytest.approx([3.25, 3.25, 12.5, 12.5])
    assert list(h["requested"]) == pytest.approx([4 + 0.5 + 2, 6.5, 16 + 1 + 8, 25])


def test_absent_inputs_are_not_measured_with_a_reason_never_zero(tmp_path):
    r = _report(tmp_path, cluster_state=None, colocation=None, tide=None)
    vpa, coloc, tide = r.levers
    assert (vpa.saved, coloc.saved, tide.saved) == (None, None, None)
    assert "--cluster-state" in vpa.reason and "--colocation" in coloc.reason and "--tide" in tide.reason
    shop = next(row for row in r.namespaces if row["namespace"] == "shop")
    assert shop["used_cost"] == pytest.approx(27.5)
    assert shop["requested_cost"] is None and shop["idle_cost"] is None and shop["vpa_saved"] is None


def test_tide_without_a_node_size_is_not_measured(tmp_path):
    tide = _report(tmp_path, node_size=None).levers[2]
    assert tide.saved is None and "--node-size" in tide.reason


def test_the_tide_node_size_may_come_from_its_results(tmp_path):
    tide = _report(tmp_path, {"cores_per_node": 16, "memory_gib_per_node": 64}, node_size=None).levers[2]
    assert tide.saved == pytest.approx(30 * (16 * 1 + 64 * 0.25))


def test_the_peak_window_reads_the_local_clock_and_wraps_past_midnight():
    p = parse_prices({**PRICES, "timezone": "Europe/Paris", "peak_hours": "22:00-06:00"}, "p.yaml")
    # 20:00 and 21:00 UTC are 21:00 and 22:00 in Paris (UTC+1 in winter); 05:00 UTC is 06:00
    hours = pd.DatetimeIndex(["2026-11-30T20:00Z", "2026-11-30T21:00Z", "2026-12-01T04:00Z", "2026-12-01T05:00Z"])
    assert list(p.is_peak(hours)) == [False, True, True, False]
    assert list(p.per_hour("memory", hours)) == [0.25, 0.5, 0.5, 0.25]


@pytest.mark.parametrize("change, key", [
    ({"cpu": None}, "cpu"),
    ({"cpu": {"peak": "cheap", "offpeak": 1}}, "cpu.peak"),
    ({"memory": {"peak": 1, "offpeak": -0.1}}, "memory.offpeak"),
    ({"memory": {"peak": 1, "offpeak": 1, "night": 0}}, "memory.night"),
    ({"peak_hours": "8-22"}, "peak_hours"),
    ({"peak_hours": "08:00-08:00"}, "peak_hours"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"currency": ""}, "currency"),
    ({"discount": 0.1}, "discount"),
])
def test_a_bad_prices_document_names_the_key(change, key):
    with pytest.raises(InputError) as exc:
        parse_prices({**PRICES, **change}, "p.yaml")
    assert f"--cost p.yaml: {key}:" in str(exc.value) and "\n" not in str(exc.value)
