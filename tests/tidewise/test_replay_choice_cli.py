"""`tidewise replay --choose-by-cost` (issue 12 item 2) and the report's trade-off figure (item 6): the
contract is unchanged, the knobs are checked, and the page shows where Tidewise sits on the curve."""
import pandas as pd
import pytest

from tests.conftest import run_cli
from tests.studies.test_replay_choice import spiky
from tests.tidewise.test_replay_cli import MODEL, replay, tidal_frame


def test_choose_by_cost_keeps_the_contract_and_the_report_draws_the_curve(tmp_path):
    start = "2024-05-06T00:00:00Z"
    tide = tidal_frame(days=8, start=start, series=("web/cpu",))
    y = spiky(days=8)  # where the forecast serves badly (see tests/studies/test_replay_choice.py)
    y.index = pd.to_datetime(tide["timestamp"], utc=True).to_numpy()
    noisy = pd.DataFrame({"series": "batch/cpu", "timestamp": tide["timestamp"], "value": y.to_numpy(), "start": start})
    frame = pd.concat([tide, noisy], ignore_index=True)
    rep = tmp_path / "vpa.html"
    out = replay(tmp_path, "vpa", frame, "--every", "1h", "--report", str(rep))
    chosen = replay(tmp_path, "vpa", frame, "--every", "1h", name="chosen.csv")
    cost = tmp_path / "in-cost.csv"
    frame.to_csv(cost, index=False)
    r = run_cli("replay", "--choose-by-cost", "--cost-window", "1d", "vpa", "--input", str(cost),
                "--output", str(tmp_path / "out-cost.csv"), "--every", "1h", *MODEL)
    assert r.returncode == 0, r.stderr
    by_cost = pd.read_csv(tmp_path / "out-cost.csv", parse_dates=["timestamp"])
    assert list(by_cost.columns) == list(out.columns) and len(by_cost) == len(out)
    assert out.equals(chosen)  # without the flag nothing changes
    web = out["series"] == "web/cpu"
    assert by_cost[web].equals(out[web])  # the forecast wins on the clean tide: the same requests
    assert not by_cost[~web]["target"].equals(out[~web]["target"])  # another candidate serves the spiky one
    page = rep.read_text()
    assert "<h2>Trade-off</h2>" in page and page.count("<img") == 3  # the figure and one plot per series


@pytest.mark.parametrize("flag,value,message", [
    ("--violation-budget", "1.5", "--violation-budget 1.5: a share of 5-minute steps in (0, 0.5]"),
    ("--violation-weight", "nan", "--violation-weight nan: use a number in [0, 1e+06]"),
    ("--change-weight", "-1", "--change-weight -1.0: use a number in [0, 1e+06]"),
    ("--cost-window", "30m", "--cost-window 30m: at least 1h"),
])
def test_bad_choice_knobs_exit_2_naming_the_flag(tmp_path, flag, value, message):
    inp = tmp_path / "in.csv"
    tidal_frame(days=3).to_csv(inp, index=False)
    r = run_cli("replay", "--choose-by-cost", flag, value, "vpa", "--input", str(inp), "--output", str(tmp_path / "o.csv"))
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.csv").exists()
