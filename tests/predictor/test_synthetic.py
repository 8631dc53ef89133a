import io

import numpy as np
import pandas as pd

from predictor.durations import DAY, WEEK
from predictor.features.seasonality import acf_at
from predictor.sources.synthetic import generate_cluster


def test_demo_cluster_meets_its_description():
    c = generate_cluster(seed=3)
    h = c.history()
    assert len(c.workloads) >= 12 and len(c.namespaces) >= 3 and len(c.nodes) >= 4
    assert (c.end - c.start) >= pd.Timedelta("21D")
    assert set(h["resource"]) == {"cpu", "memory"}
    assert (h["value"] >= 0).all()
    steps = h.groupby("series")["timestamp"].agg(lambda t: t.diff().min())
    assert (steps == pd.Timedelta("5min")).all()
    full = int((c.end - c.start) / pd.Timedelta("5min"))
    sizes = h.groupby("series").size()
    assert (sizes < full).sum() >= 2, "some series must have gaps"
    shapes = {w.shape for w in c.workloads}
    assert {"tidal", "flat", "bursty", "trending"} <= shapes


def test_seeded_and_deterministic():
    a, b = generate_cluster(seed=5, days=3).history(), generate_cluster(seed=5, days=3).history()
    pd.testing.assert_frame_equal(a, b)
    c = generate_cluster(seed=6, days=3).history()
    assert not np.allclose(a["value"].to_numpy()[:100], c["value"].to_numpy()[:100])


def test_tides_are_daily_and_weekly():
    c = generate_cluster(seed=1, days=21, gaps=False)
    w = next(w for w in c.workloads if w.shape == "tidal")
    y = c.usage(w, "cpu")
    step = pd.Timedelta("5min")
    assert acf_at(y, DAY, step) > 0.6
    weekday = y[y.index.day_of_week < 5].mean()
    weekend = y[y.index.day_of_week >= 5].mean()
    assert weekend < 0.95 * weekday


def test_openmetrics_is_well_formed_and_counters_increase():
    c = generate_cluster(seed=2, workloads=2, namespaces=1, nodes=1, days=0.1, end="2024-01-02")
    buf = io.StringIO()
    n = c.write_openmetrics(buf, pd.Timedelta("1m"))
    text = buf.getvalue()
    assert text.endswith("# EOF\n")
    samples = [l for l in text.splitlines() if l and not l.startswith("#")]
    assert len(samples) == n
    cpu = [l for l in samples if l.startswith("container_cpu_usage_seconds_total{")]
    pod = cpu[0].split("}")[0]
    values = [float(l.split()[1]) for l in cpu if l.startswith(pod + "}")]
    assert all(b > a for a, b in zip(values, values[1:]))
    # families are contiguous: a TYPE line per family, never repeated
    types = [l.split()[2] for l in text.splitlines() if l.startswith("# TYPE")]
    assert len(types) == len(set(types))
