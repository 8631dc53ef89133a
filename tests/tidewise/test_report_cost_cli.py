"""`tidewise report --cost` as a user runs it (issue 17 item 3): the page with its plots, the JSON
and CSV beside it, the printed table, and a bad prices file refused in one line before any output."""
from __future__ import annotations

import base64
import csv
import json
import re

import pytest

from tests.conftest import run_cli
from tests.studies.cost_fixtures import write_inputs


def _args(flags: dict[str, str]) -> list[str]:
    return [x for kv in flags.items() for x in kv]


def test_the_page_has_its_plots_and_the_tables_their_numbers(tmp_path):
    f = write_inputs(tmp_path)
    out = tmp_path / "cost.html"
    r = run_cli("report", *_args(f), "--node-size", "32,128", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    page = out.read_text()
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page)
    assert [alt for alt, _ in images] == ["what each lever saves per day", "cost per namespace", "cost per hour"]
    assert all(base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n" for _, png in images)
    assert "http" not in page.replace("http-equiv", "")  # self-contained: nothing fetched
    doc = json.loads((tmp_path / "cost.json").read_text())
    assert [(lv["lever"], lv["saved"]) for lv in doc["levers"]] == [
        ("tidal requests (VPA)", pytest.approx(20)), ("reclaimed cores (colocation)", pytest.approx(100)),
        ("lent nodes (tide)", pytest.approx(1920))]
    rows = {row["namespace"]: row for row in csv.DictReader((tmp_path / "cost.csv").open())}
    assert float(rows["shop"]["requested_cost"]) == pytest.approx(43)
    assert float(rows["etl"]["vpa_saved"]) == pytest.approx(11)
    table = r.stderr
    # the fixture's simulations name no span (no details.json): priced over it, no rate per day or month
    assert re.search(r"lent nodes \(tide\)\s+span unknown\s+span unknown\s+1,920\s", table)
    assert re.search(r"shop\s+43\s+27\.5\s", table)


def test_a_lever_without_its_input_prints_not_measured(tmp_path):
    f = write_inputs(tmp_path)
    out = tmp_path / "cost.html"
    r = run_cli("report", "--cost", f["--cost"], "--history", f["--history"], "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.search(r"tidal requests \(VPA\)(\s+not measured){3}\s+no --vpa-replay", r.stderr)
    assert re.search(r"shop\s+not measured\s+27\.5\s", r.stderr)
    doc = json.loads((tmp_path / "cost.json").read_text())
    assert [lv["saved"] for lv in doc["levers"]] == [None, None, None]
    assert "not measured" in out.read_text()


@pytest.mark.parametrize("text, needle", [
    ("currency: EUR\npeak_hours: '08:00-22:00'\ncpu: {peak: 4, offpeak: 1}\n", "memory: missing"),
    ("currency: EUR\npeak_hours: 8-22\ncpu: {peak: 4, offpeak: 1}\nmemory: {peak: 1, offpeak: 1}\n", "peak_hours:"),
    ("cpu: {peak: [4\n", "is not valid YAML"),
])
def test_a_bad_prices_file_is_one_line_exit_2_and_writes_nothing(tmp_path, text, needle):
    f = write_inputs(tmp_path)
    (tmp_path / "prices.yaml").write_text(text)
    out = tmp_path / "cost.html"
    r = run_cli("report", *_args(f), "--out", str(out))
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "--cost" in lines[0] and "prices.yaml" in lines[0] and needle in lines[0], lines[0]
    assert not out.exists() and not (tmp_path / "cost.json").exists() and not (tmp_path / "cost.csv").exists()


def test_nothing_to_price_and_a_bad_node_size_are_usage_errors(tmp_path):
    f = write_inputs(tmp_path)
    r = run_cli("report", "--cost", f["--cost"], "--out", str(tmp_path / "c.html"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--history" in r.stderr
    r = run_cli("report", "--cost", f["--cost"], "--tide", f["--tide"], "--node-size", "32",
                "--out", str(tmp_path / "c.html"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "CORES,GIB" in r.stderr


@pytest.mark.parametrize("flag, value, needle", [
    ("--history", "missing.csv", "--history"),
    ("--vpa-replay", "bad-target.csv", "line 3: target 'lots'"),
    ("--colocation", "coloc-bad.json", "policies.tidewise.goodput_core_hours"),
    ("--out", "cost.json", "the page's path"),
])
def test_a_bad_input_names_its_flag_in_one_line(tmp_path, flag, value, needle):
    f = write_inputs(tmp_path)
    (tmp_path / "bad-target.csv").write_text("series,timestamp,target\n"
                                             "a/Deployment/b/c/cpu,2026-11-30T06:00:00Z,1\n"
                                             "a/Deployment/b/c/cpu,2026-11-30T07:00:00Z,lots\n")
    (tmp_path / "coloc-bad.json").write_text(json.dumps({"policies": {"tidewise": {"batch_core_hours": 1}}}))
    flags = {**f, "--out": str(tmp_path / "cost.html"), flag: str(tmp_path / value)}
    r = run_cli("report", *_args(flags))
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and needle in lines[0], r.stderr
    assert not (tmp_path / "cost.csv").exists()
