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
from studies.cost.ledger import NAMESPACE_COLUMNS
from studies.cost.report import CostReport
from reports.pages import PAGE_END, figure, figure_png, image, legend, page_start, table

NOT_MEASURED = "not measured"
HOURLY_LABELS = {"requested": "requested", "used": "used", "vpa_before": "requests before Tidewise (replayed series)",
                 "vpa_tidewise": "Tidewise's requests (replayed series)"}


def sibling_paths(out: str) -> dict[str, str]:
    """The page and, next to it with the same stem, the JSON document and the per-namespace CSV."""
    stem = os.path.splitext(out)[0]
    return {"report": out, "json": stem + ".json", "csv": stem + ".csv"}


def _money(v: Any) -> str:
    return NOT_MEASURED if v is None else f"{v:,.2f}"


def _cell(v: Any) -> str:
    if v is None:
        return f'<span class="meta">{NOT_MEASURED}</span>'
    return html.escape(f"{v:,.2f}" if isinstance(v, float) else str(v))


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
    ax.set_xticks(x + width * (len(values) - 1) / 2, names, fontsize=7, rotation=20)
    ax.set_ylabel(report.prices.currency, fontsize=8)
    ax.set_title(f"cost per namespace: {period}", fontsize=9)
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
    ax.set_ylabel(f"{report.prices.currency} per hour", fontsize=8)
    ax.set_title("cost per hour across the cluster (peak hours shaded)", fontsize=9)
    legend(ax, loc="upper left")
    fig.autofmt_xdate()
    return figure_png(fig)


def lever_plot(report: CostReport) -> str | None:
    """What each measured lever saved (levers not measured are named in the table, not drawn as 0)."""
    measured = [lv for lv in report.levers if lv.saved is not None]
    if not measured:
        return None
    fig, ax = figure(2.6)
    ax.barh([lv.name for lv in measured], [lv.saved for lv in measured], color="#1a7f37")
    ax.set_xlabel(f"saved ({report.prices.currency})", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title("what each lever saved", fontsize=9)
    return figure_png(fig)


def render(report: CostReport) -> str:
    meta = "; ".join([report.prices.describe(), *(f"{k}: {v}" for k, v in report.windows.items())])
    parts = page_start("Tidewise: what it saved, priced as a market", meta)
    levers = [{"lever": lv.name, "saved": lv.saved, "how (or why not)": lv.reason} for lv in report.levers]
    parts += ["<h2>Levers</h2>", table(levers, _cell)]
    plots = [("what each lever saved", lever_plot(report)), ("cost per namespace", namespace_plot(report)),
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
    lines.append(f"{'lever':32s} {'saved ' + cur:>14s}  how (or why not)")
    lines += [f"{lv.name:32s} {_money(lv.saved):>14s}  {lv.reason}" for lv in report.levers]
    if report.namespaces:
        lines.append(f"{'namespace':32s} {'requested':>14s} {'used':>14s} {'idle':>14s} {'VPA saved':>14s}")
        lines += [f"{r['namespace']:32s} {_money(r['requested_cost']):>14s} {_money(r['used_cost']):>14s} "
                  f"{_money(r['idle_cost']):>14s} {_money(r['vpa_saved']):>14s}" for r in report.namespaces]
    return lines
