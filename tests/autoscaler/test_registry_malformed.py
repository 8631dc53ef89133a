"""A running serving loop whose `latest` moves to a version that verifies but does not load — a
LightGBM model text edited by hand or truncated, a negative `recent_step_seconds`, a
`recent.parquet` that is not Parquet, checksums fixed up — refuses it on every run (the log line
and `tidewise_registry_refused_total{reason="load"}`) and keeps serving the last good version,
its decision-time models included; it neither dies nor freezes."""
from __future__ import annotations

import logging

import pandas as pd
import pytest
from prometheus_client import CollectorRegistry

pytest.importorskip("lightgbm")

from autoscaler.metrics import Metrics  # noqa: E402
from autoscaler.output.sinks import DryRunSink  # noqa: E402
from autoscaler.routines.loop import OK, ServingLoop  # noqa: E402
from tests.autoscaler.conftest import StaticCluster, fast_settings, source_of  # noqa: E402
from tests.autoscaler.test_decision_time_serving import quick  # noqa: E402
from tests.autoscaler.test_registry_metrics import refused  # noqa: E402
from tests.registry_damage import damage, write  # noqa: E402

STEP = pd.Timedelta("5min")


@pytest.fixture(scope="module")
def models(small):
    hist = small[2]
    return {"vpa": quick(12, "hour_peak").fit_many(hist.series, STEP), "hpa": quick(2).fit_many(hist.series, STEP)}


@pytest.mark.parametrize("how", ["split_feature 99999, tree_sizes left", "split_feature 99999", "truncated",
                                 "left child out of range", "NaN threshold", "negative recent_step_seconds",
                                 "recent.parquet not Parquet"])
def test_the_loop_keeps_the_last_good_version_when_latest_moves_to_one_that_does_not_load(
        objects, history, tmp_path, models, how, caplog):
    v1 = write(tmp_path, history, models, minute=0)
    metrics = Metrics(CollectorRegistry())
    s = fast_settings()
    s.loop.forecast_refresh = None
    loop = ServingLoop(s, source_of(history), StaticCluster(objects), DryRunSink(), registry_dir=str(tmp_path),
                       metrics=metrics)
    first = loop.run_once()
    assert first.outcome == OK and first.registry == v1
    assert first.hpa and all(d.reason.model.startswith("decision_time_lightgbm") for d in first.hpa)
    v2 = write(tmp_path, history, models, minute=5)  # `latest` moves to it
    damage(tmp_path / v2, how)
    caplog.set_level(logging.ERROR, logger="predictor.registry.loading")
    for run in (1, 2):  # `latest` keeps naming it: refused again on each run, never loaded
        rep = loop.run_once()
        assert rep.outcome == OK and rep.registry == v1, rep.reason
        assert rep.hpa and all(d.reason.model.startswith("decision_time_lightgbm") for d in rep.hpa)
        assert refused(metrics, "load") == run
    assert any(f"registry version {v2} refused" in r.getMessage() and "does not load" in r.getMessage()
               for r in caplog.records)
