"""`tidewise serve` end to end: the issue's "done when" command on the demo's outputs, and the loop
against a real Prometheus that stops in the middle of the run."""
from __future__ import annotations

import json
import os
import shutil

import pandas as pd
import pytest
import yaml

from studies.demo import cluster_objects, write_demo_outputs
from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.loop import FROZEN, OK, ServingLoop
from predictor.history import write_long
from predictor.sources.prometheus import PrometheusSettings, PrometheusSource
from predictor.sources.synthetic import generate_cluster
from tests.autoscaler.conftest import fast_settings, StaticCluster, validate_object
from tests.conftest import run_cli, write_kubeconfig
from tests.integration.prometheus_server import PrometheusServer


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    c = generate_cluster(seed=5, workloads=6, namespaces=2, nodes=2, days=9, end="2026-11-02")
    frame = c.history()
    write_long(frame, str(d / "history.parquet"))
    info = write_demo_outputs(c, frame, str(d), settings=fast_settings())
    return d, c, info


def load_dir(out):
    found = {}
    for root, _, files in os.walk(out):
        for f in files:
            if f.endswith(".yaml"):
                with open(os.path.join(root, f)) as fh:
                    o = yaml.safe_load(fh)
                found[os.path.relpath(os.path.join(root, f), out)] = o
    return found


def test_demo_outputs_hold_the_cluster_and_its_recommendations(demo_dir):
    d, c, info = demo_dir
    assert info["outcome"] == OK
    with open(d / "cluster-state.yaml") as fh:
        state = yaml.safe_load(fh)
    kinds = [o["kind"] for o in state["items"]]
    assert {"VerticalPodAutoscaler", "HorizontalPodAutoscaler", "Node", "Pod"} <= set(kinds)
    assert {"Deployment", "StatefulSet"} & set(kinds)
    for o in state["items"]:
        validate_object(o)
        if o["kind"] == "VerticalPodAutoscaler":
            assert o["spec"]["recommenders"] == [{"name": "tidewise"}]
        if o["kind"] == "HorizontalPodAutoscaler":
            assert o["apiVersion"] == "autoscaling/v2"
    recs = load_dir(d / "recommendations")
    assert recs and len(recs) == len(info["files"])


def test_serve_once_offline_writes_one_valid_yaml_per_changed_object(demo_dir, tmp_path):
    d, c, _ = demo_dir
    out = tmp_path / "recs"
    r = run_cli("serve", "--once", "--cluster-state", str(d / "cluster-state.yaml"), "--source", "file",
                "--input", str(d / "history.parquet"), "--sink", "file", "--out", str(out),
                "--report", str(tmp_path / "report.json"))
    assert r.returncode == 0, r.stderr
    objs = load_dir(out)
    by_kind: dict[str, list] = {}
    for o in objs.values():
        validate_object(o)
        by_kind.setdefault(o["kind"], []).append(o)
    assert len(by_kind["VerticalPodAutoscaler"]) == len(c.workloads)
    for v in by_kind["VerticalPodAutoscaler"]:
        assert v["status"]["recommendation"]["containerRecommendations"]
    assert len(by_kind["Node"]) == len(c.nodes)
    for n in by_kind["Node"]:
        assert int(n["status"]["allocatable"]["resource.katalyst.kubewharf.io/reclaimed_millicpu"]) >= 0
        assert int(n["status"]["allocatable"]["resource.katalyst.kubewharf.io/reclaimed_memory"]) >= 0
    for h in by_kind.get("HorizontalPodAutoscaler", []):
        assert h["spec"]["minReplicas"] >= int(h["metadata"]["annotations"]["tidewise.io/user-min-replicas"])
    assert "VPA" in r.stderr and "written" in r.stderr
    # progress off a terminal: a line per step of the run (each step a tenth of it or more), then the end
    report_steps = [t["name"] for t in json.loads((tmp_path / "report.json").read_text())["steps"]]
    told = [ln.split(" (")[0] for ln in r.stderr.splitlines() if ln.startswith("serving loop, once: steps: ")]
    n = len(report_steps) - 1  # the metrics step is timed after the run's steps
    assert told[0] == f"serving loop, once: steps: {n} ..." and told[1:n + 1] == \
        [f"serving loop, once: steps: {i}/{n}" for i in range(1, n + 1)], r.stderr
    # the report names the reason of each number
    rep = json.load(open(tmp_path / "report.json"))
    assert rep["outcome"] == "ok" and all(rep["vpa"].values())


