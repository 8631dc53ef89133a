"""The tide simulation's page: one self-contained HTML file (plots as base64 PNG, nothing fetched).

Sections: the verdict against the tide targets, every policy setting's numbers, the simulated
days (online demand, its forecast, nodes needed against nodes online under each policy's default;
"the week" when they are 7) and the day's picture (per hour of the day, nodes needed and nodes online/lent, mean over the simulated days).
"""
from __future__ import annotations

import html
from typing import Any

import numpy as np

from reports.pages import PAGE_END, figure_png, image, legend, page_start, pyplot
from studies.simulation.harness import outputs
from studies.simulation.harness.page import data_note, is_default, replaying
from studies.simulation.harness.traces import DAY_MIN
from studies.simulation.tide.study import TideStudy, details_json

COLOURS = {"watermark": "#d62728", "schedule": "#1f77b4", "tidewise": "#2ca02c", "oracle": "#7f7f7f",
           "tidewise-serve": "#98df8a"}


def _defaults(study: TideStudy) -> list:
    return [r for r in study.runs if is_default(r.label)]


def forecast_needed(study: TideStudy) -> np.ndarray | None:
    """Per minute, the nodes the median forecast (tidewise's default adds its calibrated margin to
    it) said the pool would need at that minute (the latest forecast made before it), with the
    pool's packing headroom: what the picture shows."""
    fc = study.forecasts
    if fc is None:
        return None
    q = 0.5
    out = np.zeros(study.pool.minutes)
    for t in range(study.pool.minutes):
        out[t] = fc.window(t - 1, q, 1)[0] if t > 0 else np.nan
    return np.where(np.isnan(out), np.nan, study.pool.needed_for(np.nan_to_num(out)).astype(float))


def _day_and_time(x: float, _pos: Any = None) -> str:
    """A tick of the simulated days (x in days from the start): `day 2\n06:00`."""
    minute = int(round(x * DAY_MIN))
    return f"day {minute // DAY_MIN + 1}\n{minute % DAY_MIN // 60:02d}:{minute % 60:02d}"


def span_title(days: int) -> str:
    """What the simulated days are called on the page: "The week" only for a run of 7 days."""
    return "The week" if days == 7 else f"The {days} simulated day" + ("" if days == 1 else "s")


def plot_week(study: TideStudy) -> str:
    """Nodes needed, forecast and online per policy default, every 15 minutes over the simulated days."""
    fig, ax = pyplot().subplots(figsize=(11, 4.2))
    pool = study.pool
    x = np.arange(pool.minutes) / DAY_MIN
    ax.plot(x, pool.needed, color="#000000", lw=0.8, label="nodes online service needs (HPA requests)")
    fn = forecast_needed(study)
    if fn is not None:
        ax.plot(x, fn, color="#2ca02c", lw=0.8, ls=":", label="median forecast of it (1 h old at most)")
    for r in _defaults(study):
        ax.plot(x, r.online_nodes, color=COLOURS.get(r.label), lw=1.0, alpha=0.8,
                label=f"nodes online: {r.label} ({r.node_hours_lent:.0f} node-h lent)")
    ax.axhline(pool.nodes, color="#999999", lw=0.8, ls="--", label=f"pool ({pool.nodes} nodes)")
    from matplotlib.ticker import FuncFormatter

    days = pool.minutes / DAY_MIN
    ax.set_xticks(np.arange(0, days + 1e-9, 1.0 if days > 3 else 0.25))
    ax.xaxis.set_major_formatter(FuncFormatter(_day_and_time))
    ax.set_xlim(0, days)
    ax.set_xlabel("simulated day and time of day")
    ax.set_ylabel("nodes")
    ax.set_ylim(0, pool.nodes + 2)
    ax.grid(alpha=0.3)
    legend(ax)
    ax.set_title(f"{span_title(study.settings.days)}: nodes online service needed and nodes each policy kept online "
                 "(the rest was lent)", fontsize=10, loc="left", wrap=True)
    return figure_png(fig)


def plot_day(study: TideStudy) -> str:
    """The day's picture: per hour of the day, means over the simulated days; one panel above the
    other (nodes online against needed, nodes lent, online demand), each legend beside its panel."""
    fig, axes = pyplot().subplots(3, 1, figsize=(9, 8.4), sharex=True)
    pool = study.pool
    days = pool.minutes // DAY_MIN

    def by_hour(a: np.ndarray) -> np.ndarray:
        return np.asarray(a[:days * DAY_MIN], dtype=float).reshape(days, 24, 60).mean(axis=(0, 2))

    hours = np.arange(24) + 0.5
    ax = axes[0]
    ax.plot(hours, by_hour(pool.needed), color="#000000", label="needed")
    fn = forecast_needed(study)
    if fn is not None:
        ax.plot(hours, by_hour(np.nan_to_num(fn, nan=float(pool.needed[0]))), color="#2ca02c", ls=":",
                label="forecast")
    for r in _defaults(study):
        ax.plot(hours, by_hour(r.online_nodes), color=COLOURS.get(r.label), label=f"online: {r.label}")
    ax.set_title("nodes online vs needed, mean per hour", fontsize=10)
    ax.set_ylabel("nodes")
    ax2 = axes[1]
    for r in _defaults(study):
        ax2.plot(hours, by_hour(r.lent_nodes), color=COLOURS.get(r.label), label=f"lent: {r.label}")
    ax2.set_title("nodes lent to batch, mean per hour", fontsize=10)
    ax2.set_ylabel("nodes")
    ax3 = axes[2]
    ax3.plot(hours, by_hour(pool.demand), color="#777777", ls="--", lw=1.0, label="online demand")
    ax3.set_title("online CPU demand, mean per hour", fontsize=10)
    ax3.set_ylabel("cores")
    ax3.set_xlabel("hour of the simulated day")
    for a in axes:
        a.set_xlim(0, 24)
        a.set_xticks(range(0, 25, 3))
        a.grid(alpha=0.3)
        legend(a)
    return figure_png(fig)


