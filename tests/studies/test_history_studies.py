"""`tidewise simulate colocation|tide|rebalance --history FILE` on what `tidewise fetch` wrote from a
real Prometheus (backfilled with 8 days of synthetic cluster history by promtool)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from predictor.sources.synthetic import generate_cluster
from tests.conftest import run_cli, run_main

SCRAPE = pd.Timedelta("2m")
FAST = ("--days", "1", "--no-sweeps", "--forecast-model", "seasonal_naive_daily", "--no-cache")

pytestmark = pytest.mark.skipif(not (shutil.which("prometheus") and shutil.which("promtool")),
                                reason="needs prometheus and promtool (Debian package prometheus)")


@pytest.fixture(scope="module")
def fetched(tmp_path_factory):
    """(cluster, the fetch output): 8 days of 4 workloads backfilled, served and fetched once."""
    from tests.integration.prometheus_server import PrometheusServer, backfill

    end = pd.Timestamp.now(tz="UTC").floor("1h") - pd.Timedelta("2h")
    cluster = generate_cluster(seed=11, workloads=4, namespaces=2, nodes=2, days=8, step="5m", end=end, gaps=False)
    root = tmp_path_factory.mktemp("history-prom")
    om = root / "history.om"
    with open(om, "w") as fh:
        cluster.write_openmetrics(fh, SCRAPE)
    backfill(str(om), str(root / "data"))
    out = root / "history.parquet"
    with PrometheusServer(str(root / "data")) as server:
        r = run_cli("fetch", "--prometheus-url", server.url, "--start", (cluster.start + pd.Timedelta("1h")).isoformat(),
                    "--end", (cluster.end - pd.Timedelta("10min")).isoformat(), "--what", "cpu,requests,replicas",
                    "--output", str(out))
    assert r.returncode == 0, r.stderr
    return cluster, out


def simulated_day_cpu(path) -> float:
    """The file's CPU usage summed over workloads, mean over its last whole day (the simulated day)."""
    df = pd.read_parquet(path)
    cpu = df[df["resource"] == "cpu"]
    ts = pd.DatetimeIndex(cpu["timestamp"])
    last_end = (ts.max() + pd.Timedelta("5min")).floor("1D")
    day = cpu[(ts >= last_end - pd.Timedelta("1D")) & (ts < last_end)]
    return float(day.groupby("timestamp")["value"].sum().mean())


def check_history_block(h: dict, cluster, path) -> None:
    assert h["workloads"] == len(cluster.workloads) and h["skipped"] == []
    assert h["pods"] == sum(w.replicas for w in cluster.workloads)
    assert h["requests_from_file"] == len(cluster.workloads)  # requests read, not sized
    assert h["requested_cores"] == pytest.approx(sum(w.cpu_request * w.replicas for w in cluster.workloads), rel=1e-3)
    # the services' demand is the file's usage in cores (1-minute interpolation of the 5-minute means)
    assert h["mean_usage_cores"] == pytest.approx(simulated_day_cpu(path), rel=0.03)


def simulate_history(study: str, fetched, out, *extra: str):
    """(stderr, results.json) of `tidewise simulate STUDY --history` on the fetched file, its
    `history` block checked against the cluster that was fetched."""
    cluster, path = fetched
    r = run_main("simulate", study, "--history", str(path), *FAST, *extra, "--out", str(out))
    assert r.returncode == 0, r.stderr
    results = json.loads((out / "results.json").read_text())
    check_history_block(results["history"], cluster, path)
    return r.stderr, results


def test_colocation_on_fetched_history(fetched, tmp_path):
    cluster, _ = fetched
    stderr, results = simulate_history("colocation", fetched, tmp_path / "o")
    # the fewest 30-core nodes that hold the requests at 90% fill
    assert results["history"]["nodes"] == int(np.ceil(results["history"]["requested_cores"] / 27))
    p = results["policies"]
    assert p["none"]["utilisation"] > 0.1 and p["none"]["batch_core_hours"] == 0
    assert p["tidewise"]["utilisation"] > p["none"]["utilisation"] and p["tidewise"]["goodput_core_hours"] > 0
    details = json.loads((tmp_path / "o" / "details.json").read_text())
    assert details["cluster"]["services"] == results["history"]["pods"]
    assert sorted(details["cluster"]["traces"]) == sorted(f"{w.namespace}/{w.kind}/{w.name}/{w.container}"
                                                           for w in cluster.workloads)
    assert "workloads in" in stderr


