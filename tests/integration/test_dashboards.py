"""The Grafana dashboards of deploy/grafana/ against real processes: `tidewise serve`, `tidewise
extender` and `tidewise enforce --metrics-port` run as a user runs them, a real Prometheus scrapes
them every second, and every panel's query is evaluated through Prometheus's HTTP API: it returns
data, and every metric it names is among the scraped series. The cAdvisor and kube-state-metrics
series the fleet and workload panels read (what serve itself fetches) are a synthetic cluster's
last day, backfilled with promtool up to now; serve serves that same cluster from its file.

One module-scoped stack; the static checks (valid JSON, unique ids, a unit on every panel, the
datasource variable) need none of it."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from typing import Any, Iterator

import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT, write_kubeconfig
from tests.integration.prometheus_server import PrometheusServer, backfill, free_port

GRAFANA = os.path.join(ROOT, "deploy", "grafana")
DASHBOARDS = sorted(f for f in os.listdir(GRAFANA) if f.endswith(".json"))  # every file; test_kustomize: all shipped
# Grafana unit ids the panels may use: cores (a custom suffix), bytes (IEC), a 0-1 share shown as
# percent, seconds, per-second rates of events and counts of replicas or objects
UNITS = {"suffix: cores", "bytes", "percentunit", "s", "ops", "reqps", "suffix: replicas", "suffix: objects"}
# what $__rate_interval becomes: Grafana's 4 scrapes of the backfilled series (one a minute) and more
# than enough for the live ones (one a second); their first samples are seconds old, rate() extrapolates
RATE_INTERVAL = "5m"
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                "offset", "inf", "nan"}


def load(name: str) -> dict[str, Any]:
    with open(os.path.join(GRAFANA, name)) as fh:
        return json.load(fh)


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in board["panels"]:
        yield p
        yield from p.get("panels", [])  # a collapsed row holds its panels


def data_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in panels(board) if p["type"] != "row"]


@pytest.mark.parametrize("name", DASHBOARDS)
def test_each_dashboard_is_grafana_json_with_units_and_a_datasource_variable(name):
    board = load(name)
    assert board["uid"].startswith("tidewise-") and board["title"].startswith("Tidewise")
    assert 36 <= board["schemaVersion"] <= 41
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), f"{name}: panel ids repeat"
    for p in data_panels(board):
        where = f"{name} panel {p['id']} {p['title']!r}"
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
        assert p["fieldConfig"]["defaults"].get("unit") in UNITS, where
        assert p["targets"] and all(t["expr"].strip() and t["datasource"]["uid"] == "${datasource}"
                                    for t in p["targets"]), where
        assert p.get("description"), where
        steps = p["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
        if p["type"] == "timeseries" and len(steps) > 1:  # a timeseries draws its thresholds only when told to
            assert p["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off", where
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"]["uid"] == "${datasource}" and v["query"]["query"].startswith("label_values(")


# --- the stack -----------------------------------------------------------------------------------

def _spawn(root, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """`python -m tidewise ARGS` with its output in root/<name>.log (a pipe nobody reads would fill
    and stall it)."""
    with open(root / f"{name}.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tidewise", *args], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    proc.log_path = str(root / f"{name}.log")  # type: ignore[attr-defined]
    return proc


def _tail(proc: subprocess.Popen) -> str:
    with open(proc.log_path) as fh:  # type: ignore[attr-defined]
        return fh.read()[-3000:]


def _wait_http(url: str, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[3]} exited with {proc.returncode}: {_tail(proc)}")
        assert time.monotonic() < deadline, f"{url} never answered"
        time.sleep(0.2)


def _cluster_files(root) -> tuple[str, str, str]:
    """A synthetic cluster whose history ends now: its OpenMetrics (cAdvisor/kube-state-metrics
    shaped, one sample a minute), the long history file serve reads and its cluster state."""
    from predictor.history import write_long
    from predictor.sources.synthetic import generate_cluster
    from studies.demo import cluster_objects

    end = pd.Timestamp.now(tz="UTC").ceil("1min")  # the last sample is under a minute old
    # four workloads: three scale out (an HPA; their VPAs size memory only), cron-reporter is sized in both
    cluster = generate_cluster(seed=3, workloads=4, namespaces=2, nodes=2, days=2, end=end, gaps=False)
    om, history, state = root / "cluster.om", root / "history.parquet", root / "cluster-state.yaml"
    with open(om, "w") as fh:
        cluster.write_openmetrics(fh, pd.Timedelta("1m"))
    write_long(cluster.history(), str(history))
    state.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": cluster_objects(cluster)}))
    return str(om), str(history), str(state)


def _start_enforcer(root, port: int) -> tuple[subprocess.Popen, Any]:
    """The node agent on the fixture node, its pods from the API fake, under memory pressure (so that
    it evicts, dry-run: the fake answers the Eviction API), every second."""
    from tests.node_enforcer.conftest import MIXED_PODS, RECLAIM_PLAN, TWO_SOCKET
    from testsupport.kube_fake import FakeApiServer

    with open(MIXED_PODS) as fh:
        fake = FakeApiServer.of_node(yaml.safe_load(fh)["items"]).start()
    cg, proc_root = root / "cgroup", root / "proc"
    shutil.copytree(os.path.join(TWO_SOCKET, "fs", "cgroup"), cg)
    (proc_root / "pressure").mkdir(parents=True)
    (proc_root / "meminfo").write_text("MemTotal: 1048576 kB\nMemAvailable: 524288 kB\n")
    (proc_root / "pressure" / "memory").write_text("some avg10=90.00 avg60=50.00 avg300=10.00 total=1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}  # never in-cluster config
    proc = _spawn(root, "enforce", [
        "enforce", "--node", "fixture-node", "--pods-from", "api", "--reclaim-plan", RECLAIM_PLAN,
        "--kubeconfig", write_kubeconfig(root / "kubeconfig", fake.url), "--sysfs-root", TWO_SOCKET,
        "--cgroup-root", str(cg), "--proc-root", str(proc_root), "--checkpoint", str(root / "ck.json"),
        "--interval", "1", "--metrics-port", str(port)], env=env)
    return proc, fake


def _reload_scraping(server: PrometheusServer, targets: dict[str, int]) -> None:
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                                 for job, port in targets.items()]}
    with open(os.path.join(server.data_dir, "..", "prometheus.yml"), "w") as fh:
        yaml.safe_dump(config, fh)
    req = urllib.request.Request(f"{server.url}/-/reload", method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def _extender_calls(url: str, now) -> None:
    from tests.extender.test_extender import fixture, post
    from tests.extender.test_extender_cli import payload_at

    code, _ = post(url, "filter", fixture("filter-reclaimed-names.json"))
    assert code == 200
    code, _ = post(url, "prioritize", payload_at(now, "prioritize-online-nodes.json"))
    assert code == 200
    code, _ = post(url, "filter", b"{not json")  # what the errors panel counts
    assert code == 400


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class Prom:
    def __init__(self, url: str):
        self.url = url

    def get(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.get("/api/v1/query", query=expr)["result"]

    def names(self) -> set[str]:
        return set(self.get("/api/v1/label/__name__/values"))


def _wait_for(prom: Prom, exprs: list[str], seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not all(prom.query(e) for e in exprs):
        assert time.monotonic() < deadline, [e for e in exprs if not prom.query(e)]
        time.sleep(0.5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Prometheus (backfilled cluster history up to now) scraping serve, the extender and the node
    agent's /metrics every second; yields the Prometheus client once every job has been scraped
    after the processes did their work."""
    from tests.extender.test_extender_cli import state_at

    root = tmp_path_factory.mktemp("dashboards")
    om, history, state = _cluster_files(root)
    backfill(om, str(root / "data"))
    server = PrometheusServer(str(root / "data")).start()
    procs: list[subprocess.Popen] = []
    fake = None
    ports = {"serve": free_port(), "extender": free_port(), "enforcer": free_port()}
    try:
        procs.append(_spawn(root, "serve", [
            "serve", "--cluster-state", state, "--source", "file", "--input", history, "--sink", "file",
            "--out", str(root / "recs"), "--interval", "2s", "--model", "seasonal_naive_daily",
            "--port", str(ports["serve"]), "--host", "127.0.0.1"]))
        now = pd.Timestamp.now(tz="UTC").to_pydatetime()
        procs.append(_spawn(root, "extender", [
            "extender", "--listen", f"127.0.0.1:{ports['extender']}",
            "--cluster-state", state_at(now, root / "extender-state.json")]))
        proc, fake = _start_enforcer(root, ports["enforcer"])
        procs.append(proc)
        for proc, port in zip(procs, ports.values()):
            _wait_http(f"http://127.0.0.1:{port}/metrics", proc)
        _reload_scraping(server, ports)
        prom = Prom(server.url)
        extender = f"http://127.0.0.1:{ports['extender']}"
        _extender_calls(extender, now)
        _wait_for(prom, ["tidewise_extender_calls_total", 'tidewise_runs_total{outcome="ok"} > 1'])
        _extender_calls(extender, now)  # a second batch after the first was scraped: the rates are not 0
        _wait_for(prom, ["increase(tidewise_extender_calls_total[1m]) > 0", "tidewise_enforcer_runs_total > 1"])
        # a panel's rate() needs two scrapes of its counter: on a busy machine a process's first scrape can
        # come late (its counters already past 1), so wait for two samples of every counter a panel reads
        _wait_for(prom, [f"count_over_time({n}[5m]) > 1" for n in sorted(
            n for name in DASHBOARDS for p in data_panels(load(name)) for t in p["targets"]
            for n in metric_names(t["expr"]) if n.endswith(("_total", "_bucket", "_count", "_sum")))])
        yield prom
    finally:
        _stop(procs)
        if fake is not None:
            fake.stop()
        server.stop()


