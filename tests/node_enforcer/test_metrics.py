"""The node agent's /metrics (issue 25): a real `tidewise enforce` process scraped over HTTP, and the
batch usage and error counts of the agent on a real cgroup v2 tree."""
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from contracts.errors import TidewiseError
from node_enforcer.agent import Agent
from node_enforcer.enforce.cgroups import V2Driver, pod_cgroup
from node_enforcer.enforce.evictor import Evictor
from node_enforcer.enforce.files import DryRunFiles
from node_enforcer.metrics import STAGES, EnforcerMetrics, MetricsServer, eviction_reason
from node_enforcer.model.pressure import Pressure
from node_enforcer.policy.eviction import EvictionSettings
from node_enforcer.settings import EnforcerSettings
from tests.node_enforcer.conftest import MIXED_PODS, RECLAIM_PLAN, ROOT, TWO_SOCKET, make_pod
from tests.node_enforcer.test_cgroups import v2_tree

NODE = "fixture-node"
BATCH = ("0a000000-0000-4000-8000-000000000006", "0a000000-0000-4000-8000-000000000007")  # spark-exec-1, -2
NAMES = ("tidewise_enforcer_runs_total", "tidewise_enforcer_errors_total", "tidewise_enforcer_evictions_total",
         "tidewise_enforcer_last_success_timestamp_seconds", "tidewise_enforcer_reclaimable_cores",
         "tidewise_enforcer_batch_usage_cores", "tidewise_enforcer_reclaimable_memory_bytes",
         "tidewise_enforcer_batch_usage_memory_bytes")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted({"node": NODE, **labels}.items()))))


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape_until(proc, port, check, seconds=60):
    deadline = time.monotonic() + seconds
    while True:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        try:
            text = get(port, "/metrics")[1]
            if check(text):
                return text
        except OSError:
            pass  # not listening yet
        assert time.monotonic() < deadline, "the metrics never showed what was waited for"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def agent_process(tmp_path_factory):
    """One dry-run agent looping every 0.2 s on a copy of the 2-socket tree, its batch pods with
    usage files; yields (process, port, pods file, memory in use by the batch pods)."""
    tmp = tmp_path_factory.mktemp("enforcer-metrics")
    cg = tmp / "cgroup"
    shutil.copytree(os.path.join(TWO_SOCKET, "fs", "cgroup"), cg)
    memory = 0
    for i, uid in enumerate(BATCH):
        d = cg / "kubepods" / "besteffort" / f"pod{uid}"
        (d / "cpu.stat").write_text(f"usage_usec {1_000_000 * (i + 1)}\nuser_usec 0\nsystem_usec 0\n")
        (d / "memory.current").write_text(f"{(i + 1) * 2**30}\n")
        memory += (i + 1) * 2**30
    pods = tmp / "pods.yaml"
    shutil.copy(MIXED_PODS, pods)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidewise", "enforce", "--dry-run", "--node", NODE, "--pods-from", "file",
         "--pods", str(pods), "--sysfs-root", TWO_SOCKET, "--cgroup-root", str(cg), "--reclaim-plan", RECLAIM_PLAN,
         "--no-eviction", "--interval", "0.2", "--metrics-port", str(port)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc, port, pods, memory
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def test_the_agent_process_exports_every_series_and_counts_its_passes(agent_process):
    proc, port, _, memory = agent_process
    first = scrape_until(proc, port, lambda t: (value(t, "tidewise_enforcer_runs_total") or 0) >= 1)
    runs = value(first, "tidewise_enforcer_runs_total")
    later = scrape_until(proc, port, lambda t: value(t, "tidewise_enforcer_runs_total") >= runs + 2)
    names = {name for name, _ in samples(later)}
    assert set(NAMES) <= names, set(NAMES) - names
    for stage in STAGES:  # every stage's series exists from the start, at 0 on a healthy node
        assert value(later, "tidewise_enforcer_errors_total", stage=stage) == 0
    assert value(later, "tidewise_enforcer_evictions_total", reason="memory") == 0
    assert value(later, "tidewise_enforcer_reclaimable_cores") == 2  # the reclaim pool 7,23
    assert value(later, "tidewise_enforcer_reclaimable_memory_bytes") == 16 * 2**30  # the plan's
    assert value(later, "tidewise_enforcer_batch_usage_memory_bytes") == memory
    assert value(later, "tidewise_enforcer_batch_usage_cores") == 0  # the counters did not move
    assert abs(value(later, "tidewise_enforcer_last_success_timestamp_seconds") - time.time()) < 60
    assert get(port, "/healthz") == (200, "ok\n")


