"""Pictures people can read: legends outside the data, no text under the font floor, time axes with
the time of day and the clock's name, numbers with their units, savings rounded to what matters, the
cost report's levers per day and per month, and the pages' wording (no "tidewise tidewise", no
"nan", no target without its number, no "The week" for a shorter run, no VPA wording on the HPA page)."""
from __future__ import annotations

import html
import json
import re

import numpy as np
import pandas as pd
import pytest

from reports.pages import (MIN_FONT, figure, figure_png, fmt_bytes, fmt_millicores, fmt_money, legend,
                           legend_over_data, pyplot, significant, time_axis)
from tests.studies.cost_fixtures import GIB, write_inputs


def text_of(page: str) -> str:
    """A page's visible text: tags dropped, entities decoded, whitespace folded."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


# --- the shared helper ----------------------------------------------------------------------------

def _filled_axes():
    """An axes whose data cover it from corner to corner (any legend inside would hide some)."""
    fig, ax = figure()
    x = np.linspace(0, 1, 200)
    ax.plot(x, x, label="rising line")
    ax.plot(x, 1 - x, label="falling line with a label long enough to be wrapped beside the axes")
    ax.scatter(np.repeat(x[::20], 10), np.tile(np.linspace(0, 1, 10), 10), label="points everywhere")
    return fig, ax


def test_the_legend_helper_puts_the_legend_beside_the_axes_not_over_the_data():
    fig, ax = _filled_axes()
    try:
        leg = legend(ax)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        box, axes_box = leg.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert not box.overlaps(axes_box) and box.x0 >= axes_box.x1  # to the right, clear of every data point
        assert not legend_over_data(ax)
        assert all(len(line) <= 30 for t in leg.get_texts() for line in t.get_text().splitlines())
    finally:
        pyplot().close(fig)


def test_every_page_figure_moves_a_legend_left_over_the_data_and_lifts_small_text():
    fig, ax = _filled_axes()
    ax.legend(loc="upper left", fontsize=5)  # as a page drew it: over the data, tiny
    ax.tick_params(labelsize=6)
    ax.set_xlabel("a label", fontsize=6)
    assert legend_over_data(ax)
    figure_png(fig)  # closes the figure; its artists stay, drawn again on a canvas of their own
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    assert not legend_over_data(ax)
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text()]
    assert sizes and min(sizes) >= MIN_FONT


def test_a_time_axis_shows_the_time_of_day_and_names_its_clock():
    idx = pd.date_range("2026-11-30T00:00Z", periods=2 * 288, freq="5min")
    import matplotlib.dates as mdates

    for tz, utc_hours in (("UTC", {0, 12}), ("Europe/Paris", {23, 11})):  # Paris is UTC+1 in November
        fig, ax = figure()
        try:
            ax.plot(idx, np.arange(len(idx)))
            time_axis(ax, tz)
            fig.canvas.draw()
            labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
            assert ax.get_xlabel() == f"time ({tz})"
            # 2 days: a tick every 12 h, at midnight and noon on the axis' own clock, written on that clock
            assert 3 <= len(labels) <= 5 and all(s[-6:] in ("\n00:00", "\n12:00") for s in labels), labels
            assert {mdates.num2date(v).hour for v in ax.get_xticks()} == utc_hours
            assert labels[0].startswith("Mon 30 Nov"), labels
        finally:
            pyplot().close(fig)


def test_numbers_carry_their_unit_and_three_figures():
    assert fmt_bytes(1787859657) == "1.67 GiB" and fmt_bytes(512 * 2 ** 20) == "512 MiB" and fmt_bytes(900) == "900 B"
    assert fmt_millicores(1141) == "1.14 cores" and fmt_millicores(850) == "850m"
    assert fmt_money(86.0812, "USD") == "86.1 USD" and fmt_money(2659.8) == "2,660" and fmt_money(None) == "not measured"
    assert [significant(v) for v in (0.012345, 9.996, 0.5)] == ["0.0123", "10", "0.5"]


def test_the_live_page_s_reasons_carry_units():
    from contracts.quantity import readable_units
    from autoscaler.model.decisions import Reason, ResourceRecommendation

    rec = ResourceRecommendation("memory", 1787859657, 0, 0, 0, Reason("m@v", 0.9, 0.1, "1h", 1787859657))
    assert rec.reason_text().startswith("q0.9 of m@v over 1h +10% = 1.67 GiB")
    assert "1787859657" not in rec.reason_text()
    assert readable_units("cpu", 1141) == "1.14 cores" and readable_units("cpu", 850) == "850m"


# --- the cost report: every lever per day and per month -----------------------------------------

PER_DAY = 66.0  # what each lever saves a day, whatever its span


def _spans(tmp_path):
    """The fixture's prices and cluster, a VPA replay of 168 h, a colocation run of 2 days and a tide
    run of 21 days (504 h), each saving PER_DAY a day (prices: cpu 4 peak 08-22 UTC, 1 off-peak)."""
    f = write_inputs(tmp_path)
    hours = pd.date_range("2026-11-23T00:00Z", periods=168, freq="1h")
    # etl/nightly requests 2 cores; Tidewise asks one core less every hour. A core held a whole day
    # costs 10 off-peak hours x 1 + 14 peak hours x 4 = 66 = PER_DAY.
    saving_cores = PER_DAY / (10 * 1 + 14 * 4)
    rows = [("etl/Deployment/nightly/job/cpu", h.isoformat(), 2 - saving_cores, 0, 4) for h in hours]
    pd.DataFrame(rows, columns=["series", "timestamp", "target", "lower_bound", "upper_bound"]) \
        .to_csv(f["--vpa-replay"], index=False)
    (tmp_path / "coloc").mkdir()
    (tmp_path / "coloc" / "results.json").write_text(json.dumps({"bursts": "calibrated", "policies": {
        "tidewise": {"batch_core_hours": 400, "goodput_core_hours": 2 * PER_DAY}}}))  # off-peak price 1
    (tmp_path / "coloc" / "details.json").write_text(json.dumps({"settings": {"days": 2}}))
    (tmp_path / "tide").mkdir()
    (tmp_path / "tide" / "results.json").write_text(json.dumps({"policies": {
        "tidewise": {"node_hours_lent": 21 * PER_DAY / 64}}}))  # a node-hour: 32 x 1 + 128 x 0.25 = 64
    (tmp_path / "tide" / "details.json").write_text(json.dumps({"settings": {"days": 21}}))
    return f


def test_levers_over_168_48_and_504_hours_are_compared_per_day_and_per_month(tmp_path):
    from studies.cost.page import render, summary_lines
    from studies.cost.prices import load_prices
    from studies.cost.report import CostInputs, build_report

    f = _spans(tmp_path)
    report = build_report(load_prices(f["--cost"]), CostInputs(
        cluster_state=f["--cluster-state"], vpa_replay=f["--vpa-replay"],
        colocation=str(tmp_path / "coloc" / "results.json"), tide=str(tmp_path / "tide" / "results.json"),
        node_size=(32.0, 128.0)))
    vpa, coloc, tide = report.levers
    assert (vpa.hours, coloc.hours, tide.hours) == (168, 48, 504)
    # the totals differ with the spans (a sum of them would weigh the tide 10 times the colocation)
    assert (vpa.saved, coloc.saved, tide.saved) == pytest.approx((7 * PER_DAY, 2 * PER_DAY, 21 * PER_DAY))
    assert [lv.per_day for lv in report.levers] == pytest.approx([PER_DAY] * 3)  # the same saving an hour
    assert [lv.per_month for lv in report.levers] == pytest.approx([PER_DAY / 24 * 730] * 3)
    doc = report.to_json()
    assert doc["total_saved_per_day"] == pytest.approx(3 * PER_DAY)
    assert [lv["saved_per_day"] for lv in doc["levers"]] == pytest.approx([PER_DAY] * 3)
    text = text_of(render(report))
    assert "per day (EUR)" in text and "per month (EUR)" in text
    assert "all levers with a rate 198 6,020 " in text  # 198 a day, 6,022.5 a month: 3 figures
    assert f"tidal requests (VPA) 66 2,010 {significant(vpa.saved)} 168 h " in text
    assert any(ln.split()[-2:] == ["198", "6,020"] for ln in summary_lines(report) if ln.startswith("all levers"))


def test_a_simulation_without_its_span_is_priced_but_not_added(tmp_path):
    from studies.cost.page import render
    from studies.cost.prices import load_prices
    from studies.cost.report import CostInputs, build_report

    f = write_inputs(tmp_path)  # its colocation.json has no details.json beside it
    report = build_report(load_prices(f["--cost"]), CostInputs(colocation=f["--colocation"]))
    coloc = report.levers[1]
    assert coloc.saved == pytest.approx(100) and coloc.per_day is None
    assert report.to_json()["total_saved_per_day"] is None
    assert "span unknown" in text_of(render(report))


# --- the studies' wording -------------------------------------------------------------------------

def _verdict(slowdown_tw: float, slowdown_base: float) -> dict:
    run = {"goodput_core_hours": 2821.0, "utilisation": 0.72, "evictions": 16, "shortfall": 0.0}
    return {"shortfall_budget": 0.001, "goodput_target": 1.05, "eviction_target": 0.5, "utilisation_target": 0.65,
            "tidewise_best": {"label": "tidewise", **run, "slowdown_p95": slowdown_tw},
            "best_baseline": {"label": "katalyst@reserve=5", **run, "slowdown_p95": slowdown_base},
            "goodput_ratio": 1.0, "targets": {"goodput": False, "slowdown_p95": True, "evictions": True,
                                              "utilisation": True}}


def test_the_colocation_targets_name_each_setting_once_and_every_target_s_number():
    from studies.simulation.colocation.report import _runs, _targets

    text = text_of("".join(_targets(_verdict(1.09, 1.12))))
    assert "tidewise tidewise" not in text.lower()
    assert "(target ≤ 1.12, the baseline's)" in text
    assert not re.search(r"\(target [≤≥]\)", text)
    text = text_of("".join(_targets(_verdict(float("nan"), float("nan")))))
    assert "nan" not in text and "no batch job completed" in text
    row = {"utilisation": 0.26, "shortfall": 0.0, "nodes_with_shortfall": 0, "online_unserved_core_hours": 0.0,
           "goodput_core_hours": 0.0, "lost_core_hours": 0.0, "jobs_completed": 0, "slowdown_p50": float("nan"),
           "slowdown_p95": None, "evictions": 0, "held_back_cores": 22.2}
    assert "nan" not in text_of("".join(_runs({"none": row}))).lower()


def test_a_tide_run_shorter_than_a_week_is_not_called_the_week():
    from studies.simulation.tide.report import span_title

    assert span_title(7) == "The week"
    assert [span_title(d) for d in (1, 2, 14)] == ["The 1 simulated day", "The 2 simulated days",
                                                   "The 14 simulated days"]


def test_the_hpa_replay_page_explains_the_hpa_s_trade_off_only(tmp_path):
    from studies.replay.report import render

    for kind, own, other in (("hpa", "reactive HPA", "VPA"), ("vpa", "stock VPA", "HPA")):
        path = tmp_path / f"{kind}.html"
        render(str(path), "t", [], [], [], "m", tradeoff="AAAA", kind=kind)
        text = text_of(path.read_text())
        assert own in text and other not in text, text


def test_the_replay_plot_s_legend_is_beside_it_and_its_time_axis_says_utc():
    from studies.replay.report import lines_figure

    idx = pd.date_range("2026-11-30", periods=7 * 288, freq="5min", tz="UTC")
    usage = pd.Series(2 * GIB + GIB * np.sin(np.arange(len(idx)) / 46), index=idx)
    fig = lines_figure("ns/Deployment/web/app/memory", [("usage", usage, {}), ("request", usage * 1.2, {})],
                       "GiB", "memory")
    try:
        fig.canvas.draw()
        ax = fig.axes[0]
        assert not legend_over_data(ax) and ax.get_xlabel() == "time (UTC)"
        assert all(re.search(r"\d\d:\d\d$", t.get_text()) for t in ax.get_xticklabels() if t.get_text())
    finally:
        pyplot().close(fig)
