"""The loop with a real `predictor.registry`: a version failing its checksum is refused, the last
good one keeps serving; with no good version left nothing is written."""
from __future__ import annotations

import datetime as dt
import os

import pytest

from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.loop import FROZEN, OK, ServingLoop
from tests.autoscaler.conftest import StaticCluster, fast_settings, source_of

registry = pytest.importorskip("predictor.registry")
QS = (0.5, 0.9, 0.95, 0.99)


def write(reg_dir, history, minute):
    series = {k: {"model": "seasonal_naive_daily", "shifts": [0.0] * len(QS)} for k in history.series}
    return registry.write_version(str(reg_dir), quantiles=QS, series=series, step_seconds=300,
                                  data_window=("2026-10-24T00:00:00Z", "2026-11-02T00:00:00Z"),
                                  now=dt.datetime(2026, 11, 2, 0, minute, tzinfo=dt.timezone.utc))


def tamper(reg_dir, version):
    with open(os.path.join(reg_dir, version, "series.json"), "a") as fh:
        fh.write(" ")


def loop_for(objects, history, reg_dir, sink):
    s = fast_settings()
    s.loop.forecast_refresh = None
    return ServingLoop(s, source_of(history), StaticCluster(objects), sink, registry_dir=str(reg_dir))


def test_a_new_version_failing_its_checksum_leaves_the_last_good_one_serving(objects, history, tmp_path):
    v1 = write(tmp_path, history, 0)
    sink = DryRunSink()
    loop = loop_for(objects, history, tmp_path, sink)
    first = loop.run_once()
    assert first.outcome == OK and first.registry == v1
    v2 = write(tmp_path, history, 5)
    tamper(tmp_path, v2)
    second = loop.run_once()
    assert second.outcome == OK and second.registry == v1
    assert all(f"@{v1}" in d.containers[0].resources[r].reason.model
               for d in second.vpa for r in d.containers[0].resources)


def test_with_no_verifiable_version_nothing_is_written(objects, history, tmp_path):
    v1 = write(tmp_path, history, 0)
    sink = DryRunSink()
    loop = loop_for(objects, history, tmp_path, sink)
    assert loop.run_once().outcome == OK
    n = len(sink.changes)
    tamper(tmp_path, v1)
    rep = loop.run_once()
    assert rep.outcome == FROZEN and "forecast" in rep.reason
    assert rep.changes == [] and len(sink.changes) == n
