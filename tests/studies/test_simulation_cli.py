"""`tidewise simulate colocation` as a user runs it: a small run on the real traces."""
from __future__ import annotations

import json
import os
import re

import pytest

from tests.conftest import SHARED_DATA, needs_shared_data, run_cli

KEYS = {"utilisation", "shortfall", "batch_core_hours", "evictions",
        "goodput_core_hours", "lost_core_hours", "jobs_completed", "slowdown_p50", "slowdown_p95"}


@needs_shared_data
def test_small_run_writes_the_results_contract_and_a_self_contained_report(tmp_path):
    out = tmp_path / "sim"
    r = run_cli("simulate", "colocation", "--traces", SHARED_DATA, "--nodes", "2", "--days", "1",
                "--forecast-model", "seasonal_naive_daily", "--no-sweeps", "--seed", "3", "--bursts", "high",
                "--out", str(out))
    assert r.returncode == 0, r.stderr
    results = json.loads((out / "results.json").read_text())
    assert list(results) == ["bursts", "policies"] and results["bursts"] == "high"
    assert list(results["policies"]) == ["none", "katalyst", "koordinator", "tidewise"]
    for label, m in results["policies"].items():
        assert set(m) == KEYS, label
        assert 0.0 <= m["utilisation"] <= 1.0 and 0.0 <= m["shortfall"] <= 1.0
        assert isinstance(m["evictions"], int) and m["batch_core_hours"] >= 0
        assert m["goodput_core_hours"] == pytest.approx(m["batch_core_hours"] - m["lost_core_hours"])
    none = results["policies"]["none"]
    assert none["batch_core_hours"] == 0 and none["shortfall"] == 0 and none["evictions"] == 0
    for p in ("katalyst", "koordinator", "tidewise"):
        assert results["policies"][p]["utilisation"] > none["utilisation"] + 0.1, p
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3  # frontier, goodput vs slowdown, the day
    assert "Goodput versus slowdown" in page and "bursts inside the minute: <b>high</b>" in page
    assert not re.search(r"""(src|href)=['"]?(https?:)?//""", page)  # nothing fetched from outside
    details = json.loads((out / "details.json").read_text())
    assert details["cluster"]["nodes"] == 2 and details["forecast_coverage"]
    assert details["bursts"]["setting"] == "high" and details["bursts"]["pooled"]["mean_excess"] > 0
    assert os.listdir(out / "forecast-cache")  # the day's forecasts were cached
    assert "tidewise" in r.stderr and "wrote" in r.stderr


def test_user_errors_are_one_line_and_exit_2(tmp_path):
    r = run_cli("simulate", "colocation", "--traces", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    assert "no such directory" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "traces").mkdir()
    r = run_cli("simulate", "colocation", "--traces", str(tmp_path / "traces"), "--forecast-model", "crystal-ball",
                "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "--forecast-model" in r.stderr
    r = run_cli("simulate", "colocation", "--policy", "greedy")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = run_cli("simulate", "colocation", "--bursts", "extreme")
    assert r.returncode == 2 and "--bursts" in r.stderr and "Traceback" not in r.stderr
