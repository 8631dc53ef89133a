"""Issue 25 item 7, the rough edges of plots and progress: the cost chart compares equal periods,
`replay` shows progress per series and per refit, plots carry units (cores, GiB), readable legends
and one width per page, and the HPA replay page's three lines differ in colour and style."""
from __future__ import annotations

import base64
import itertools
import re

import numpy as np
import pandas as pd
import pytest

from reports.pages import DPI, FIG_WIDTH, GIB, LEGEND_SIZE, figure_png, pyplot
from tests.conftest import run_cli
from tests.studies.cost_fixtures import HOURS, write_inputs
from tests.tidewise.test_replay_cli import tidal_frame


def _png_widths(page: str) -> list[int]:
    """The pixel width of every embedded PNG of a page (the IHDR header's first field)."""
    pngs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    return [int.from_bytes(base64.b64decode(p)[16:20], "big") for p in pngs]


def _legend_sizes(fig) -> list[float]:
    return [t.get_fontsize() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


# --- 1. the cost chart: every bar over the same hours -------------------------------------------

def test_the_namespace_chart_compares_the_replay_window_only(tmp_path):
    from studies.cost.page import namespace_bars, render
    from studies.cost.prices import load_prices
    from studies.cost.report import CostInputs, build_report

    f = write_inputs(tmp_path)
    vpa = pd.read_csv(f["--vpa-replay"])  # the replay covers the last 2 of the history's 4 hours (both peak)
    vpa[pd.to_datetime(vpa["timestamp"], utc=True) >= HOURS[2]].to_csv(f["--vpa-replay"], index=False)
    report = build_report(load_prices(f["--cost"]), CostInputs(
        history=f["--history"], cluster_state=f["--cluster-state"], vpa_replay=f["--vpa-replay"]))
    period, names, bars = namespace_bars(report)
    assert "08:00 to 2026-11-30 10:00 UTC (2 h)" in period and names == ["etl", "shop"]
    # by hand, 2 peak hours at 4 EUR a core-hour: etl requests 2 cores, uses 0, Tidewise asks 0.5;
    # shop requests 2 cores x 2 pods, uses 3, Tidewise asks 3.5 (its memory is not replayed)
    assert bars == {"requested before Tidewise": [16.0, 32.0], "used": [0.0, 24.0],
                    "Tidewise's requests": [4.0, 28.0]}
    shop = report.namespaces[1]
    assert (shop["used_cost"], shop["requested_cost"]) == (27.5, 43.0)  # the history's 4 h: not on the chart
    assert "cost per namespace" in render(report)


def test_without_a_replay_the_chart_is_the_history_s_requested_and_used(tmp_path):
    from studies.cost.page import namespace_bars
    from studies.cost.prices import load_prices
    from studies.cost.report import CostInputs, build_report

    f = write_inputs(tmp_path)
    report = build_report(load_prices(f["--cost"]), CostInputs(history=f["--history"],
                                                                cluster_state=f["--cluster-state"]))
    period, names, bars = namespace_bars(report)
    assert period.startswith("history ") and "(4 h)" in period
    assert bars == {"requested": [20.0, 43.0], "used": [4.0, 27.5]}


# --- 2. progress ----------------------------------------------------------------------------------

def test_progress_lines_are_rate_limited_by_tenths_and_by_time(capsys):
    from tidewise import progress as p

    now = [0.0]
    a = p.Advance("work", 100, clock=lambda: now[0])
    for _ in range(100):  # instant items: a line per tenth, not per item
        a(1)
    assert capsys.readouterr().err.count("work: ") == 10
    b = p.Advance("slow", 3, clock=lambda: now[0])
    for _ in range(30):  # 30 items of 3 s when 3 were announced: a line per LINE_EVERY seconds too
        now[0] += 3.0
        b(1)
    err = capsys.readouterr().err
    assert "slow: 1/3 (3 s)" in err and 8 <= err.count("slow: ") <= 12
    b.note("fleet model for 2024-05-03 fitted")
    assert "slow: 30/3, fleet model for 2024-05-03 fitted (90 s)" in capsys.readouterr().err


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """A small `replay vpa --report` as a user runs it (stderr a pipe, not a terminal): 2 series,
    3 days, so one fleet model is fitted."""
    d = tmp_path_factory.mktemp("replay")
    series = ("shop/Deployment/web/app/cpu", "shop/Deployment/web/app/memory")
    frame = tidal_frame(days=3, series=series)
    frame.loc[frame["series"].str.endswith("memory"), "value"] *= GIB  # bytes, as the history holds memory
    frame.to_csv(d / "in.csv", index=False)
    r = run_cli("replay", "vpa", "--input", str(d / "in.csv"), "--output", str(d / "out.csv"),
                "--model", "seasonal_naive_daily", "--report", str(d / "r.html"))
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stderr, (d / "r.html").read_text()


def test_replay_shows_a_line_per_series_and_per_refit_on_stderr(replayed):
    lines = [ln for ln in replayed[0].splitlines() if ln.startswith("replaying vpa: ")]
    assert lines[0] == "replaying vpa: 2 ..."
    assert any(re.fullmatch(r"replaying vpa: 0/2, fleet model for 2024-05-03 fitted \(\d+ s\)", ln) for ln in lines)
    assert [ln.split(" (")[0] for ln in lines if re.match(r"replaying vpa: \d/2 \(", ln)] == \
        ["replaying vpa: 1/2", "replaying vpa: 2/2"]
    assert re.fullmatch(r"replaying vpa: done in \d+ s", lines[-1])
    assert "plotting report: 2/2" in replayed[0]


# --- 3. units, legends, widths --------------------------------------------------------------------

def test_every_plot_of_the_replay_page_has_one_width(replayed):
    widths = _png_widths(replayed[1])
    assert len(widths) == 3 and set(widths) == {int(FIG_WIDTH * DPI)}  # the trade-off and both series


def test_the_demo_report_plots_memory_in_gib_cpu_in_cores_and_one_width():
    from predictor.history import History
    from predictor.types import Forecast
    from training.report import render_html, series_figure

    idx = pd.date_range("2024-08-01", periods=2 * 288, freq="5min", tz="UTC")
    tide = 1 + 0.5 * np.sin(np.arange(len(idx)) * 2 * np.pi / 288)
    series = {"ns/Deployment/web/app/cpu": pd.Series(tide, index=idx),
              "ns/Deployment/web/app/memory": pd.Series(3 * GIB * tide, index=idx)}
    fidx = pd.date_range(idx[-1] + pd.Timedelta("5min"), periods=288, freq="5min")
    fcs = [Forecast(k, fidx, (0.5, 0.95), np.column_stack([y.iloc[-288:].to_numpy()] * 2), "seasonal_naive_daily")
           for k, y in series.items()]
    figs = {k: series_figure(k, series[k], fc) for k, fc in zip(series, fcs)}
    try:
        mem, cpu = figs["ns/Deployment/web/app/memory"].axes[0], figs["ns/Deployment/web/app/cpu"].axes[0]
        assert mem.get_ylabel() == "memory, GiB" and cpu.get_ylabel() == "cpu, cores"
        ticks = [t for t in mem.get_yticks() if mem.get_ylim()[0] <= t <= mem.get_ylim()[1]]
        labels = [mem.yaxis.get_major_formatter()(t) for t in ticks]
        assert [float(x) for x in labels] == pytest.approx([t / GIB for t in ticks]) and max(map(float, labels)) < 10
        assert all(abs(t / GIB * 100 - round(t / GIB * 100)) < 1e-6 for t in ticks)  # round GiB, not round bytes
        assert all(size >= LEGEND_SIZE for fig in figs.values() for size in _legend_sizes(fig))
        assert {tuple(fig.get_size_inches()) for fig in figs.values()} == {(FIG_WIDTH, 2.6)}
    finally:
        for fig in figs.values():
            pyplot().close(fig)
    page = render_html(History(series, pd.Timedelta("5min")), fcs)
    assert _png_widths(page) == [int(FIG_WIDTH * DPI)] * 2


def test_the_shared_helper_evens_widths_and_raises_small_legends():
    fig, ax = pyplot().subplots(figsize=(5, 2))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.legend(fontsize=5)
    png = figure_png(fig)
    assert _png_widths(f'src="data:image/png;base64,{png}"') == [int(FIG_WIDTH * DPI)]
    assert _legend_sizes(fig) == [LEGEND_SIZE]


def test_the_cost_page_plots_have_one_width(tmp_path):
    from studies.cost.page import render
    from studies.cost.prices import load_prices
    from studies.cost.report import CostInputs, build_report

    f = write_inputs(tmp_path)
    report = build_report(load_prices(f["--cost"]), CostInputs(
        history=f["--history"], cluster_state=f["--cluster-state"], vpa_replay=f["--vpa-replay"],
        colocation=f["--colocation"]))
    assert _png_widths(render(report)) == [int(FIG_WIDTH * DPI)] * 3


# --- 4. the HPA replay page -----------------------------------------------------------------------

def test_the_hpa_plot_s_three_lines_differ_in_colour_and_style_and_are_in_the_legend():
    from studies.replay.runner import ReplaySettings, series_figure

    minutes = pd.date_range("2024-05-01", periods=600, freq="1min", tz="UTC")
    demand = 10 + 5 * np.sin(np.arange(600) / 100)
    serving = np.ceil(demand / 0.7)
    r = {"minutes": minutes, "demand": demand, "per": 1.0, "serving": serving, "reference": serving.copy()}
    fig = series_figure("shop/Deployment/web/app/cpu", r, ReplaySettings("hpa"))
    try:
        ax = fig.axes[0]
        lines = ax.get_lines()
        assert len(lines) == 3
        for a, b in itertools.combinations(lines, 2):
            assert a.get_color() != b.get_color() and a.get_linestyle() != b.get_linestyle()
        # the legend names every line (long names wrapped to fit beside the plot)
        assert [t.get_text().replace("\n", " ") for t in ax.get_legend().get_texts()] == [ln.get_label() for ln in lines]
        assert ax.get_ylabel() == "replicas"
    finally:
        pyplot().close(fig)
