"""The simulation report: one self-contained HTML page (plots as base64 PNG, nothing fetched).

Sections: the verdict against issue 13's targets, the table of every policy and sweep setting,
the shortfall-versus-utilisation frontier and goodput against p95 slowdown per policy (at the
run's burst setting), utilisation over the day, what tidewise kept back and deferred, and per
node how often the forecast quantiles were exceeded.
"""
from __future__ import annotations

import html
from typing import Any

import numpy as np

from reports.pages import PAGE_END, figure_png, image, legend, page_start, pyplot
from studies.simulation.colocation.study import Study
from studies.simulation.harness.page import data_note, family, is_default, replaying
from studies.simulation.harness.traces import DAY_MIN

COLOURS = {"none": "#555555", "katalyst": "#d62728", "koordinator": "#1f77b4", "tidewise": "#2ca02c"}


def plot_daily(study: Study) -> str:
    """Mean utilisation over the day, per policy's default setting."""
    fig, ax = pyplot().subplots(figsize=(9, 4))
    for r in study.results:
        if not is_default(r.label):
            continue
        T = len(r.util_by_minute) // DAY_MIN * DAY_MIN
        if T == 0:
            continue
        by_day = r.util_by_minute[:T].reshape(-1, DAY_MIN).mean(axis=0)
        q = by_day.reshape(-1, 15).mean(axis=1)  # quarter-hours
        ax.plot(np.arange(len(q)) / 4, 100 * q, label=f"{r.label} (mean {100 * r.utilisation:.1f}%)",
                color=COLOURS.get(family(r.label)))
    ax.set_xlabel("hour of the simulated day (each trace keeps its own time of day)")
    ax.set_ylabel("node CPU utilisation, %")
    ax.set_xlim(0, 24)
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    legend(ax)
    ax.set_title("Utilisation over the day, mean over nodes and days")
    return figure_png(fig)


def plot_frontier(study: Study, budget: float) -> str:
    """Shortfall against utilisation of every swept setting, one line per policy."""
    fig, ax = pyplot().subplots(figsize=(9, 4.5))
    fams: dict[str, list] = {}
    for r in study.results:
        fams.setdefault(family(r.label), []).append(r)
    floor = 1e-4  # percent; zero shortfall is drawn on this line (log axis)
    for fam, runs in fams.items():
        runs = sorted(runs, key=lambda r: r.utilisation)
        x = [100 * r.utilisation for r in runs]
        y = [max(100 * r.shortfall, floor) for r in runs]
        ax.plot(x, y, "o-" if len(runs) > 1 else "o", color=COLOURS.get(fam), label=fam, alpha=0.8)
        for r in runs:
            if not is_default(r.label):
                ax.annotate(r.label.split("@")[1], (100 * r.utilisation, max(100 * r.shortfall, floor)),
                            fontsize=6, alpha=0.7, xytext=(3, 3), textcoords="offset points")
    ax.axhline(100 * budget, color="#b42318", ls="--", lw=1, label=f"shortfall budget {100 * budget:g}%")
    ax.set_yscale("log")
    ax.set_xlabel("mean node CPU utilisation, %")
    ax.set_ylabel(f"online shortfall, % of node-minutes (0 drawn at {floor:g})")
    ax.grid(alpha=0.3, which="both")
    legend(ax)
    ax.set_title(f"Shortfall versus utilisation: each policy's swept settings (bursts: {study.settings.bursts})")
    return figure_png(fig)


def plot_goodput(study: Study, budget: float) -> str:
    """Goodput against p95 slowdown of every setting; hollow markers are over the shortfall budget."""
    fig, ax = pyplot().subplots(figsize=(9, 4.5))
    for r in study.results:
        if family(r.label) == "none" or not np.isfinite(r.slowdown_p95):
            continue
        ok = r.shortfall <= budget
        colour = COLOURS.get(family(r.label))
        ax.plot([r.slowdown_p95], [r.goodput_core_hours], "o", color=colour, alpha=0.85,
                markerfacecolor=colour if ok else "none")
        ax.annotate(r.label, (r.slowdown_p95, r.goodput_core_hours), fontsize=6, alpha=0.7, xytext=(3, 3),
                    textcoords="offset points")
    for fam, colour in COLOURS.items():
        if fam != "none":
            ax.plot([], [], "o", color=colour, label=fam)
    ax.plot([], [], "o", color="#999999", markerfacecolor="none", label=f"over the {100 * budget:g}% shortfall budget")
    ax.set_xlabel("batch slowdown, p95 (runtime / nominal runtime)")
    ax.set_ylabel("goodput, core-hours (batch CPU less evicted work)")
    ax.grid(alpha=0.3)
    legend(ax)
    ax.set_title(f"Goodput versus slowdown (bursts: {study.settings.bursts})")
    return figure_png(fig)