def test_a_failing_pod_source_counts_collect_errors_and_stops_the_successes(agent_process):
    proc, port, pods, _ = agent_process
    scrape_until(proc, port, lambda t: (value(t, "tidewise_enforcer_runs_total") or 0) >= 1)
    os.remove(pods)  # every pass from now on fails to read the pods
    text = scrape_until(proc, port, lambda t: value(t, "tidewise_enforcer_errors_total", stage="collect") >= 2)
    success = value(text, "tidewise_enforcer_last_success_timestamp_seconds")
    again = scrape_until(proc, port, lambda t: value(t, "tidewise_enforcer_errors_total", stage="collect") >= 3)
    assert value(again, "tidewise_enforcer_last_success_timestamp_seconds") == success
    assert value(again, "tidewise_enforcer_errors_total", stage="enforce") == 0
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err[-2000:]
    assert "metrics on 127.0.0.1:" in err
    with pytest.raises(OSError):
        get(port, "/metrics")  # the port is closed with the agent


def test_metrics_flags_are_checked_before_anything_runs(tmp_path, capsys):
    from tidewise.cli import main

    base = ["enforce", "--node", NODE, "--pods-from", "file", "--pods", MIXED_PODS, "--sysfs-root", TWO_SOCKET,
            "--cgroup-root", str(tmp_path), "--no-eviction", "--dry-run"]
    assert main([*base, "--metrics-port", "0"]) == 2
    assert "--metrics-port 0: give a port 1-65535" in capsys.readouterr().err
    assert main([*base, "--once", "--metrics-port", "9107"]) == 2
    assert "--once exits after one pass" in capsys.readouterr().err
    assert main([*base, "--metrics-port", str(free_port()), "--metrics-address", "192.0.2.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--metrics-address 192.0.2.1" in err[0] and "Traceback" not in err[0]
    for bad in ("999.1.1.1", "host_name", "10.0.0"):  # not an address: refused before anything runs
        assert main([*base, "--metrics-port", "9107", "--metrics-address", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"tidewise enforce: error: --metrics-address {bad!r} is not an IPv4 or IPv6 address or a host name: "
                       "give an address of this host, for example 127.0.0.1 or 0.0.0.0"], err
    from tidewise.cli import build_parser

    assert build_parser().parse_args(base).metrics_address == "127.0.0.1"  # loopback unless told otherwise


# in process: the batch CPU rate, evictions and errors by stage ---------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_batch_cores_come_from_two_passes_of_the_cgroup_counters(tmp_path, two_socket):
    pods = [make_pod("web", cpu="2", k8s_qos="Burstable"), make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")]
    cg = str(tmp_path / "cg")
    v2_tree(cg, pods)
    stat = os.path.join(cg, pod_cgroup("cgroupfs", "BestEffort", pods[1].uid), "cpu.stat")
    web_stat = os.path.join(cg, pod_cgroup("cgroupfs", "Burstable", pods[0].uid), "cpu.stat")
    clock = Clock()
    m = EnforcerMetrics("n1", CollectorRegistry(), monotonic=clock)
    agent = Agent(EnforcerSettings(node="n1", checkpoint=""), two_socket, lambda: pods, V2Driver(cg), DryRunFiles(),
                  metrics=m)
    for usec, web in ((5_000_000, 0), (20_000_000, 90_000_000)):  # batch: 15 s of CPU in 10 s; web is not batch
        with open(stat, "w") as fh:
            fh.write(f"usage_usec {usec}\n")
        with open(web_stat, "w") as fh:
            fh.write(f"usage_usec {web}\n")
        res = agent.reconcile_once()
        assert res.error is None and "usage" in res.timings
        clock.t += 10
    assert m.batch_usage_cores.labels("n1")._value.get() == pytest.approx(1.5)
    assert m.runs.labels("n1")._value.get() == 2


def test_errors_by_stage_and_evictions_by_reason(tmp_path, two_socket):
    pods = [make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")]
    cg = str(tmp_path / "cg")
    v2_tree(cg, pods, skip=("cpu.max",))  # one file the kernel does not offer: reported, not an error
    m = EnforcerMetrics("n1", CollectorRegistry())
    source = {"fail": False}

    def list_pods():
        if source["fail"]:
            raise TidewiseError("kubelet unreachable")
        return pods

    evictor = Evictor(EvictionSettings(dry_run=True), api=None)
    agent = Agent(EnforcerSettings(node="n1", checkpoint=""), two_socket, list_pods, V2Driver(cg), DryRunFiles(),
                  evictor=evictor, read_pressure_fn=lambda: Pressure(64 * 2**30, 2**20, 0.0), metrics=m)
    res = agent.reconcile_once()
    assert res.evictions and res.evictions[0].reason.startswith("MemAvailable")
    assert m.evictions.labels("n1", "memory")._value.get() == 1  # logged only, without an API: still counted
    source["fail"] = True
    assert agent.reconcile_once().error_stage == "collect"
    assert m.errors.labels("n1", "collect")._value.get() == 1 and m.errors.labels("n1", "enforce")._value.get() == 0
    assert m.runs.labels("n1")._value.get() == 2
    assert eviction_reason("memory PSI some avg10 40.0% >= 20.0%; ...") == "pressure"


def test_a_pass_that_raises_counts_an_error_of_its_stage(tmp_path, two_socket):
    pods = [make_pod("web", cpu="2", k8s_qos="Burstable")]
    cg = str(tmp_path / "cg")
    v2_tree(cg, pods)
    m = EnforcerMetrics("n1", CollectorRegistry())

    def broken_plan():
        raise RuntimeError("a bug in the plan reader")

    agent = Agent(EnforcerSettings(node="n1", checkpoint=""), two_socket, lambda: pods, V2Driver(cg), DryRunFiles(),
                  reclaim=broken_plan, metrics=m)
    with pytest.raises(RuntimeError):
        agent.reconcile_once()
    assert m.errors.labels("n1", "collect")._value.get() == 1 and m.runs.labels("n1")._value.get() == 1


def test_healthz_fails_when_no_pass_ended_for_too_long():
    clock = Clock()
    m = EnforcerMetrics("n1", CollectorRegistry(), interval_seconds=5, monotonic=clock)
    server = MetricsServer(m, "127.0.0.1", 0).start()
    try:
        assert get(server.port, "/healthz")[0] == 200
        clock.t += 121  # past max(120 s, 4 intervals)
        assert get(server.port, "/healthz") == (503, "no pass ended recently\n")
        assert get(server.port, "/nothing")[0] == 404
    finally:
        server.stop()


def test_the_daemonset_serves_the_metrics_on_its_declared_port():
    import yaml

    from tidewise.cli import build_parser

    with open(os.path.join(ROOT, "deploy", "enforcer-daemonset.yaml"), encoding="utf-8") as fh:
        ds = next(d for d in yaml.safe_load_all(fh) if d and d["kind"] == "DaemonSet")
    template = ds["spec"]["template"]
    c = template["spec"]["containers"][0]
    args = build_parser().parse_args([a.replace("$(NODE_NAME)", "node-1") for a in c["args"]])
    assert args.metrics_port == 9107 and args.metrics_address == "0.0.0.0"
    assert {"name": "metrics", "containerPort": args.metrics_port} in c["ports"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == str(args.metrics_port)
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
