"""The stand-in for the held-out suite (benchmarks/other_traces.py) that BENCHMARKS.md's "Traces the dev
suite does not read" table quotes: its series are none of `dev`'s, sit on the scorer's 5-minute UTC grid
and are all scored; without the scorer it says so in one line and exits 2."""
import numpy as np
import pandas as pd

from tests.conftest import needs_shared_data, needs_shared_eval


@needs_shared_eval
@needs_shared_data
def test_the_other_suite_holds_only_series_dev_does_not_read_and_the_scorer_scores_them_all():
    from benchmarks.other_traces import other
    from benchmarks.tidal import scorer

    bd = scorer()
    import suite

    mine, dev = other(), suite.dev()
    assert len(mine) == 40 and not set(mine) & set(dev)
    dev_values = {round(float(np.nansum(s.to_numpy())), 6) for s in dev.values()}
    for k, s in mine.items():
        assert isinstance(s.index, pd.DatetimeIndex) and str(s.index.tz) == "UTC", k
        assert (np.diff(s.index.as_unit("ns").asi8) == pd.Timedelta("5min").value).all(), k  # the scorer's grid
        assert round(float(np.nansum(s.to_numpy())), 6) not in dev_values, k  # not a dev series renamed
        assert np.nanmax(s.to_numpy()) < 1e6, k  # the replay reads values as cores and refuses more
        w = bd.window(s)
        assert w is not None and np.nanmin(s.to_numpy()) >= 0 and np.nanpercentile(s[s.index < w[0]], 95) > 0, k
    families = {k.split("/")[0] for k in mine}
    assert families == {"nab", "tweets", "ccc_col4", "alibaba_mem"}
    from benchmarks.tidal import suite as tidal_suite  # `python -m benchmarks.tidal --suite other` reads them all

    data, windows = tidal_suite(False, "other")
    assert set(data) == set(windows) == set(mine)


def test_without_the_scorer_it_exits_2_in_one_line(monkeypatch, capsys, tmp_path):
    import benchmarks.other_traces as ot

    monkeypatch.setattr(ot, "EVAL", str(tmp_path / "no-eval"))
    assert ot.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no-eval" in err and "SHARED_EVAL" in err


FAKE_REPLAY = '''import sys
import pandas as pd
kind, args = sys.argv[1], sys.argv[2:]
inp, out = args[args.index("--input") + 1], args[args.index("--output") + 1]
f = pd.read_csv(inp)
f = f[f["timestamp"] >= f["start"]]
col = "target" if kind == "vpa" else "replicas"
f[col] = f.groupby("series")["value"].transform("max") * (1.2 if kind == "vpa" else 0) + (0 if kind == "vpa" else 3)
f[["series", "timestamp", col]].to_csv(out, index=False)
'''


@needs_shared_eval
@needs_shared_data
def test_the_scorer_runs_on_the_other_suite_and_writes_its_report(tmp_path, capsys):
    """The scorer's own main on `other`, with a stand-in replay (the window's maximum x 1.2 as every
    request, 3 replicas) so that what is tested is the wiring: the suite registered, the flags passed,
    the report written and naming the suite."""
    import json
    import sys

    from benchmarks.other_traces import main

    fake = tmp_path / "replay.py"
    fake.write_text(FAKE_REPLAY)
    out = tmp_path / "report.json"
    assert main(["--project", f"{sys.executable} {fake}", "--regimes", "restart", "--max-series", "2",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["suite"] == "other" and report["series"] == 2 and not report["missing"]
    vpa = report["policies"]["project_vpa_restart"]
    assert vpa["violation"] == 0.0 and 0 < vpa["slack"] < 1  # never under the window's maximum
    assert "project_vpa" not in report["policies"]  # --regimes passed through (the scorer's default: in-place)
    assert sys.argv[0] != "bench_decisions.py"  # the process's argv given back


def test_the_section_of_the_other_suite_names_its_own_command_and_no_figure(monkeypatch):
    """`python -m benchmarks.tidal --suite other` prints a section that says how to rerun it; the figure is
    drawn for dev only, so only dev's section shows it."""
    from benchmarks import tidal

    monkeypatch.setattr(tidal, "judged", lambda point, refs, keys, blocks: {
        "slack": point[0], "violation": point[1], "vs_stock": 1.0, "gap_closed": 0.0})
    refs = {k: {"class": c, "stock": (0.5, 0.05), "rule": (0.45, 0.05)} for k, c in (("a", "tidal"), ("b", "flat"))}
    scores = {0.05: {"a": (0.4, 0.05, 12.0), "b": (0.2, 0.04, 3.0)}}
    other = tidal.section(refs, scores, scores, 600.0, False, "other")
    dev = tidal.section(refs, scores, scores, 600.0, False, "dev")
    assert "`python -m benchmarks.tidal --suite other`" in other and "2 series of `other`" in other
    assert tidal.FIGURE not in other and "below the figure" not in other
    assert "`python -m benchmarks.run --only tidal`" in dev and f"![trade-off curves]({tidal.FIGURE})" in dev
    assert "| Tidewise in place, budget 0.05 | 0.300 | 0.045 |" in other  # the mean of the two series
