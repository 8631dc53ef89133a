"""The cost report's outputs: the HTML page (tables and matplotlib plots, nothing fetched), the
JSON document and the per-namespace CSV next to it, and the summary the command prints."""
from __future__ import annotations

import csv
import html
import io
import json
import os
from typing import Any

import numpy as np
import pandas as pd

from contracts.atomic import write_text_atomic
from studies.cost.ledger import MONTH_HOURS, NAMESPACE_COLUMNS, total_per_day
from studies.cost.report import CostReport
from reports.pages import PAGE_END, figure, figure_png, fmt_money, image, legend, page_start, significant, table, time_axis

NOT_MEASURED = "not measured"
NO_RATE = "span unknown"
HOURLY_LABELS = {"requested": "requested", "used": "used", "vpa_before": "requests before Tidewise (replayed series)",
                 "vpa_tidewise": "Tidewise's requests (replayed series)"}


def sibling_paths(out: str) -> dict[str, str]:
    """The page and, next to it with the same stem, the JSON document and the per-namespace CSV."""
    stem = os.path.splitext(out)[0]
    return {"report": out, "json": stem + ".json", "csv": stem + ".csv"}


def _money(v: Any) -> str:
    return v if isinstance(v, str) else fmt_money(v)


def _cell(v: Any) -> str:
    """Numbers to 3 significant figures (money and core-hours alike: what a reader compares)."""
    if v is None:
        return f'<span class="meta">{NOT_MEASURED}</span>'
    return html.escape(significant(v) if isinstance(v, float) else str(v))


def _rate(lv: Any, per: str) -> str | float | None:
    """A lever's saving per day or per month; text saying why when it has none."""
    value = lv.per_day if per == "day" else lv.per_month
    if value is None and lv.saved is not None:
        return NO_RATE
    return value


def lever_rows(report: CostReport) -> list[dict[str, Any]]:
    """The levers' table: each saving over its own span and, to compare and add them, per day and
    per month (30.4 days); a last row adds the rates."""
    cur = report.prices.currency
    rows = [{"lever": lv.name, f"per day ({cur})": _rate(lv, "day"), f"per month ({cur})": _rate(lv, "month"),
             f"saved ({cur})": lv.saved, "over": f"{lv.hours:g} h" if lv.hours else "–",
             "how (or why not)": lv.reason} for lv in report.levers]
    total = total_per_day(report.levers)
    if total is not None:
        rows.append({"lever": "all levers with a rate", f"per day ({cur})": total,
                     f"per month ({cur})": total / 24.0 * MONTH_HOURS, f"saved ({cur})": "–", "over": "–",
                     "how (or why not)": "the rates per day added (never totals over different spans)"})
    return rows


# the namespace chart's bars: (label, column), over the replay's window when a replay was priced
REPLAY_BARS: tuple[tuple[str, str], ...] = (("requested before Tidewise", "vpa_before_cost"), ("used", "vpa_used_cost"),
                                              ("Tidewise's requests", "vpa_tidewise_cost"))
HISTORY_BARS: tuple[tuple[str, str], ...] = (("requested", "requested_cost"), ("used", "used_cost"))


def namespace_bars(report: CostReport) -> tuple[str, list[str], dict[str, list[float | None]]]:
    """The chart's data: (the period every bar covers, the namespaces, label -> cost per namespace).
    Every bar covers the same hours of the same series: with a replay, the replayed series over the
    replay's hours (the request before, the usage and Tidewise's requests); without, the history."""
    rows = [r for r in report.namespaces if r["vpa_tidewise_cost"] is not None]
    if rows:
        bars, period = REPLAY_BARS, f"replayed series, vpa replay {report.windows.get('vpa replay')}"
    else:
        rows, bars, period = report.namespaces, HISTORY_BARS, f"history {report.windows.get('history')}"
    values = {label: [r[col] for r in rows] for label, col in bars if any(r[col] is not None for r in rows)}
    return period, [r["namespace"] for r in rows], values


def namespace_plot(report: CostReport) -> str | None:
    """Requested, used and (where replayed) Tidewise's requests, in money per namespace, all over
    one period (named in the title)."""
    period, names, values = namespace_bars(report)
    if not names or not values:
        return None
    fig, ax = figure(3.2)
    x, width = np.arange(len(names)), 0.8 / len(values)
    for i, (label, v) in enumerate(values.items()):
        ax.bar(x + i * width, [np.nan if c is None else c for c in v], width, label=label)
    ax.set_xticks(x + width * (len(values) - 1) / 2, names, rotation=20)
    ax.set_ylabel(report.prices.currency)
    ax.set_title(f"cost per namespace: {period}", fontsize=10)
    legend(ax)
    return figure_png(fig)


