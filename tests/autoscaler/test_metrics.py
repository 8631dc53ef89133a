"""/metrics, /healthz, /readyz on one port, each test with a fresh registry."""
from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from autoscaler.metrics import HealthServer, Metrics
from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.loop import ServingLoop
from tests.autoscaler.conftest import fast_settings, StaticCluster, source_of


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_health_and_readiness_on_one_port(objects, history):
    metrics = Metrics()
    loop = ServingLoop(fast_settings(), source_of(history), StaticCluster(objects), DryRunSink(), metrics=metrics)
    state = {"live": True}
    server = HealthServer(metrics, "127.0.0.1", 0, live=lambda: state["live"],
                          ready=lambda: metrics.last_run_ok is True).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert get(base + "/readyz")[0] == 503  # no run yet
        rep = loop.run_once()
        assert get(base + "/readyz")[0] == 200
        assert get(base + "/healthz")[0] == 200
        state["live"] = False
        assert get(base + "/healthz")[0] == 503
        assert get(base + "/nope")[0] == 404
        code, text = get(base + "/metrics")
        assert code == 200
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        replicas = {(s.labels["namespace"], s.labels["hpa"]): s.value for s in fams["tidewise_predicted_replicas"].samples}
        assert replicas == {(d.namespace, d.name): d.predicted for d in rep.hpa}
        quantiles = {s.labels["quantile"] for s in fams["tidewise_forecast"].samples}
        assert quantiles == {"0.5", "0.9", "0.95", "0.99"}
        reclaimed = {s.labels["node"]: s.value for s in fams["tidewise_reclaimed_millicpu"].samples}
        assert reclaimed == {p.node: p.reclaimed_millicpu for p in rep.reclaim}
        steps = {s.labels["step"] for s in fams["tidewise_step_seconds"].samples}
        # the metrics step times itself after the export, so it shows from the next run on
        assert steps == {"registry", "fetch", "cluster", "forecast", "recommend", "guardrails", "write"}
    finally:
        server.stop()


def test_each_metrics_object_has_its_own_registry():
    a, b = Metrics(), Metrics()
    a.min_replicas.labels("ns", "x").set(3)
    assert b"tidewise_min_replicas{" in a.exposition()
    assert b"tidewise_min_replicas{" not in b.exposition()
