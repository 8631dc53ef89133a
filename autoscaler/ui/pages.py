"""The live page's HTML: the fleet, one namespace, one workload. Every name and text from the
cluster or a decision is HTML-escaped here (links: each path segment percent-encoded, then
escaped). The page reloads itself every `refresh` seconds (a meta refresh: no script)."""
from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import quote

from autoscaler.ui.charts import BAND, MEDIAN, REQUEST, TARGET, USAGE, chart, svg
from autoscaler.ui.snapshot import APPLY, PER_UNIT, UNIT, Snapshot
from contracts.quantity import format_units

STYLE = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:8px 0 20px}th,td{border-bottom:1px solid #ddd;padding:4px 10px;text-align:left}
th{background:#f3f5f8}td.num{text-align:right;font-variant-numeric:tabular-nums}.banner{padding:8px;background:#fff4d6}
.muted{color:#666}.legend span{display:inline-block;margin-right:16px}.legend i{display:inline-block;width:18px;
height:4px;margin-right:4px;vertical-align:middle}a{color:#1f5fa8}"""
COLUMNS = ("workload", "kind", "replicas", "cpu request (cores)", "cpu recommended (cores)", "memory request (GiB)",
           "memory recommended (GiB)", "regime", "saves (cores)", "saves (GiB)", "change")


def e(value: object) -> str:
    return escape(str(value), quote=True)


def href(*segments: str) -> str:
    return e("/" + "/".join(quote(s, safe="") for s in segments))


def amount(resource: str, units: int | None) -> str:
    """Millicpu as cores, bytes as GiB, to 3 decimals (the exact quantity is the cell's title)."""
    if units is None:
        return "—"
    return f"{units / PER_UNIT[resource]:.3f}" if resource in PER_UNIT else str(units)


def cell(resource: str, units: int | None, cls: str, unit: bool = False) -> str:
    exact = "" if units is None else f' title="{e(format_units(resource, units))}"'
    suffix = f" {UNIT.get(resource, '')}" if unit and units is not None else ""
    return f'<td class="{cls} num"{exact}>{e(amount(resource, units) + suffix)}</td>'


def num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def frame(title: str, body: str, doc: dict[str, Any], refresh: int) -> str:
    run, latest = doc.get("run"), doc.get("latest")
    mode = doc["mode"]
    says = "changes are written to the cluster" if mode == APPLY else \
        "nothing is written to the cluster; changes show as \"would write\""
    head = (f'<p class="run">run {e(run["number"])}, decision time {e(run["now"])}, completed {e(run["completed"])}; '
            f'mode <b class="mode">{e(mode)}</b>: {e(says)}</p>' if run else
            '<p class="run">no run has completed yet</p>')
    if latest and run and latest["number"] != run["number"]:
        head += (f'<p class="banner">the latest run ({e(latest["number"])}, {e(latest["completed"])}) was '
                 f'{e(latest["outcome"])} at step {e(latest["step"])}: the decisions below are those of run '
                 f'{e(run["number"])}</p>')
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" '
            f'content="{int(refresh)}"><link rel="icon" href="data:,"><title>{e(title)} · Tidewise</title>'
            f'<style>{STYLE}</style></head><body><p class="muted"><a href="/">fleet</a> · '
            f'<a href="/decisions.json">decisions.json</a></p><h1>{e(title)}</h1>{head}{body}</body></html>')


def _row(w: dict[str, Any]) -> str:
    t = w["totals"]
    cells = [("name", f'<a href="{href("w", w["namespace"], w["kind"], w["name"])}">{e(w["name"])}</a>'),
             ("kind", e(w["kind"])), ("replicas num", e(w["replicas"]))]
    html = "".join(f'<td class="{c}">{v}</td>' for c, v in cells)
    for res in ("cpu", "memory"):
        got = t.get(res) or {}
        html += cell(res, got.get("request"), f"{res}-request") + cell(res, got.get("target"), f"{res}-target")
    cells = [("regime", e(w["regime"])), ("saves-cores num", e(num(w["saves"]["cores"]))),
             ("saves-gib num", e(num(w["saves"]["gib"]))), ("change", e(w["change"]))]
    html += "".join(f'<td class="{c}">{v}</td>' for c, v in cells)
    return f'<tr class="workload" data-key="{e(w["key"])}">{html}</tr>'


def _sum(ws: list[dict[str, Any]], unit: str) -> float:
    return round(sum(w["saves"][unit] or 0.0 for w in ws), 3)


def _table(ws: list[dict[str, Any]]) -> str:
    return ("<table><tr>" + "".join(f"<th>{c}</th>" for c in COLUMNS) + "</tr>" + "".join(_row(w) for w in ws)
            + "</table>")


def _namespace_block(ns: str, ws: list[dict[str, Any]], heading: bool) -> str:
    title = f'<h2><a href="{href("ns", ns)}">{e(ns)}</a></h2>' if heading else ""
    return (f'<section class="namespace" data-namespace="{e(ns)}">{title}<p>{len(ws)} workloads; saves '
            f'<span class="ns-cores">{num(_sum(ws, "cores"))}</span> cores and '
            f'<span class="ns-gib">{num(_sum(ws, "gib"))}</span> GiB (request − recommendation, × replicas)</p>'
            f"{_table(ws)}</section>")


def namespaces(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for w in doc["workloads"]:
        out.setdefault(w["namespace"], []).append(w)
    return out


def fleet(doc: dict[str, Any], refresh: int) -> str:
    by = namespaces(doc)
    ws = doc["workloads"]
    body = (f'<p class="fleet">{len(ws)} workloads in {len(by)} namespaces; saves <span class="fleet-cores">'
            f'{num(_sum(ws, "cores"))}</span> cores and <span class="fleet-gib">{num(_sum(ws, "gib"))}</span> GiB</p>'
            + "".join(_namespace_block(ns, items, True) for ns, items in sorted(by.items())))
    return frame("Recommendations", body, doc, refresh)


def namespace(doc: dict[str, Any], ns: str, refresh: int) -> str | None:
    ws = namespaces(doc).get(ns)
    return None if ws is None else frame(f"Namespace {ns}", _namespace_block(ns, ws, False), doc, refresh)


def _legend(band: str) -> str:
    items = [(USAGE, "usage per pod (hourly max, last week)"), (BAND, f"forecast band {band} (next day)"),
             (MEDIAN, "forecast median"), (REQUEST, "request in force"), (TARGET, "recommendation")]
    return '<p class="legend">' + "".join(f'<span><i style="background:{c}"></i>{e(t)}</span>' for c, t in items) + "</p>"


def workload(snap: Snapshot, key: str, refresh: int) -> str | None:
    w = snap.workload(key)
    if w is None:
        return None
    rows, plots = [], []
    for c in w["containers"]:
        for r in c["resources"]:
            rows.append(f'<tr class="resource" data-container="{e(c["container"])}" data-resource="{e(r["resource"])}">'
                        f'<td>{e(c["container"])}</td><td>{e(r["resource"])}</td>'
                        + cell(r["resource"], r["request"], "request", True)
                        + cell(r["resource"], r["target"], "target", True)
                        + f'<td class="bounds num" title="{e(r["lower_text"])} – {e(r["upper_text"])}">'
                        f'{e(amount(r["resource"], r["lower"]))} – {e(amount(r["resource"], r["upper"]))} '
                        f'{e(UNIT.get(r["resource"], ""))}</td>'
                        f'<td class="regime">{e(r["regime"])}</td><td class="regime-why">{e(r["regime_why"])}</td>'
                        f'<td class="reason">{e(r["reason"])}</td></tr>')
            ch = chart(snap.charts, key, c["container"], r["resource"], w["replicas"], r["request"], r["target"]) \
                if snap.charts is not None else None
            if ch is not None:
                plot = svg(ch, f"{c['container']} {r['resource']}")
                plots.append(f'<h3>{e(c["container"])} {e(r["resource"])} ({e(ch.unit)} per pod)</h3>'
                             f"{plot}{_legend(ch.band)}")
    body = (f'<p>{e(w["kind"])} in namespace <a href="{href("ns", w["namespace"])}">{e(w["namespace"])}</a>, '
            f'VPA {e(w["vpa"])}, <span class="replicas">{e(w["replicas"])}</span> replicas (requests read from '
            f'{e(w["requests_from"])}); change <b class="change">{e(w["change"])}</b>; saves '
            f'<span class="saves-cores">{num(w["saves"]["cores"])}</span> cores and '
            f'<span class="saves-gib">{num(w["saves"]["gib"])}</span> GiB</p>'
            "<table><tr><th>container</th><th>resource</th><th>request</th><th>recommended</th><th>bounds</th>"
            "<th>regime</th><th>why this regime</th><th>reason</th></tr>" + "".join(rows) + "</table>"
            + "".join(plots))
    return frame(f"{w['namespace']}/{w['kind']}/{w['name']}", body, snap.doc, refresh)


def not_found(what: str) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
            f'<title>not found</title></head><body><p>{e(what)}: not found. <a href="/">the fleet</a></p></body></html>')
