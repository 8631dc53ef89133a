"""Issue 22, low item: `serve --once --registry DIR` whose registry has no usable version exits 1
and says so (it used to forecast statelessly and exit 0, as if the models asked for had served)."""
from __future__ import annotations

import os

from tests.autoscaler.test_serve_once import cluster  # noqa: F401 - the shared fixture
from tests.conftest import run_cli


def test_no_version_yet_exits_1_and_names_the_registry(cluster, tmp_path):  # noqa: F811
    fake, cmd, _ = cluster
    reg = tmp_path / "models"
    reg.mkdir()
    proc = run_cli(*cmd, "--registry", str(reg))
    assert proc.returncode == 1, proc.stderr
    assert f"not done: registry {reg}: no usable version (" in proc.stderr
    assert "forecasts were stateless" in proc.stderr and "Traceback" not in proc.stderr


def test_a_refused_version_exits_1(cluster, tmp_path):  # noqa: F811
    fake, cmd, _ = cluster
    reg = tmp_path / "models"
    (reg / "20240801T000000Z-aaaaaa").mkdir(parents=True)  # a version folder with no manifest
    os.symlink("20240801T000000Z-aaaaaa", reg / "latest")
    proc = run_cli(*cmd, "--registry", str(reg))
    assert proc.returncode == 1, proc.stderr
    assert f"not done: registry {reg}: no usable version" in proc.stderr


def test_a_version_whose_lightgbm_model_does_not_load_exits_1_not_a_crash(cluster, small, tmp_path):  # noqa: F811
    """The decision-time model's text edited by hand and the checksums fixed up: serve refuses the
    version as any other (it used to die with SIGABRT inside LightGBM's loader, exit 134)."""
    import pandas as pd

    from tests.autoscaler.test_decision_time_serving import quick
    from tests.registry_damage import damage, write

    fake, cmd, _ = cluster
    reg = tmp_path / "models"
    version = write(reg, small[2], {"hpa": quick(2).fit_many(small[2].series, pd.Timedelta("5min"))})
    damage(reg / version, "split_feature 99999, tree_sizes left", artifact="decision_time_hpa.json")
    proc = run_cli(*cmd, "--registry", str(reg))
    assert proc.returncode == 1, proc.stderr
    assert f"not done: registry {reg}: no usable version" in proc.stderr
    assert "decision_time_hpa.json: the LightGBM model of quantile 0.5: tree 0 does not hold" in proc.stderr
    assert "Traceback" not in proc.stderr
