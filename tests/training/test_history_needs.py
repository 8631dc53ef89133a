"""Training records the history each chosen model needs and never picks one serving cannot feed;
the report says which model actually ran for each series, and why when it is not the stored one."""
import datetime as dt

import pandas as pd

from predictor.history import History
from predictor.registry import load_recent, load_version, write_version
from tests.predictor.test_history_needs import weekly_series
from training.fleet_report import write_registry_report
from training.pipeline import TrainSettings, recent_frame, train

from .conftest import FAST_GLOBAL, NO_DECISION_TIME

QS = (0.5, 0.9, 0.95, 0.99)
STEP = pd.Timedelta("1h")


def test_train_records_needs_and_stays_within_the_serving_window(tmp_path):
    hist = History({f"ns/Deployment/w{i}/app/cpu": weekly_series(23, step="1h", seed=i) for i in range(2)}, STEP)
    settings = TrainSettings(folds=2, global_params=FAST_GLOBAL, decision_time=NO_DECISION_TIME)
    train(hist, str(tmp_path), settings)
    reg = load_version(str(tmp_path))
    assert reg.manifest["serving_history_seconds"] == 8 * 86400
    for e in reg.series.values():
        assert e["model"] != "seasonal_naive_weekly" and "seasonal_naive_weekly" not in e.get("scores", {})
        assert 0 < e["history_needed_seconds"] <= 8 * 86400
    assert reg.manifest["history_needed_seconds"] == max(e["history_needed_seconds"] for e in reg.series.values())
    # the stored history spans the serving window, so the report feeds each model as serving does
    recent = load_recent(reg)
    span = max(y.index[-1] - y.index[0] for y in recent.series.values())
    assert pd.Timedelta(days=7) < span <= pd.Timedelta(days=8)
    # given a longer serving window, the weekly model is a candidate again
    wide = tmp_path / "wide"
    train(hist, str(wide), TrainSettings(folds=2, global_params=FAST_GLOBAL, decision_time=NO_DECISION_TIME, serving_history=pd.Timedelta(days=21)))
    assert any("seasonal_naive_weekly" in e.get("scores", {}) for e in load_version(str(wide)).series.values())


def test_report_states_the_model_that_ran_and_why(tmp_path):
    """A version that stores a weekly choice (trained for a longer serving window) reported from
    its 8-day stored history: the table says weekly was chosen, daily ran, and why."""
    key = "ns/Deployment/w/app/cpu"
    hist = History({key: weekly_series(20, step="15min")}, pd.Timedelta("15min"))
    write_version(str(tmp_path), quantiles=QS, step_seconds=900,
                  data_window=(hist.start.isoformat(), hist.end.isoformat()),
                  series={key: {"model": "seasonal_naive_weekly", "shifts": [0.0] * 4}},
                  recent=recent_frame(hist), extra={"recent_step_seconds": 900},
                  now=dt.datetime(2024, 7, 21, tzinfo=dt.timezone.utc))
    out = tmp_path / "r.html"
    summary = write_registry_report(str(tmp_path), str(out), horizon=pd.Timedelta(days=1))
    assert "1 series ran a fallback model" in summary
    html = out.read_text()
    assert "model that ran" in html
    assert '<td class="k">seasonal_naive_weekly</td>' in html  # chosen
    assert "seasonal_naive_daily (fallback)" in html  # ran
    assert "seasonal_naive_weekly needs 14 days of history" in html