def test_tide_on_fetched_history(fetched, tmp_path):
    _, path = fetched
    _, results = simulate_history("tide", fetched, tmp_path / "o")
    assert {"watermark", "schedule", "tidewise"} <= set(results["policies"])
    details = json.loads((tmp_path / "o" / "details.json").read_text())
    pool = details["pool"]
    assert pool["services"] == results["history"]["pods"] and pool["nodes"] == results["history"]["nodes"] >= 2
    # under the HPA the pool's demand is the file's usage
    assert pool["mean_demand_cores"] == pytest.approx(simulated_day_cpu(path), rel=0.03)


def test_rebalance_on_fetched_history(fetched, tmp_path):
    cluster, _ = fetched
    _, doc = simulate_history("rebalance", fetched, tmp_path / "o")
    assert doc["services"] == doc["history"]["pods"] and doc["traces"] == len(cluster.workloads)
    assert list(doc["policies"]) == ["none", "reactive", "tidewise"]


def test_rebalance_keeps_the_files_pods_per_node(fetched, tmp_path):
    """A file with a node label: every workload on node-a (over-committed) and an empty second node."""
    _, path = fetched
    df = pd.read_parquet(path)
    df["node"] = "node-a"
    labelled = tmp_path / "labelled.csv.gz"
    df.to_csv(labelled, index=False)
    r = run_main("simulate", "rebalance", "--history", str(labelled), "--nodes", "2", *FAST, "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert doc["history"]["nodes_from_labels"] and doc["nodes"] == 2
    none, reactive = doc["policies"]["none"], doc["policies"]["reactive"]
    assert none["node_minutes_hot"] > 0 and none["pods_moved"] == 0
    assert reactive["pods_moved"] > 0 and reactive["node_minutes_hot"] < none["node_minutes_hot"]


def one_line_exit_2(r, *needles: str) -> None:
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("study", ["colocation", "tide", "rebalance"])
def test_bad_history_files_exit_2_naming_the_file_and_the_fix(fetched, tmp_path, study):
    _, path = fetched
    missing = tmp_path / "nowhere.parquet"
    r = run_main("simulate", study, "--history", str(missing), *FAST, "--out", str(tmp_path / "o"))
    one_line_exit_2(r, f"--history {missing}", "no such file", "tidewise fetch")
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("name,time,cores\na,2026-01-01T00:00:00Z,1\n")
    r = run_main("simulate", study, "--history", str(wrong), *FAST, "--out", str(tmp_path / "o"))
    one_line_exit_2(r, f"--history {wrong}", "series,timestamp,value")
    df = pd.read_parquet(path)
    no_cpu = tmp_path / "requests-only.parquet"
    df[df["resource"] != "cpu"].to_parquet(no_cpu, index=False)
    r = run_main("simulate", study, "--history", str(no_cpu), *FAST, "--out", str(tmp_path / "o"))
    one_line_exit_2(r, f"--history {no_cpu}", "no CPU usage series", "--what cpu")
    r = run_main("simulate", study, "--history", str(path), *FAST[2:], "--days", "3", "--out", str(tmp_path / "o"))
    one_line_exit_2(r, f"--history {path}", "--days 3 needs 8 whole days", "lower --days")
    r = run_main("simulate", study, "--history", str(path), "--traces", str(tmp_path), *FAST, "--out", str(tmp_path / "o"))
    one_line_exit_2(r, "--history", "--traces", "give one of them")
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_pods_that_do_not_fit_the_nodes_given_exit_2(fetched, tmp_path):
    _, path = fetched
    r = run_main("simulate", "colocation", "--history", str(path), "--nodes", "1", *FAST, "--out", str(tmp_path / "o"))
    one_line_exit_2(r, "--nodes 1", "pods request", "leave --nodes out")
    assert not (tmp_path / "o").exists()


def test_without_traces_or_history_the_error_says_what_to_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ../shared/data beside it
    r = run_main("simulate", "tide", "--out", str(tmp_path / "o"))
    one_line_exit_2(r, "--history FILE", "tidewise fetch", "--traces DIR")
    r = run_main("simulate", "rebalance", "--nodes", "2", "--traces", str(tmp_path / "none"), "--out", str(tmp_path / "o"))
    one_line_exit_2(r, "--traces", "no such directory", "--history FILE")
    assert not (tmp_path / "o").exists()
