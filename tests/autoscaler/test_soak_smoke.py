"""The soak benchmark (benchmarks/soak.py) at a tiny scale, so that it does not rot: serve against a
real Prometheus that is killed and restarted and the API fake with every kind of fault, then no
write lost or duplicated. Also the duplicate counter itself, on answers made up here."""
from __future__ import annotations

import json
import os

import pytest

from benchmarks.soak_faults import Answer, FaultSchedule, duplicates
from tests.integration.prometheus_server import require


def test_duplicate_count_tells_a_rewrite_from_a_retry():
    a = [Answer(1, "PATCH", "/api/v1/nodes/n1/status", 200, "x"),
         Answer(2, "PATCH", "/api/v1/nodes/n1", 200, "m"),
         Answer(3, "PATCH", "/api/v1/nodes/n1/status", 500, "y"),  # the node's status write failed ...
         Answer(4, "PATCH", "/api/v1/nodes/n1", 200, "m"),  # ... so its metadata is sent again: a retry
         Answer(5, "PATCH", "/api/v1/nodes/n1/status", 200, "y"),
         Answer(6, "PATCH", "/api/v1/nodes/n1/status", 200, "y")]  # the same body again, nothing failed
    got = duplicates(a)
    assert got["duplicates"] == 1 and got["duplicate_examples"] == [{"path": "/api/v1/nodes/n1/status", "seq": 6}]
    assert got["successful_writes"] == 5 and got["distinct_bodies"] == 3 and got["failed_answers"] == 1


def test_fault_schedule_is_seeded_and_leaves_the_ends_quiet():
    one, again = FaultSchedule.make(1440, 4), FaultSchedule.make(1440, 4)
    assert one.windows() == again.windows() != FaultSchedule.make(1440, 5).windows()
    kinds = {f.kind for f in one.faults}
    assert kinds == {"prometheus", "409", "429", "5xx", "slow", "watch_cut", "watch_410"}
    assert all(one.quiet_head <= f.start and f.end <= 1440 - one.quiet_tail for f in one.faults)
    assert sum(f.kind == "prometheus" for f in one.faults) == 6


def test_the_rss_check_reads_the_trend_not_the_peak():
    """A day of runs at ~400 MiB: one run's spike after an outage (the frames of a full fetch, freed
    again) is flat; a steady climb of 20% is a leak, though its peak is only 20% over its start."""
    import numpy as np

    from benchmarks.soak import rss_figures

    minutes = list(range(1440))
    steady = 400 + np.random.default_rng(3).normal(0, 6, len(minutes))  # the saw-tooth of the runs' frames
    spike = steady.copy()
    spike[700:702] = 640  # 60% over, two runs
    leak = steady + np.linspace(0, 80, len(minutes))
    flat = rss_figures(minutes, list(spike), warmup=60)
    assert flat["flat_within_10pct"] and abs(flat["growth_after_warmup"]) < 0.01 and flat["peak_over_first"] > 0.5
    grows = rss_figures(minutes, list(leak), warmup=60)
    assert not grows["flat_within_10pct"] and 0.15 < grows["growth_after_warmup"] < 0.25
    assert grows["trend_mib_per_hour"] == pytest.approx(80 / 24, rel=0.1)
    assert not rss_figures(minutes[:30], list(steady[:30]), warmup=60)["flat_within_10pct"]  # nothing after warm-up


def test_tiny_soak_applies_every_fault_and_loses_or_duplicates_no_write(tmp_path):
    require("prometheus")
    from benchmarks.soak import run_soak

    fig = run_soak(20, 3, 30, seed=3, out_dir=str(tmp_path), progress_every=0, log=lambda s: None)
    faults, runs, writes = fig["faults"], fig["runs"], fig["writes"]
    # every fault of the schedule reached serve: API answers refused or slowed, watches cut, Prometheus killed
    assert set(faults["scheduled"]) == {"prometheus", "409", "429", "5xx", "slow", "watch_cut", "watch_410"}
    assert {"409", "429", "5xx", "slow", "watch_cut", "watch_410"} <= {k for k, n in faults["hit"].items() if n > 0}
    assert faults["prometheus_kills"] == faults["prometheus_restarts"] == 1
    assert runs["frozen_by_step"].get("fetch", 0) >= 1 and runs["recoveries"] >= 1
    assert writes["failed_answers"] > 0 and set(runs["write_results"]) - {"written"}  # some writes did fail ...
    audit = writes["audit"]
    assert audit["checked"] and audit["decisions"] > 0
    assert audit["lost"] == 0, audit["lost_examples"]  # ... and every last decision is in the cluster now
    assert writes["duplicates"] == 0, writes["duplicate_examples"]
    assert writes["successful_writes"] > 0
    assert fig["times"]["cold_seconds"] > 0 and fig["times"]["warm_runs"] > 0
    assert os.path.getsize(tmp_path / "soak.png") > 0
    saved = json.loads((tmp_path / "soak.json").read_text())
    assert len(saved["timeline"]["rss_mib"]) == runs["ticks"]


def test_audit_finds_a_decision_the_sink_reported_written_but_never_sent(objects, history, api_factory):
    """The soak's "no write lost" check can fail: a sink that says written for nodes and sends nothing."""
    from autoscaler.output.sinks import WRITTEN, ApiSink, WriteResult
    from autoscaler.input.cluster import ApiCluster
    from autoscaler.routines.loop import OK, ServingLoop
    from benchmarks.soak_serve import audit
    from tests.autoscaler.conftest import fast_settings, source_of

    class LosesNodes(ApiSink):
        def write(self, change):
            return WriteResult(change.key, WRITTEN, "") if change.kind == "Node" else super().write(change)

    for sink_kind, lost in ((ApiSink, 0), (LosesNodes, 2)):
        fake, kube = api_factory(objects)
        settings = fast_settings()
        settings.loop.apply = True
        loop = ServingLoop(settings, source_of(history), ApiCluster(kube), sink_kind(kube))
        assert loop.run_once().outcome == OK
        got = audit(loop, kube)
        assert got["checked"] and got["decisions"] > 0
        assert got["lost"] == lost, got["lost_examples"]
        assert all(x["object"].startswith("Node/") for x in got["lost_examples"])


def test_make_bench_keeps_the_soak_section_it_does_not_run(tmp_path, monkeypatch):
    import types

    import benchmarks.run as bench

    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# Tidewise benchmarks\n\n<!-- section: forecast -->\nold forecast\n\n"
                   "<!-- section: soak -->\n## Soak (issue 22)\n\nfigures\n")
    section = types.SimpleNamespace(run=lambda quick: "## Forecast\n\nnew forecast\n")
    monkeypatch.setattr(bench.importlib, "import_module", lambda name: section)
    assert bench.main(["--only", "forecast", "--out", str(out)]) == 0
    text = out.read_text()
    assert "new forecast" in text and "old forecast" not in text
    assert "<!-- section: soak -->\n## Soak (issue 22)\n\nfigures\n" in text
