"""IncrementalHistory over a real Prometheus (14 days of backfilled synthetic cluster history): for
each of several successive `now`s the incremental history is the full fetch's, series by series."""
import pandas as pd
import pytest

from autoscaler.input.incremental import FULL, SLICE, IncrementalHistory
from predictor.sources.prometheus import PrometheusSettings, PrometheusSource
from tests.autoscaler.test_incremental import assert_same

pytestmark = pytest.mark.integration

STEP = pd.Timedelta("5m")
WINDOW = pd.Timedelta("3D")
WHAT = ("cpu", "memory", "requests", "replicas")


def test_incremental_history_equals_a_full_fetch_for_successive_nows(prometheus_server):
    server, cluster = prometheus_server
    source = PrometheusSource(PrometheusSettings(url=server.url), what=WHAT)
    full = PrometheusSource(PrometheusSettings(url=server.url), what=WHAT)
    inc = IncrementalHistory(source, overlap=pd.Timedelta("10m"), full_every=pd.Timedelta("6h"))
    now = (cluster.end - pd.Timedelta("1D")).floor("1h") + pd.Timedelta("40min")
    # runs a minute apart share a `now`; then every 5 minutes (across an hour), a pause of 2 h, 6 h later
    nows = [now, now, *(now + i * STEP for i in range(1, 8)), now + pd.Timedelta("3h"), now + pd.Timedelta("6h5min")]
    kinds, requests, prev = [], [], now
    for t in nows:
        before = source.requests_made
        got = inc.fetch(t - WINDOW, t, STEP)
        kinds.append(inc.last.kind)
        requests.append(source.requests_made - before)
        want = full.fetch(t - WINDOW, t, STEP)
        assert len(want.series) >= 5 * 5 and want.end == t
        assert_same(got, want)
        if inc.last.kind == SLICE:  # started on the owners' hourly grid from the window's start
            assert (inc.last.start - (t - WINDOW)) % pd.Timedelta("1h") == pd.Timedelta(0)
            assert pd.Timedelta("10m") <= prev - inc.last.start <= pd.Timedelta("1h10m")
        prev = t
    assert kinds == [FULL] + [SLICE] * 9 + [FULL]
    assert max(requests[1:-1]) <= requests[0]  # one request a query either way at this size


def test_the_loop_over_increments_decides_as_over_full_fetches_and_freezes_when_prometheus_stops(
        backfilled_cluster, tmp_path):
    import shutil

    from autoscaler.output.sinks import DryRunSink
    from autoscaler.routines.loop import FROZEN, OK, ServingLoop
    from studies.demo import cluster_objects
    from tests.autoscaler.conftest import StaticCluster, fast_settings
    from tests.integration.prometheus_server import PrometheusServer

    cluster, data = backfilled_cluster
    own = tmp_path / "data"
    shutil.copytree(data, own, ignore=shutil.ignore_patterns("lock"))
    server = PrometheusServer(str(own)).start()
    try:
        clock = [cluster.end - pd.Timedelta("2h")]
        settings = PrometheusSettings(url=server.url, retries=0, timeout_seconds=5)
        inc = IncrementalHistory(PrometheusSource(settings), overlap=pd.Timedelta("10m"))
        loops = [ServingLoop(fast_settings(), src, StaticCluster(cluster_objects(cluster)), DryRunSink(),
                             clock=lambda: clock[0]) for src in (inc, PrometheusSource(settings))]

        def decided():
            reps = [loop.run_once() for loop in loops]
            assert [r.outcome for r in reps] == [OK, OK], [r.reason for r in reps]
            a, b = ({d.key: d.reasons() for d in r.vpa} | {d.key: (d.min_replicas, d.predicted) for d in r.hpa}
                    | {p.node: (p.reclaimed_millicpu, p.reclaimed_memory_bytes) for p in r.reclaim} for r in reps)
            assert a == b and a

        decided()
        for _ in range(3):
            clock[0] += STEP
            decided()
            assert inc.last.kind == SLICE
        server.stop()
        clock[0] += STEP
        assert loops[0].run_once().outcome == FROZEN  # the slice failed: no decision
        server = PrometheusServer(str(own), port=server.port).start()
        clock[0] += STEP
        decided()
        assert inc.last.kind == FULL and "failed" in inc.last.reason
    finally:
        server.stop()
