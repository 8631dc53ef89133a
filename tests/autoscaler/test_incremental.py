"""IncrementalHistory (autoscaler/input/incremental.py): slices that give what a full fetch gives,
and the full fetches it must still make. A fake source records every range it is asked for."""
import numpy as np
import pandas as pd
import pytest

from autoscaler.input.incremental import FULL, PASSED, SLICE, IncrementalHistory, incremental_history
from predictor.errors import SourceError
from predictor.history import History, regularize

STEP = pd.Timedelta("5m")
WINDOW = pd.Timedelta("1D")
T0 = pd.Timestamp("2026-11-20T00:00:00Z")


class FakeSource:
    """Series on the step grid, inclusive of both ends as Prometheus answers a range query; each
    series lives over [born, died], with holes; `revised` values replace the first ones given."""

    name = "fake"

    def __init__(self):
        self.asked: list[tuple[pd.Timestamp, pd.Timestamp]] = []
        self.spans: dict[str, tuple[pd.Timestamp, pd.Timestamp]] = {}
        self.holes: set[tuple[str, pd.Timestamp]] = set()
        self.revised: dict[tuple[str, pd.Timestamp], float] = {}
        self.failed: dict[str, str] = {}
        self.down = False

    def fetch(self, start, end, step):
        self.asked.append((start, end))
        if self.down:
            raise SourceError("cannot reach the fake")
        grid = pd.date_range(T0 if start is None else start, T0 + pd.Timedelta("3D") if end is None else end, freq=step)
        rows = []
        for key, (born, died) in self.spans.items():
            for t in grid[(grid >= born) & (grid <= died)]:
                if (key, t) not in self.holes:
                    v = self.revised.get((key, t), float((t.value // 10**9) % 997) + len(key))
                    rows.append((key, t, v, key.split("/")[0], key.split("/")[-1]))
        if not rows:
            return History({}, step, failed=dict(self.failed))
        frame = pd.DataFrame(rows, columns=["series", "timestamp", "value", "namespace", "resource"])
        hist = regularize(frame, step)
        hist.failed = dict(self.failed)
        return hist


def fleet():
    src = FakeSource()
    src.spans = {"a/web/cpu": (T0, T0 + pd.Timedelta("30D")),
                 "a/web/memory": (T0 + pd.Timedelta("30m"), T0 + pd.Timedelta("30D")),
                 "b/batch/cpu": (T0, T0 + pd.Timedelta("1D3h")),  # stops during the runs
                 "b/new/cpu": (T0 + pd.Timedelta("1D2h7m"), T0 + pd.Timedelta("30D"))}  # born during them
    src.holes = {("a/web/cpu", T0 + pd.Timedelta("1D1h") + i * STEP) for i in range(4)}
    src.holes |= {("a/web/memory", T0 + pd.Timedelta("1h") + i * STEP) for i in range(3)}  # hole cut by the window
    return src


def assert_same(got: History, want: History):
    assert list(got.series) == list(want.series)
    for k in want.series:
        pd.testing.assert_series_equal(got.series[k], want.series[k], check_names=False)
    assert got.gaps == want.gaps
    pd.testing.assert_frame_equal(got.labels, want.labels)
    assert got.failed == want.failed and got.signed == want.signed


def run(inc, src, now, window=WINDOW, step=STEP):
    got = inc.fetch(now - window, now, step)
    asked = src.asked[-1]
    want = src.fetch(now - window, now, step)
    src.asked.pop()
    assert_same(got, want)
    return asked


def test_successive_runs_equal_full_fetches_and_ask_only_the_newest_steps():
    src = fleet()
    inc = IncrementalHistory(src, overlap=pd.Timedelta("10m"), full_every=pd.Timedelta("6h"))
    now = T0 + pd.Timedelta("1D")
    assert run(inc, src, now) == (now - WINDOW, now)
    assert inc.last.kind == FULL
    # a run a minute later has the same `now`; then every 5 minutes, across the hole, a stop and a birth
    for now in [now, *(now + i * STEP for i in range(1, 50))]:
        start, end = run(inc, src, now)
        assert inc.last.kind == SLICE, inc.last
        assert end == now and now - pd.Timedelta("15m") <= start <= now - pd.Timedelta("10m")
    assert inc.fetches == {FULL: 1, SLICE: 50, PASSED: 0}
    assert "b/batch/cpu" in inc.fetch(now - WINDOW, now, STEP).series  # stopped, still in the window


def test_a_slice_starts_on_the_sources_grid_from_the_windows_start():
    src = fleet()
    src.slice_steps = 12  # as PrometheusSource: owners asked every 12 steps from a range's start
    inc = IncrementalHistory(src, overlap=pd.Timedelta("10m"))
    now = T0 + pd.Timedelta("1D")
    run(inc, src, now)
    for i in range(1, 30):
        start, _ = run(inc, src, now + i * STEP)
        assert (start - (now + i * STEP - WINDOW)) % pd.Timedelta("1h") == pd.Timedelta(0)
        assert pd.Timedelta("10m") <= now + i * STEP - start <= pd.Timedelta("1h15m")


def test_late_samples_inside_the_overlap_replace_the_held_ones():
    src = fleet()
    inc = IncrementalHistory(src, overlap=pd.Timedelta("10m"))
    now = T0 + pd.Timedelta("1D1h")
    src.holes.add(("a/web/memory", now))  # not yet scraped when first asked
    run(inc, src, now)
    src.holes.discard(("a/web/memory", now))
    src.revised[("a/web/cpu", now - STEP)] = 12345.0  # an incomplete step, complete now
    run(inc, src, now + STEP)
    assert inc.fetch(now - WINDOW + STEP, now + STEP, STEP).series["a/web/cpu"][now - STEP] == 12345.0


@pytest.mark.parametrize("change, why", [
    ("window", "window changed"), ("step", "step changed"), ("back", "now went back"),
    ("gap", "more than the window before"), ("every", "full_refetch_every"),
    ("down", "the fetch before failed"), ("failed", "failed queries changed"),
    ("early", "series not held before"),
])
def test_a_full_fetch_when_a_slice_cannot_stand_in(change, why):
    src = fleet()
    inc = IncrementalHistory(src, overlap=pd.Timedelta("10m"), full_every=pd.Timedelta("6h"))
    now, window, step = T0 + pd.Timedelta("1D2h"), WINDOW, STEP
    run(inc, src, now)
    run(inc, src, now + STEP)
    assert inc.last.kind == SLICE
    now += STEP
    if change == "window":
        window = pd.Timedelta("20h")
    elif change == "step":
        step = pd.Timedelta("10m")
    elif change == "back":
        now -= 3 * STEP
    elif change == "gap":
        now += WINDOW
    elif change == "every":
        now += pd.Timedelta("6h")
    elif change == "down":
        src.down = True
        with pytest.raises(SourceError):
            inc.fetch(now + STEP - window, now + STEP, step)
        src.down = False
    elif change == "failed":
        src.failed = {"memory": "HTTP 500"}
    elif change == "early":  # a series the last runs did not see, with samples from before the slice
        src.spans["c/hidden/cpu"] = (T0, T0 + pd.Timedelta("30D"))
    now += STEP
    run(inc, src, now, window, step)
    assert inc.last.kind == FULL and why in inc.last.reason, inc.last
    assert src.asked[-1] == (now - window, now)
    run(inc, src, now + step, window, step)
    assert inc.last.kind == SLICE  # and increments again from there


def test_a_slice_without_series_is_returned_and_the_next_run_fetches_the_window():
    src = fleet()
    inc = IncrementalHistory(src, overlap=pd.Timedelta("10m"))
    now = T0 + pd.Timedelta("1D2h")
    run(inc, src, now)
    spans, src.spans = src.spans, {}  # Prometheus restarted without its data
    assert inc.fetch(now + STEP - WINDOW, now + STEP, STEP).series == {}  # the loop freezes on it
    src.spans = spans
    run(inc, src, now + 2 * STEP)
    assert inc.last.kind == FULL


def test_no_range_or_one_off_the_grid_is_passed_to_the_source_as_it_is():
    src = fleet()
    inc = IncrementalHistory(src, overlap=pd.Timedelta("10m"))
    now = T0 + pd.Timedelta("1D2h")
    for start, end in [(None, None), (now - WINDOW + pd.Timedelta("1m"), now + pd.Timedelta("1m"))]:
        inc.fetch(start, end, STEP)
        assert inc.last.kind == PASSED and src.asked[-1] == (start, end)


def test_the_previous_runs_history_is_left_as_it_was_and_only_one_window_is_held():
    src = fleet()
    inc = IncrementalHistory(src, overlap=pd.Timedelta("10m"))
    now = T0 + pd.Timedelta("1D2h")
    first = inc.fetch(now - WINDOW, now, STEP)
    kept = {k: y.copy() for k, y in first.series.items()}
    second = inc.fetch(now + STEP - WINDOW, now + STEP, STEP)
    assert set(first.series) == set(kept)
    for k, y in kept.items():
        pd.testing.assert_series_equal(first.series[k], y)
    # what is held is the history last returned: its series objects, not copies of them
    assert all(inc._held.series[k] is y for k, y in second.series.items())
    assert all(len(y) <= WINDOW / STEP + 1 for y in second.series.values())


def test_settings_none_keeps_the_plain_source():
    src = fleet()
    assert incremental_history(src, "10m", None) is src
    inc = incremental_history(src, "10m", "6h")
    assert isinstance(inc, IncrementalHistory) and inc.name == "fake" and inc.full_every == pd.Timedelta("6h")
    assert np.isclose(inc.overlap / STEP, 2)


@pytest.mark.parametrize("flags, wrapped", [([], True), (["--once"], False), (["--no-watch"], False)])
def test_serve_wraps_its_source_only_when_running_forever_and_watching(tmp_path, monkeypatch, flags, wrapped):
    from tidewise.cli import build_parser
    from tidewise.commands import serve

    state = tmp_path / "cluster-state.yaml"
    state.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    seen = []
    monkeypatch.setattr(serve, "_once", lambda args, loop, sink: seen.append(loop.source) or 0)
    monkeypatch.setattr(serve, "_forever", lambda args, loop, *rest: seen.append(loop.source) or 0)
    args = build_parser().parse_args(["serve", "--source", "synthetic", "--cluster-state", str(state),
                                      "--port", "0", *flags])
    args.settings = {"serve": {"loop": {"full_refetch_every": "12h"}}}
    assert serve.run(args) == 0
    assert isinstance(seen[0], IncrementalHistory) == wrapped
    assert getattr(seen[0], "source", seen[0]).name == "synthetic"
    assert getattr(seen[0], "full_every", pd.Timedelta("12h")) == pd.Timedelta("12h")
