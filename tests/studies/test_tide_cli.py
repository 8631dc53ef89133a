"""`tidewise simulate tide` as a user runs it: a small run on the real traces, and user mistakes."""
from __future__ import annotations

import json
import re

import pytest

from tests.conftest import SHARED_DATA, needs_shared_data, run_cli

CONTRACT = ["node_hours_lent", "late_minutes", "pods_moved", "goodput_core_hours"]


@needs_shared_data
def test_small_run_writes_the_results_contract_and_a_self_contained_report(tmp_path):
    out = tmp_path / "tide"
    r = run_cli("simulate", "tide", "--traces", SHARED_DATA, "--nodes", "8", "--days", "1", "--seed", "2",
                "--forecast-model", "seasonal_naive_daily", "--no-sweeps", "--out", str(out))
    assert r.returncode == 0, r.stderr
    results = json.loads((out / "results.json").read_text())
    assert list(results) == ["policies", "tidewise_default", "cores_per_node", "memory_gib_per_node"]
    d = results["tidewise_default"]
    # the serving loop's plan and defaults, on the calibrated margin; serve's fixed stack until it has errors
    assert {k: d[k] for k in ("lead_minutes", "min_dwell_minutes", "max_moves", "hold_minutes")} == \
        {"lead_minutes": 60, "min_dwell_minutes": 120, "max_moves": 2, "hold_minutes": 60}
    assert d["margin"] == "calibrated" and (d["fallback_quantile"], d["fallback_headroom"]) == (0.9, 0.25)
    assert list(results["policies"]) == ["watermark", "schedule", "oracle", "tidewise"]
    for label, m in results["policies"].items():
        assert list(m)[:4] == CONTRACT, label
        assert isinstance(m["late_minutes"], int) and isinstance(m["pods_moved"], int)
        assert 0 <= m["node_hours_lent"] <= 8 * 24 and m["goodput_core_hours"] >= 0
        assert m["pods_moved"] == m["online_pods_drained"] + m["batch_pods_evicted"]
    assert results["policies"]["watermark"]["node_hours_lent"] > 0  # an 8-node pool has nodes to lend
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2  # the week and the day's picture
    assert "The day&#x27;s picture" in page or "The day's picture" in page
    assert not re.search(r"""(src|href)=['"]?(https?:)?//""", page)  # nothing fetched from outside
    details = json.loads((out / "details.json").read_text())
    assert details["pool"]["nodes"] == 8 and details["tidewise_default"]["lead_minutes"] == 60
    assert list((out / "forecast-cache").iterdir())  # the hourly forecasts were cached
    assert "wrote" in r.stderr and "tidewise" in r.stderr


@needs_shared_data
def test_the_cost_report_reads_the_node_size_from_the_tide_results(tmp_path):
    """`tidewise report --cost --tide R` said "node size unknown" although --help says it defaults from R."""
    from tests.studies.cost_fixtures import write_inputs

    out = tmp_path / "tide"
    r = run_cli("simulate", "tide", "--traces", SHARED_DATA, "--nodes", "8", "--days", "1", "--seed", "2",
                "--policy", "watermark", "--no-sweeps", "--out", str(out))
    assert r.returncode == 0, r.stderr
    results = json.loads((out / "results.json").read_text())
    assert (results["cores_per_node"], results["memory_gib_per_node"]) == (32.0, 128.0)
    prices = write_inputs(tmp_path)["--cost"]  # off-peak: 1 a core-hour, 0.25 a GiB-hour
    r = run_cli("report", "--cost", prices, "--tide", str(out / "results.json"), "--out", str(tmp_path / "cost.html"))
    assert r.returncode == 0, r.stderr
    tide = next(lv for lv in json.loads((tmp_path / "cost.json").read_text())["levers"] if lv["lever"] == "lent nodes (tide)")
    lent = results["policies"]["watermark"]["node_hours_lent"]
    assert lent > 0 and tide["saved"] == pytest.approx(lent * (32 * 1 + 128 * 0.25))
    assert "32 cores x 1 + 128 GiB x 0.25" in tide["reason"] and "unknown" not in r.stderr


@pytest.mark.parametrize("args, names", [
    (["--nodes", "1"], "--nodes 1"),
    (["--days", "0"], "--days 0"),
    (["--forecast-model", "crystal-ball"], "--forecast-model"),
])
def test_bad_numbers_and_models_exit_2_with_one_line(tmp_path, args, names):
    r = run_cli("simulate", "tide", "--traces", str(tmp_path), *args, "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_missing_traces_and_unknown_policy_exit_2(tmp_path):
    r = run_cli("simulate", "tide", "--traces", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "no such directory" in r.stderr and not (tmp_path / "o").exists()
    r = run_cli("simulate", "tide", "--policy", "greedy")
    assert r.returncode == 2 and "invalid choice" in r.stderr and "Traceback" not in r.stderr