@pytest.mark.parametrize("args,message", [
    (["--sink", "file"], "--sink file needs --out"),
    (["--source", "file", "--sink", "file", "--out", "x"], "--source file needs --input"),
    (["--source", "file", "--input", "nope.parquet", "--sink", "file", "--out", "x"], "no such file"),
])
def test_serve_usage_errors_are_one_clear_line(demo_dir, args, message):
    d, _, _ = demo_dir
    r = run_cli("serve", "--once", "--cluster-state", str(d / "cluster-state.yaml"), *args)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr


def test_serve_without_a_cluster_fails_clearly_and_writes_nothing(demo_dir, tmp_path):
    d, _, _ = demo_dir
    env_home = tmp_path / "home"
    env_home.mkdir()
    r = run_cli("serve", "--once", "--source", "file", "--input", str(d / "history.parquet"),
                "--kubeconfig", str(tmp_path / "missing-kubeconfig"))
    assert r.returncode == 1
    assert "no Kubernetes configuration" in r.stderr and "Traceback" not in r.stderr


def test_prometheus_stopped_mid_run_freezes_and_writes_nothing(backfilled_cluster, tmp_path):
    cluster, data = backfilled_cluster
    own = tmp_path / "data"
    shutil.copytree(data, own, ignore=shutil.ignore_patterns("lock"))
    server = PrometheusServer(str(own)).start()
    try:
        source = PrometheusSource(PrometheusSettings(url=server.url, retries=0, timeout_seconds=5))
        now = cluster.end - pd.Timedelta("5min")  # the backfilled history ends at the cluster's end
        sink = DryRunSink()
        loop = ServingLoop(fast_settings(), source, StaticCluster(cluster_objects(cluster)), sink,
                           clock=lambda: now)
        good = loop.run_once()
        assert good.outcome == OK, good.reason
        assert good.vpa and good.reclaim and not [k for k in good.skipped if k.startswith("VerticalPod")]
        n = len(sink.changes)
        assert n > 0
        server.stop()
        bad = loop.run_once()
        assert bad.outcome == FROZEN and bad.reason.startswith("fetch:")
        assert bad.changes == [] and len(sink.changes) == n
    finally:
        server.stop()


def test_serve_loop_exposes_health_readiness_and_metrics_then_stops_on_sigterm(demo_dir, tmp_path):
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    from tests.integration.prometheus_server import free_port

    d, c, _ = demo_dir
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tidewise", "serve", "--cluster-state", str(d / "cluster-state.yaml"),
                             "--source", "file", "--input", str(d / "history.parquet"), "--sink", "file",
                             "--out", str(tmp_path / "recs"), "--interval", "2s", "--model", "seasonal_naive_daily",
                             "--port", str(port), "--host", "127.0.0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        body = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and body is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as m:
                            body = m.read().decode()
            except OSError:
                assert proc.poll() is None, proc.communicate()[1]
                time.sleep(0.5)
        assert body is not None, "never ready"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            assert r.status == 200
        assert 'tidewise_runs_total{outcome="ok"}' in body
        assert "tidewise_predicted_replicas{" in body and 'quantile="0.9"' in body
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert (tmp_path / "recs" / "decisions.json").exists()


def test_serve_once_against_the_api_is_dry_run_unless_apply(demo_dir, tmp_path):
    from testsupport.kube_fake import FakeApiServer

    d, c, _ = demo_dir
    with open(d / "cluster-state.yaml") as fh:
        objects = yaml.safe_load(fh)["items"]
    fake = FakeApiServer(objects).start()
    try:
        kc = write_kubeconfig(tmp_path / "kubeconfig", fake.url)
        common = ["serve", "--once", "--kubeconfig", kc, "--source", "file", "--input", str(d / "history.parquet"),
                  "--model", "seasonal_naive_daily"]
        dry = run_cli(*common)
        assert dry.returncode == 0, dry.stderr
        assert "dry-run" in dry.stderr and fake.writes() == []  # read the cluster, wrote nothing
        applied = run_cli(*common, "--apply")
        assert applied.returncode == 0, applied.stderr
        patched = {r.path for r in fake.writes("PATCH")}
        assert any("verticalpodautoscalers" in p and p.endswith("/status") for p in patched)
        assert any(p.startswith("/api/v1/nodes/") for p in patched)
        for o in fake.objects.values():
            if o["kind"] in ("VerticalPodAutoscaler", "HorizontalPodAutoscaler", "Node"):
                validate_object(o)
    finally:
        fake.stop()