def _pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"


def _slowdown(x: Any) -> str:
    """A p50/p95 slowdown; none when no batch job completed (its value is then NaN, or null once in JSON)."""
    return f"{x:.2f}" if isinstance(x, (int, float)) and np.isfinite(x) else "–"


def _slowdown_row(t: dict[str, Any], b: dict[str, Any]) -> str:
    """The slowdown target's line: tidewise's p95 against the baseline's, which is the target."""
    if _slowdown(t["slowdown_p95"]) == "–" or _slowdown(b["slowdown_p95"]) == "–":
        return f"p95 slowdown {_slowdown(t['slowdown_p95'])} vs {_slowdown(b['slowdown_p95'])}: no batch job completed"
    return (f"p95 slowdown {_slowdown(t['slowdown_p95'])} vs {_slowdown(b['slowdown_p95'])} "
            f"(target &le; {_slowdown(b['slowdown_p95'])}, the baseline's)")


def _header(study: Study, c: dict[str, Any]) -> str:
    e = html.escape
    return (f"<p class='meta'>{c['nodes']} nodes x {c['cores_per_node']:g} cores ({c['allocatable_per_node']:g} "
            f"allocatable), {c['services']} online services {e(replaying(study.history, len(c['traces'])))}, "
            f"requests at {_pct(c['requested_share'])} of allocatable; {study.settings.days} simulated days at "
            f"1 minute; bursts inside the minute: <b>{e(study.settings.bursts)}</b> (mean peak over the minute's mean "
            f"{c['mean_peak_over_mean_cores']:.2f} cores per node); seed {study.settings.seed}; forecasts: model <code>{e(study.settings.forecast_model)}</code>. "
            f"No-colocation utilisation {_pct(c['no_colocation_utilisation'])}. {e(data_note(study.history))}</p>")


def _targets(v: dict[str, Any]) -> list[str]:
    """The verdict against issue 13's targets, met or missed."""
    e = html.escape
    parts = ["<h2>Targets (issue 13)</h2><p>Each family's setting with the most goodput among those within "
             f"the {_pct(v['shortfall_budget'])} shortfall budget.</p><ul>"]
    if "goodput_ratio" not in v:
        parts.append("<li class='bad'>no tidewise or no baseline setting within the budget</li></ul>")
        return parts
    t, b, ok = v["tidewise_best"], v["best_baseline"], v["targets"]
    rows = [("goodput", f"{t['goodput_core_hours']:.0f} vs {b['goodput_core_hours']:.0f} core-hours "
                        f"({v['goodput_ratio']:.3f}x, target &ge; {v['goodput_target']:g}x)"),
            ("slowdown_p95", _slowdown_row(t, b)),
            ("evictions", f"evictions {t['evictions']} vs {b['evictions']} (target &le; "
                          f"{v['eviction_target']:g}x)"),
            ("utilisation", f"utilisation {_pct(t['utilisation'])} (target &ge; {_pct(v['utilisation_target'], 0)})")]
    parts.append(f"<li>Tidewise's best setting, <code>{e(t['label'])}</code>, against the best baseline setting, "
                 f"<code>{e(b['label'])}</code></li>")
    for key, text in rows:
        parts.append(f"<li class='{'good' if ok[key] else 'bad'}'>{text}: {'met' if ok[key] else 'missed'}</li>")
    parts.append("</ul>")
    return parts


def _runs(runs: dict[str, dict[str, Any]]) -> list[str]:
    """Every policy and sweep setting's totals."""
    parts = ["<h2>Every policy and sweep setting</h2><table><tr><th>policy</th><th>utilisation</th>"
             "<th>shortfall (node-minutes)</th><th>nodes with shortfall</th><th>online core-hours delayed</th>"
             "<th>goodput core-hours</th><th>lost core-hours</th><th>jobs completed</th><th>slowdown p50</th>"
             "<th>slowdown p95</th><th>evictions</th><th>cores held back beyond online demand</th></tr>"]
    for label, r in runs.items():
        parts.append(f"<tr><td class='k'>{html.escape(label)}</td><td>{_pct(r['utilisation'])}</td>"
                     f"<td>{_pct(r['shortfall'], 4)}</td><td>{r['nodes_with_shortfall']}</td>"
                     f"<td>{r['online_unserved_core_hours']:.2f}</td><td>{r['goodput_core_hours']:.0f}</td>"
                     f"<td>{r['lost_core_hours']:.0f}</td><td>{r['jobs_completed']}</td>"
                     f"<td>{_slowdown(r['slowdown_p50'])}</td><td>{_slowdown(r['slowdown_p95'])}</td>"
                     f"<td>{r['evictions']}</td><td>{r['held_back_cores']:.2f}</td></tr>")
    parts.append("</table><p class='meta'>Cores held back = allocatable - batch quota - online demand, mean per "
                 "node-minute: the room each policy leaves online work beyond what it asks for. At equal shortfall, "
                 "less is better.</p>")
    return parts