# --- every panel against the stack ---------------------------------------------------------------

def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers outside strings, label matchers,
    ranges and grouping clauses that are not calls or keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    found = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        rest = text[m.end():].lstrip()
        if m.group().lower() in PROMQL_WORDS or rest.startswith("("):
            continue
        if m.start() and (text[m.start() - 1].isdigit() or text[m.start() - 1] == "."):
            continue  # the "e" of 1e3, the unit of 5m
        found.add(m.group())
    return found


def substitute(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__interval", RATE_INTERVAL)
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    return expr


def sized_in_both(prom: Prom) -> dict[str, str]:
    """The namespace and workload of a VPA with a CPU and a memory target: the workload dashboard
    opened on it has data in every panel (a VPA beside an HPA sizes memory only, and its CPU
    recommendation panels are rightly empty)."""
    found = prom.query("tidewise_vpa_replicas and on(namespace, vpa) (count by (namespace, vpa) "
                       "(tidewise_vpa_target) == 2)")
    assert found, "no VPA with both a CPU and a memory target"
    labels = min((r["metric"] for r in found), key=lambda m: (m["namespace"], m["workload"]))
    return {"namespace": labels["namespace"], "workload": labels["workload"]}


def variable_values(prom: Prom, board: dict[str, Any], chosen: dict[str, str]) -> dict[str, str]:
    """Each query variable set as Grafana sets it on opening the dashboard: All (its allValue, a
    regex) where the variable has All, else the first value Prometheus has for it; in order (a later
    variable's query may use an earlier one), or the value `chosen` names. Either way it must be one
    Prometheus has."""
    values: dict[str, str] = {}
    for v in board["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", v["query"]["query"].strip())
        assert m, v["query"]
        selector, label = substitute(m.group(1), values), m.group(2)
        options = prom.get(f"/api/v1/label/{label}/values", **{"match[]": selector})
        assert options, f"variable {v['name']}: no {label} values for {selector}"
        if v["name"] in chosen:
            assert chosen[v["name"]] in options, (v["name"], chosen, options)
        values[v["name"]] = chosen.get(v["name"]) or (v["allValue"] if v.get("includeAll") else sorted(options)[0])
    return values


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_panel_returns_data_and_names_only_scraped_metrics(stack, name):
    board = load(name)
    values = variable_values(stack, board, sized_in_both(stack) if name == "workload.json" else {})
    scraped = stack.names()
    empty, unknown = [], []
    for p in data_panels(board):
        for t in p["targets"]:
            expr = substitute(t["expr"], values)
            assert "$" not in expr, (p["title"], expr)
            names = metric_names(expr)
            assert names, (p["title"], expr)
            unknown += [(p["title"], n) for n in sorted(names - scraped)]
            result = stack.query(expr)
            finite = [r for r in result if r["value"][1] not in ("NaN", "+Inf", "-Inf")]
            if not finite:
                empty.append((p["title"], t.get("legendFormat", ""), expr))
    assert not unknown, f"metrics not scraped: {unknown}"
    assert not empty, f"panels without data: {empty}"


def test_the_metric_name_reader_sees_through_promql():
    expr = ('sum by (namespace) (rate(container_cpu_usage_seconds_total{container!="",pod=~"a-.*"}[5m])) '
            '- on(namespace) group_left(workload) max(tidewise_vpa_replicas) * 1e3 '
            'or histogram_quantile(0.99, sum by (le) (rate(x_bucket[1m]))) offset 5m')
    assert metric_names(expr) == {"container_cpu_usage_seconds_total", "tidewise_vpa_replicas", "x_bucket"}
