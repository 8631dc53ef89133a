"""`tidewise fetch` against a real Prometheus backfilled with 14 days of synthetic cluster history."""
import re

import numpy as np
import pandas as pd
import pytest

from predictor.errors import SourceError
from predictor.sources.prometheus import PrometheusSettings, PrometheusSource
from tests.conftest import run_cli
from tests.integration.conftest import SCRAPE
from tests.integration.prometheus_server import free_port


def expected_rate(cluster, workload, index):
    """What rate(counter[5m]) sees at each 5-minute timestamp: the mean usage of the scrapes inside
    the window (the generator's 2-minute usage, summed over pods)."""
    u = cluster.usage(workload, "cpu", SCRAPE)
    return u.rolling("5min", closed="right").mean().reindex(index)


def test_fetch_returns_every_workload_matching_the_generator(prometheus_server, tmp_path):
    server, cluster = prometheus_server
    out = tmp_path / "history.parquet"
    start, end = cluster.start + pd.Timedelta("1h"), cluster.end - pd.Timedelta("10min")
    r = run_cli("fetch", "--prometheus-url", server.url, "--start", start.isoformat(), "--end", end.isoformat(),
                "--step", "5m", "--what", "cpu,memory,requests,replicas", "--output", str(out))
    assert r.returncode == 0, r.stderr
    # progress off a terminal: a line per request (8: two owner queries, four per-pod, two replicas), no start line
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith(f"querying Prometheus at {server.url}: ")]
    assert [ln.split(" (")[0] for ln in lines[:-1]] == [f"querying Prometheus at {server.url}: {i}/8" for i in range(1, 9)]
    assert re.fullmatch(r"querying Prometheus at \S+: done in \d+ s", lines[-1]), r.stderr
    df = pd.read_parquet(out)
    assert {"series", "timestamp", "value", "namespace", "kind", "workload", "container", "resource"} <= set(df.columns)
    for w in cluster.workloads:
        for res in ("cpu", "memory", "cpu_request", "memory_request"):
            assert w.key(res).id in set(df["series"]), f"missing {w.key(res).id}"
        assert f"{w.namespace}/{w.kind}/{w.name}/-/replicas" in set(df["series"])
        cpu = df[df.series == w.key("cpu").id].set_index("timestamp")["value"]
        cpu.index = pd.DatetimeIndex(cpu.index)
        exp = expected_rate(cluster, w, cpu.index)
        rel = (cpu - exp).abs() / exp
        # rate() extrapolates to the window edges; within that error the values are the generator's
        assert rel.median() < 0.03, (w.name, rel.describe())
        assert rel.quantile(0.95) < 0.15
        mem = df[df.series == w.key("memory").id].set_index("timestamp")["value"]
        # a gauge reads the last scrape at or before each timestamp
        exp_mem = cluster.usage(w, "memory", SCRAPE).reindex(pd.DatetimeIndex(mem.index), method="ffill")
        np.testing.assert_allclose(mem.to_numpy(), exp_mem.to_numpy(), rtol=1e-6, atol=w.replicas)
        req = df[df.series == w.key("cpu_request").id]["value"]
        assert req.round(6).unique().tolist() == [round(w.cpu_request * w.replicas, 6)]
        reps = df[df.series == f"{w.namespace}/{w.kind}/{w.name}/-/replicas"]["value"]
        assert reps.unique().tolist() == [w.replicas]


def test_long_range_is_split_under_the_points_limit(prometheus_server):
    server, cluster = prometheus_server
    step = pd.Timedelta("1m")  # 14 days at 1 minute = 20,160 points per series > 11,000
    start, end = cluster.start + pd.Timedelta("10min"), cluster.end - pd.Timedelta("10min")
    points = int((end - start) / step) + 1
    assert points > 11_000
    split = PrometheusSource(PrometheusSettings(url=server.url), what=("memory",))
    hist = split.fetch(start, end, step)
    # two owner queries at a coarse step (one request each) + the memory query in two requests
    assert split.requests_made == 2 + 2 == split.planned_requests(start, end, step)
    w = cluster.workloads[0]
    s = hist.series[w.key("memory").id]
    assert len(s) == points and s.notna().all(), "chunks must join without holes or overlaps"
    assert not s.index.duplicated().any()
    # the same range in one request is refused by Prometheus: the split is what makes it work
    whole = PrometheusSource(PrometheusSettings(url=server.url, max_points=30_000), what=("memory",))
    assert whole.fetch(start, end, step).series == {}
    assert "memory" in whole.fetch(start, end, step).failed


def test_fetch_with_prometheus_down_exits_nonzero_with_one_clear_line(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "h.parquet"
    r = run_cli("fetch", "--prometheus-url", url, "--last", "1d", "--output", str(out), "--timeout", "2s")
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert url in r.stderr and "cannot reach Prometheus" in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()


def test_source_error_when_server_stops(prometheus_server):
    server, cluster = prometheus_server
    src = PrometheusSource(PrometheusSettings(url=f"http://127.0.0.1:{free_port()}", retries=0))
    with pytest.raises(SourceError, match="cannot reach Prometheus"):
        src.fetch(cluster.start, cluster.end, pd.Timedelta("5m"))
