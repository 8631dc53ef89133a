"""The choice forecaster runs a stored choice the same way everywhere: a plain model fitted on the
series, the shared global GBM (or its batch forecast), or the mean of the ensemble's members;
and the registry package stays a reader/writer that knows nothing of forecasting."""
import ast
import pathlib

import numpy as np
import pandas as pd
import pytest

from predictor.pipeline.choice import ChoiceForecaster, make_model, predict_from
from predictor.registry.loading import known_model
from predictor.types import ENSEMBLE, GLOBAL, Choice

QS = (0.5, 0.9, 0.95, 0.99)
STEP = pd.Timedelta("5min")


def _daily(days: int = 4) -> pd.Series:
    idx = pd.date_range("2024-08-01", periods=days * 288, freq=STEP, tz="UTC")
    rng = np.random.default_rng(1)
    return pd.Series(5 + 3 * np.sin(np.arange(len(idx)) * 2 * np.pi / 288) + rng.normal(0, 0.3, len(idx)), index=idx)


def test_the_ensemble_is_the_mean_of_its_members_with_the_batched_global_forecast():
    y = _daily()
    origin = y.index[-1] + STEP
    batched = np.full((12, len(QS)), 100.0)
    naive = predict_from(make_model("seasonal_naive_daily", QS), y, STEP, 12, QS, origin)
    got = ChoiceForecaster(ENSEMBLE, ["seasonal_naive_daily", GLOBAL]).predict(y, STEP, 12, QS, origin, batched)
    np.testing.assert_array_equal(got, np.mean([naive, batched], axis=0))


def test_a_choice_that_cannot_run_says_why():
    y = _daily()
    origin = y.index[-1] + STEP
    with pytest.raises(ValueError, match="global GBM is not available"):
        ChoiceForecaster(GLOBAL).predict(y, STEP, 12, QS, origin)
    with pytest.raises(ValueError, match="lists no members"):
        ChoiceForecaster(ENSEMBLE).predict(y, STEP, 12, QS, origin)


def test_a_stored_entry_becomes_a_choice_and_unknown_names_are_told_apart():
    c = Choice.from_entry("s", {"model": ENSEMBLE, "members": ["stl", GLOBAL], "shifts": [0, 0, 0.1, 0.2]}, QS, "r")
    assert c.runs() == ["stl", GLOBAL] and c.uses_global and c.shifts == [0.0, 0.0, 0.1, 0.2]
    with pytest.raises(ValueError, match="2 quantile shifts for 4 quantiles"):
        Choice.from_entry("s", {"model": "stl", "shifts": [0, 0]}, QS, "r")
    assert known_model(GLOBAL) and known_model(ENSEMBLE) and known_model("stl") and not known_model("seasonal_naive_hourly")


def test_the_registry_package_imports_no_forecasting_code():
    """It reads, writes and verifies; forecasting with a loaded version is predictor.pipeline.serving's.
    Imports inside functions count too (the old module imported forecasting lazily)."""
    folder = pathlib.Path(__file__).resolve().parents[2] / "predictor" / "registry"
    paths = sorted(folder.glob("*.py"))
    assert len(paths) >= 4
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            banned = [n for n in names if n == "predictor.pipeline" or n.startswith("predictor.pipeline.")]
            assert not banned, f"{path.name} imports {banned}"
