"""Fixtures for tests against real servers: a Prometheus backfilled with synthetic cluster history."""
from __future__ import annotations

import pandas as pd
import pytest

from predictor.sources.synthetic import generate_cluster
from tests.integration.prometheus_server import PrometheusServer, backfill

SCRAPE = pd.Timedelta("2m")


@pytest.fixture(scope="session")
def backfilled_cluster(tmp_path_factory):
    """14 days of cAdvisor/kube-state-metrics-shaped history, backfilled into a TSDB folder."""
    end = pd.Timestamp.now(tz="UTC").floor("1h") - pd.Timedelta("2h")
    cluster = generate_cluster(seed=11, workloads=5, namespaces=2, nodes=2, days=14, step="5m", end=end, gaps=False)
    root = tmp_path_factory.mktemp("prom")
    om = root / "history.om"
    with open(om, "w") as fh:
        cluster.write_openmetrics(fh, SCRAPE)
    data = root / "data"
    backfill(str(om), str(data))
    om.unlink()
    return cluster, str(data)


@pytest.fixture(scope="session")
def prometheus_server(backfilled_cluster):
    """A real prometheus on 127.0.0.1:<free port> over the backfilled history; stopped at the end."""
    cluster, data = backfilled_cluster
    server = PrometheusServer(data).start()
    try:
        yield server, cluster
    finally:
        server.stop()