def _breakdown(breakdown: dict[str, dict[str, float]]) -> list[str]:
    """What tidewise kept back (its reserve) and the jobs its forecast kept off a node."""
    if not breakdown:
        return []
    e = html.escape
    parts = ["<h2>What tidewise kept back and deferred</h2><p>Mean reserve (cores per node-minute: the "
             "quantile of each node's one-minute-ahead errors), jobs placed, and times the day-ahead forecast "
             "kept a job off the cluster although some node's current quota had room for it (the job waited "
             "for a node whose capacity is forecast to last).</p><table><tr><th>setting</th>"
             + "".join(f"<th>{e(k.replace('_', ' '))}</th>" for k in next(iter(breakdown.values()))) + "</tr>"]
    for label, row in breakdown.items():
        parts.append(f"<tr><td class='k'>{e(label)}</td>" + "".join(f"<td>{x:.2f}</td>" for x in row.values())
                     + "</tr>")
    parts.append("</table>")
    return parts


def _coverage_cell(k: str, x: Any) -> str:
    if isinstance(x, float) and k.startswith("exceed"):
        cls = " class='bad'" if k == "exceed_q0.95" and x > 0.1 else ""
        return f"<td{cls}>{_pct(x)}</td>"
    if isinstance(x, float):
        return f"<td>{x:.3f}</td>"
    return f"<td class='k'>{html.escape(str(x))}</td>" if isinstance(x, str) else f"<td>{x}</td>"


def _coverage(coverage: list[dict[str, Any]]) -> list[str]:
    """Per series, how often the 1-minute demand exceeded each day-ahead forecast quantile."""
    if not coverage:
        return []
    e = html.escape
    cols = [k for k in coverage[0] if k not in ("series",)]
    parts = ["<h2>Forecast quality per series</h2><p>Share of evaluation minutes whose 1-minute demand "
             "exceeded each day-ahead forecast quantile (the forecasts are of each 15-minute step's peak "
             "minute, so a calibrated q0.95 is exceeded less than 5% of the minutes), the mean miss above "
             "q0.95 and the mean over-forecast below it. The over-forecast is CPU that tidewise keeps from "
             "batch unless the nowcast corrects it; the misses are what the reactive term catches late.</p>"
             "<table><tr><th>series</th>" + "".join(f"<th>{e(k)}</th>" for k in cols) + "</tr>"]
    for row in sorted(coverage, key=lambda r: -r.get("exceed_q0.95", 0)):
        cells = "".join(_coverage_cell(k, row.get(k)) for k in cols)
        parts.append(f"<tr><td class='k'>{e(row['series'])}</td>{cells}</tr>")
    parts.append("</table>")
    return parts


def render_report(study: Study, details: dict[str, Any]) -> str:
    """The page, from the study (for the plots) and its `details_json` (for everything else)."""
    v = details["verdict"]
    parts = page_start("Tidewise colocation simulation")
    parts.append(_header(study, details["cluster"]))
    parts += _targets(v) + _runs(details["runs"])
    parts.append(f"<h2>Shortfall versus utilisation</h2>{image(plot_frontier(study, v['shortfall_budget']))}")
    parts.append(f"<h2>Goodput versus slowdown</h2>{image(plot_goodput(study, v['shortfall_budget']))}")
    parts.append(f"<h2>Utilisation over the day</h2>{image(plot_daily(study))}")
    parts += _breakdown(details["tidewise_breakdown"]) + _coverage(details["forecast_coverage"])
    parts.append("<h2>Model</h2><p class='meta'>See docs/colocation-simulator.md: 1-minute control loop, quota "
                 "applied one minute after the measurement it is based on, batch throttled to its quota and evicted "
                 "(newest first, back to the queue) when the quota covers under half of its requests; shortfall = a "
                 "node-minute whose online peak inside the minute did not fit beside the CPU batch held.</p>")
    parts.append(PAGE_END)
    return "\n".join(parts)
