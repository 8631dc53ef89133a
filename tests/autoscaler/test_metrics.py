"""/metrics, /healthz, /readyz on one port, each test with a fresh registry."""
from __future__ import annotations

import ipaddress
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.metrics import HealthServer, Metrics
from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.loop import ServingLoop
from contracts.http_endpoint import parse_listen_address
from predictor.history import write_long
from tests.autoscaler.conftest import ROOT, fast_settings, StaticCluster, source_of
from tests.conftest import run_cli
from tidewise.cli import build_parser
from tidewise.commands.serve import _metrics_address


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
        # the median (HPA level), q0.85 (HPA floor), q0.9 (VPA), q0.95 (reclaim)
        assert quantiles == {"0.5", "0.85", "0.9", "0.95"}
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


# --metrics-address -------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:8080", ("127.0.0.1", 8080)), ("0.0.0.0:9100", ("0.0.0.0", 9100)), (":8080", ("0.0.0.0", 8080)),
    ("[::1]:8080", ("::1", 8080)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("localhost:65535", ("localhost", 65535)),
    ("[::]:8080", ("::", 8080)), ("serve-0.tidewise.svc:8080", ("serve-0.tidewise.svc", 8080)),
])
def test_metrics_address_parses(text, expected):
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize("text", ["8080", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", "::1:8080", "",
                                  "999.1.1.1:80", "10.0.0:80", "[127.0.0.1]:80", "-host:80", "a..b:80", "a b:80",
                                  "host_name:80", "[::g]:80", "127.0.0.1:-1", "x" * 64 + ":80"])
def test_a_bad_metrics_address_is_refused(text):
    with pytest.raises(ValueError):
        parse_listen_address(text)


def test_serve_listens_on_loopback_unless_told_otherwise():
    """A `--cluster-state` review on a laptop shows /metrics to no one else; deploy/serve.yaml says 0.0.0.0."""
    def address(*flags):
        return _metrics_address(build_parser().parse_args(["serve", *flags]))

    assert address() == ("127.0.0.1", 8080)
    assert address("--port", "9000") == ("127.0.0.1", 9000)
    assert address("--host", "0.0.0.0") == ("0.0.0.0", 8080)
    assert address("--host", "::", "--port", "0") == ("::", 0)
    assert address("--metrics-address", "0.0.0.0:8080") == ("0.0.0.0", 8080)
    assert HealthServer(Metrics(), port=0).host == "127.0.0.1"


def test_head_answers_as_get_without_a_body():
    server = HealthServer(Metrics(), "127.0.0.1", 0).start()
    try:
        for path, code in (("/metrics", 200), ("/healthz", 200), ("/nope", 404)):
            req = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", method="HEAD")
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    got, headers, body = r.status, r.headers, r.read()
            except urllib.error.HTTPError as e:
                got, headers, body = e.code, e.headers, e.read()
            assert got == code and body == b"", path
            assert int(headers["Content-Length"]) == len(get(f"http://127.0.0.1:{server.port}{path}")[1].encode()) \
                or path == "/metrics"  # the exposition's own timings move between two scrapes
            assert headers["Content-Type"]
    finally:
        server.stop()


def listening(port: int) -> list[str]:
    """Local addresses of the sockets LISTENing on `port`, from the kernel's own tables."""
    out = []
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        try:
            lines = open(table).read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:  # 0A: TCP_LISTEN
                raw = bytes.fromhex(addr)
                # the kernel prints each 32-bit word in host (little-endian) order
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                out.append(str(ipaddress.ip_address(words)))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def serve_inputs(small, objects, tmp_path):
    history = tmp_path / "history.parquet"
    write_long(small[1], str(history))
    state = tmp_path / "cluster-state.yaml"
    state.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    return ["serve", "--cluster-state", str(state), "--source", "file", "--input", str(history),
            "--model", "seasonal_naive_daily", "--interval", "1h"]


def test_metrics_address_loopback_listens_on_loopback_only(serve_inputs):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tidewise", *serve_inputs, "--metrics-address", f"127.0.0.1:{port}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        up = False
        for _ in range(600):  # until the process listens (or dies): a readiness wait, not a timing assertion
            if proc.poll() is not None:
                break
            try:
                up = get(f"http://127.0.0.1:{port}/healthz")[0] == 200
            except OSError:
                up = False
            if up:
                break
            time.sleep(0.2)
        assert up, proc.communicate(timeout=30)[1] if proc.poll() is not None else "never answered"
        assert listening(port) == ["127.0.0.1"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"metrics on 127.0.0.1:{port}" in err


def test_every_address_when_asked():
    server = HealthServer(Metrics(), "0.0.0.0", 0).start()
    try:
        assert listening(server.port) == ["0.0.0.0"]
    finally:
        server.stop()


@pytest.mark.parametrize("extra,message", [
    (["--metrics-address", "localhost"], "--metrics-address 'localhost' is not HOST:PORT"),
    (["--metrics-address", "127.0.0.1:9", "--port", "9"], "--metrics-address HOST:PORT replaces --host and --port"),
    (["--metrics-address", "192.0.2.1:9"], "--metrics-address 192.0.2.1:9: cannot listen"),
    (["--metrics-address", "999.1.1.1:80"], "--metrics-address '999.1.1.1:80': '999.1.1.1' is not an IPv4 or IPv6 "
                                            "address or a host name (for example 127.0.0.1:8080"),
    (["--metrics-address", "127.0.0.1:65536"], "--metrics-address '127.0.0.1:65536' is not HOST:PORT with a port 0-65535"),
    (["--host", "999.1.1.1"], "--host/--port '999.1.1.1:8080': '999.1.1.1' is not an IPv4 or IPv6 address"),
    (["--port", "70000"], "--host/--port '127.0.0.1:70000' is not HOST:PORT with a port 0-65535"),
])
def test_a_bad_metrics_address_is_one_line_and_exit_2(serve_inputs, extra, message):
    # a malformed address is refused even where --once would never listen
    proc = run_cli(*serve_inputs, *extra, *([] if "cannot listen" in message else ["--once"]))
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