def _verdict(v: dict[str, Any]) -> list[str]:
    e = html.escape
    parts = ["<h2>Targets (issue 17)</h2><ul>"]
    if "targets" not in v:
        parts.append("<li class='bad'>no tidewise default or no watermark setting with no more late minutes"
                     "</li></ul>")
        return parts
    t, w, ok = v["tidewise"], v["best_watermark"], v["targets"]
    per = v["pods_moved_per_100_node_hours"]
    rows = [("lend", f"tidewise (default) lends {t['node_hours_lent']:.0f} node-hours, the best watermark with no more "
                     f"late minutes (<code>{e(w['label'])}</code>) {w['node_hours_lent']:.0f}: {v['lend_ratio']:.2f}x "
                     f"(target &ge; {v['lend_target']:g}x)"),
            ("zero_late", f"tidewise's late minutes: {t['late_minutes']} (target 0)"),
            ("pods_moved", f"pods moved per 100 node-hours lent: {per['tidewise']:.1f} vs {per['best_watermark']:.1f} "
                           f"({t['pods_moved_per_day']:.0f} vs {w['pods_moved_per_day']:.0f} a day; target &le; at "
                           "equal lending)")]
    for key, text in rows:
        parts.append(f"<li class='{'good' if ok[key] else 'bad'}'>{text}: {'met' if ok[key] else 'missed'}</li>")
    parts.append("</ul>")
    return parts


def _table(runs: dict[str, dict[str, Any]]) -> list[str]:
    cols = ["node_hours_lent", "late_minutes", "pods_moved", "pods_moved_per_day", "pods_moved_per_100_node_hours",
            "online_pods_drained", "batch_pods_evicted", "goodput_core_hours", "lost_core_hours", "lends", "returns",
            "jobs_completed"]
    parts = ["<h2>Every policy setting</h2><table><tr><th>policy</th>"
             + "".join(f"<th>{html.escape(c.replace('_', ' '))}</th>" for c in cols) + "</tr>"]
    for label, r in runs.items():
        cells = "".join(f"<td>{r[c]:.1f}</td>" if isinstance(r[c], float) else f"<td>{r[c]}</td>" for c in cols)
        parts.append(f"<tr><td class='k'>{html.escape(label)}</td>{cells}</tr>")
    parts.append("</table>")
    return parts


def render_tide_report(study: TideStudy, details: dict[str, Any]) -> str:
    """The page, from the study (for the plots) and its details (for everything else)."""
    p, s, ps = details["pool"], study.settings, details["pool_settings"]
    parts = page_start("Tidewise tide simulation")
    source, note = html.escape(replaying(study.history, len(p["traces"]))), html.escape(data_note(study.history))
    parts.append(f"<p class='meta'>{p['nodes']} nodes x {p['allocatable_per_node']:g} allocatable cores; "
                 f"{p['services']} online services {source} under the HPA "
                 f"(mean {p['mean_online_pods']:.0f} pods, {p['mean_requested_cores']:.0f} cores requested for "
                 f"{p['mean_demand_cores']:.0f} used); online service needs {p['needed_min']}-{p['needed_max']} "
                 f"nodes (mean {p['needed_mean']:.1f}), {p['lendable_node_hours']:.0f} node-hours could be lent at "
                 f"most; {s.days} days at 1 minute, seed {s.seed}; forecast model "
                 f"<code>{html.escape(str(details['forecast_model']))}</code>. {note}</p>")
    parts += _verdict(details["verdict"]) + _table(details["runs"])
    parts.append(f"<h2>{span_title(s.days)}</h2>{image(plot_week(study))}")
    parts.append(f"<h2>The day's picture</h2>{image(plot_day(study))}")
    parts.append("<h2>Model</h2><p class='meta'>See docs/tide-simulator.md: a late minute is one in which online "
                 "service needed more nodes than were serving it; a lent node drains the online side's mean pods per "
                 f"node and takes batch {ps['drain_minutes']} minutes later; a handed-back node evicts its batch pods "
                 f"at once and serves online {ps['return_minutes']} minutes later.</p>")
    parts.append(PAGE_END)
    return "\n".join(parts)


def write_tide_outputs(study: TideStudy, out_dir: str) -> dict[str, str]:
    """results.json (the contract), details.json and report.html in out_dir, each written atomically (here, not in
    tide.study, so that the study does not import its page)."""
    details = details_json(study)
    return outputs.write_outputs(out_dir, study.results_json(), details, render_tide_report(study, details))
