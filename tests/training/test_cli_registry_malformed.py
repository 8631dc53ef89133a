"""`tidewise forecast --registry` and `tidewise report` on a trained registry whose files were made
malformed with their checksums fixed up (as a writer of the volume without the key can). Neither
reads the decision-time models, so a LightGBM text edited there changes nothing for them (it used
to abort both with SIGABRT inside LightGBM's loader); a malformed stored history or manifest field
is refused with one line and exit 2 (it used to be a traceback). Run as real processes: a crash
must fail the test, not end the test run."""
from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("lightgbm")

from tests.conftest import run_cli  # noqa: E402
from tests.registry_damage import damage  # noqa: E402
from tidewise.cli import main  # noqa: E402

from .conftest import small_history  # noqa: E402


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A registry from `tidewise train` (its decision-time models in LightGBM), and its input."""
    d = tmp_path_factory.mktemp("train")
    inp = str(d / "history.csv")
    small_history(workloads=2, days=6).to_long().to_csv(inp, index=False)
    reg = str(d / "models")
    assert main(["train", "--source", "file", "--input", inp, "--registry", reg, "--folds", "1"]) == 0
    assert os.path.isfile(os.path.join(reg, "latest", "decision_time_vpa.json"))
    return reg, inp


def damaged(trained, tmp_path, how: str) -> str:
    copy = str(tmp_path / "models")
    shutil.copytree(trained[0], copy, symlinks=True)
    damage(os.path.join(copy, "latest"), how)
    return copy


@pytest.mark.parametrize("how", ["split_feature 99999, tree_sizes left", "truncated"])
def test_forecast_and_report_do_not_load_the_decision_time_models(trained, tmp_path, how):
    reg = damaged(trained, tmp_path, how)
    out, page = tmp_path / "f.csv", tmp_path / "report.html"
    proc = run_cli("forecast", "--input", trained[1], "--output", str(out), "--registry", reg)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.stat().st_size > 0 and "Traceback" not in proc.stderr
    proc = run_cli("report", "--registry", reg, "--out", str(page), "--max-plots", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert page.stat().st_size > 0 and "decision-time vpa" in page.read_text()


@pytest.mark.parametrize("how,says", [("negative recent_step_seconds", "recent_step_seconds is -300"),
                                      ("recent.parquet not Parquet", "recent.parquet is not a Parquet file")])
def test_a_malformed_stored_history_is_refused_with_one_line(trained, tmp_path, how, says):
    reg = damaged(trained, tmp_path, how)
    page = tmp_path / "report.html"
    for args in (["report", "--registry", reg, "--out", str(page)],
                 ["forecast", "--input", trained[1], "--output", str(tmp_path / "f.csv"), "--registry", reg]):
        proc = run_cli(*args)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"tidewise {args[0]}: error: registry version "), lines
        assert says in lines[0] and "retrain" in lines[0]
    assert not page.exists() and not (tmp_path / "f.csv").exists()
