"""`tidewise train` fits, backtests and stores the fleet's decision-time models (issue 12, item 1);
a stored model that does not load leaves the version serving, with the reason recorded."""
import json
import os

import numpy as np
import pytest

from predictor.registry import load_version, sha256_file
from predictor.registry.manifest import DECISION_PREFIX
from training.decision_time import DecisionTimeSettings, summary_lines
from training.pipeline import TrainSettings, train

from .conftest import FAST_GLOBAL, small_history

QUICK = {"max_iter": 10, "max_rows": 4000, "min_samples_leaf": 20}


def settings(**kw):
    return TrainSettings(folds=2, global_params=FAST_GLOBAL, decision_time=DecisionTimeSettings(params=QUICK, **kw))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    hist = small_history()
    path = tmp_path_factory.mktemp("reg")
    res = train(hist, str(path), settings())
    return hist, path, res


def test_train_stores_backtested_decision_time_models(trained):
    hist, path, res = trained
    reg = load_version(str(path))
    assert set(reg.decision_models) == {"vpa", "hpa"} and not reg.decision_errors
    assert int(reg.decision_models["vpa"].span) == 12 and int(reg.decision_models["hpa"].span) == 2
    for kind in ("vpa", "hpa"):  # the manifest lists each file with its sha256, like every artifact
        for ext in (".json", ".npz"):
            name = DECISION_PREFIX + kind + ext
            assert reg.manifest["artifacts"][name]["sha256"] == sha256_file(os.path.join(reg.path, name))
    info = reg.manifest["training"]["decision_time"]["vpa"]
    bt = info["backtest"]
    assert bt["series"] == len(hist.series)
    for name in ("decision_time", "day_ahead"):
        assert len(bt["pinball_per_p95"][name]) == 4 and all(x >= 0 for x in bt["pinball_per_p95"][name])
        assert all(0 <= c <= 1 for c in bt["coverage"][name])
    q, _ = reg.decision_models["vpa"].predict_series(hist.series[sorted(hist.series)[0]])
    assert np.isfinite(q[-10:]).all()
    lines = summary_lines(res.decision_time)
    assert len(lines) == 2 and "vs day-ahead" in lines[0] and "peak of the next 1h" in lines[0]


def test_the_report_shows_the_decision_time_backtest(trained, tmp_path):
    from training.fleet_report import write_registry_report

    _, path, _ = trained
    out = tmp_path / "report.html"
    write_registry_report(str(path), str(out), max_plots=1)
    html = out.read_text()
    assert "decision-time vpa (peak of the next 1h, lightgbm): held-out pinball" in html and "vs day-ahead" in html


def test_train_without_decision_time_stores_none(tmp_path):
    train(small_history(), str(tmp_path), settings(enabled=False))
    reg = load_version(str(tmp_path))
    assert reg.decision_models == {} and not any(n.startswith(DECISION_PREFIX) for n in reg.manifest["artifacts"])


def test_a_decision_model_that_does_not_load_leaves_the_version_serving(trained, tmp_path):
    """Verified bytes that do not parse as this tidewise's decision-time model (another format):
    the version still loads (its day-ahead models serve) and says why the model is missing."""
    import shutil

    from tests.autoscaler.test_registry import reseal

    _, path, res = trained
    folder = str(tmp_path / res.version)
    shutil.copytree(os.path.join(path, res.version), folder)
    meta_path = os.path.join(folder, DECISION_PREFIX + "hpa.json")
    meta = json.load(open(meta_path))
    meta["format"] = "tidewise-decision-time/999"
    json.dump(meta, open(meta_path, "w"))
    reseal(folder)
    reg = load_version(folder)
    assert set(reg.decision_models) == {"vpa"} and "tidewise-decision-time/999" in reg.decision_errors["hpa"]