def hourly_plot(report: CostReport) -> str | None:
    """Money per hour across the cluster, peak hours shaded: online pays for its peak."""
    h = report.hourly
    if h.empty:
        return None
    fig, ax = figure(2.8)
    idx = pd.DatetimeIndex(h.index)
    peak = report.prices.is_peak(idx)
    for t in idx[peak]:
        ax.axvspan(t, t + pd.Timedelta(hours=1), color="#f4d58d", alpha=0.35, lw=0)
    edges = idx.append(pd.DatetimeIndex([idx[-1] + pd.Timedelta(hours=1)]))  # the last hour drawn whole
    for col in h.columns:
        values = h[col].to_numpy(dtype=float)
        ax.step(edges, np.append(values, values[-1]), where="post", label=HOURLY_LABELS.get(col, col))
    ax.set_ylabel(f"{report.prices.currency} per hour")
    ax.set_title("cost per hour across the cluster (peak hours shaded)", fontsize=10)
    time_axis(ax, report.prices.timezone)
    legend(ax)
    return figure_png(fig)


def lever_plot(report: CostReport) -> str | None:
    """What each lever saves per day, each from the span of its own input (levers not measured,
    or whose span is unknown, are named in the table, not drawn as 0); per month beside each bar."""
    rated = [lv for lv in report.levers if lv.per_day is not None]
    if not rated:
        return None
    cur = report.prices.currency
    fig, ax = figure(0.9 + 0.5 * len(rated))
    bars = ax.barh([lv.name for lv in rated], [lv.per_day for lv in rated], color="#1a7f37")
    ax.bar_label(bars, [f" {fmt_money(lv.per_day)} a day, {fmt_money(lv.per_month)} a month" for lv in rated])
    ax.set_xlim(0, max(0.0, *(lv.per_day or 0.0 for lv in rated)) * 1.6 or 1.0)  # room for the labels
    ax.set_xlabel(f"saved per day ({cur})")
    ax.set_title("what each lever saves per day (and per month of 730 h)", fontsize=10)
    return figure_png(fig)


def render(report: CostReport) -> str:
    meta = "; ".join([report.prices.describe(), *(f"{k}: {v}" for k, v in report.windows.items())])
    parts = page_start("Tidewise: what it saved, priced as a market", meta)
    parts += ["<h2>Levers</h2>", '<p class="meta">Each lever is measured over its own input (a replay\'s '
              "window, a simulation's days); it is compared and added per day and per month, never as totals over "
              "different spans.</p>", table(lever_rows(report), _cell)]
    plots = [("what each lever saves per day", lever_plot(report)), ("cost per namespace", namespace_plot(report)),
             ("cost per hour", hourly_plot(report))]
    parts += [image(png, alt) for alt, png in plots if png is not None]
    parts += ["<h2>Per namespace</h2>", table(report.namespaces, _cell)]
    for lv in report.levers:
        if lv.rows:
            parts += [f"<h2>{html.escape(lv.name)}</h2>", table(lv.rows, _cell)]
    if report.notes:
        parts += ["<h2>Left out</h2>", "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in report.notes) + "</ul>"]
    parts.append(PAGE_END)
    return "\n".join(parts)


def namespace_csv(report: CostReport) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(NAMESPACE_COLUMNS), lineterminator="\n")
    w.writeheader()
    w.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in report.namespaces)
    return buf.getvalue()


def write_outputs(report: CostReport, out: str) -> dict[str, str]:
    """Write the JSON, the CSV and the page (each atomically); returns their paths."""
    paths = sibling_paths(out)
    write_text_atomic(paths["json"], json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n")
    write_text_atomic(paths["csv"], namespace_csv(report))
    write_text_atomic(paths["report"], render(report))
    return paths


def summary_lines(report: CostReport) -> list[str]:
    """The table the command prints: each lever, then each namespace's requested and used cost."""
    cur = report.prices.currency
    lines = [f"{k}: {v}" for k, v in report.windows.items()]
    lines.append(f"{'lever':32s} {cur + ' a day':>14s} {cur + ' a month':>14s} {'saved ' + cur:>14s}  how (or why not)")
    lines += [f"{lv.name:32s} {_money(_rate(lv, 'day')):>14s} {_money(_rate(lv, 'month')):>14s} "
              f"{_money(lv.saved):>14s}  {lv.reason}" for lv in report.levers]
    total = total_per_day(report.levers)
    if total is not None:
        lines.append(f"{'all levers with a rate':32s} {_money(total):>14s} {_money(total / 24.0 * MONTH_HOURS):>14s}")
    if report.namespaces:
        lines.append(f"{'namespace':32s} {'requested':>14s} {'used':>14s} {'idle':>14s} {'VPA saved':>14s}")
        lines += [f"{r['namespace']:32s} {_money(r['requested_cost']):>14s} {_money(r['used_cost']):>14s} "
                  f"{_money(r['idle_cost']):>14s} {_money(r['vpa_saved']):>14s}" for r in report.namespaces]
    return lines
