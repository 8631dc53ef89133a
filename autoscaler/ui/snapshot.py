"""One completed run as the live page shows it: per VPA decision the workload's request in force,
the recommendation, the regime and its reason, the reason text, what it saves and whether it was
(or would be) written. The same dictionary is the page and /decisions.json; the chart inputs are
references to what the run already holds (its history and forecasts), read only when a workload
page asks, so a run pays nothing per workload for the plots.

No secrets and no configuration: the run's time, outcome and mode, and the decisions."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import pandas as pd

from autoscaler.model.decisions import ResourceRecommendation, VpaDecision
from autoscaler.model.views import requests_in_force
from autoscaler.output.sinks import DRY_RUN, WRITTEN, Sink
from autoscaler.routines.context import FROZEN, RunContext, RunReport, iso
from contracts.quantity import GIB, format_units
from predictor.history import History
from predictor.types import Forecast

REVIEW, DRY, APPLY = "review", "dry-run", "apply"
SCHEMA = 1


def sink_mode(sink: Sink) -> str:
    """apply: the sink writes to the cluster; review: YAML files (`--sink file`); dry-run: the log."""
    if getattr(sink, "updates_cluster", False):
        return APPLY
    return REVIEW if sink.name == "file" else DRY


@dataclass
class ChartInputs:
    """What a workload page's plots read: the run's own history and day-ahead forecasts (held by
    reference, not copied), and per workload key its series and replicas."""

    history: History
    forecasts: Mapping[str, Forecast]
    now: pd.Timestamp
    series: dict[str, dict[tuple[str, str], str]] = field(default_factory=dict)  # key -> (container, res) -> id


@dataclass
class Snapshot:
    """The page's data (`doc`, JSON-ready) and its plots' inputs (None before the first good run)."""

    doc: dict[str, Any]
    charts: ChartInputs | None = None

    def workload(self, key: str) -> dict[str, Any] | None:
        return next((w for w in self.doc["workloads"] if w["key"] == key), None)


def empty(mode: str) -> Snapshot:
    """Before the first run completes: the page says so."""
    return Snapshot({"schema": SCHEMA, "mode": mode, "run": None, "latest": None, "workloads": [], "decisions": {}})


def _change(key: str, rep: RunReport, outcomes: dict[str, str], mode: str) -> str:
    """What happened to the decision's VPA change this run, in the page's words."""
    if key in outcomes:
        out = outcomes[key]
        if out == WRITTEN:
            return "written" if mode == APPLY else "would write"
        return "would write" if out == DRY_RUN else f"not written: {out}"
    if key in rep.held:
        return f"held: {rep.held[key]}"
    if any(c.key == key for c in rep.changes):
        return "not written: kill switch" if rep.outcome != "ok" else "not written"
    return "unchanged"


def _regime_why(rec: ResourceRecommendation) -> str:
    """The regime's reason as the decision wrote it (`logic/regime.py` describe)."""
    return next((s for s in rec.reason.steps if s.startswith("regime ")), "")


def _resource(res: str, rec: ResourceRecommendation, request: int | None) -> dict[str, Any]:
    return {"resource": res, "request": request,
            "request_text": None if request is None else format_units(res, request),
            "target": rec.target, "target_text": format_units(res, rec.target),
            "lower": rec.lower, "upper": rec.upper, "lower_text": format_units(res, rec.lower),
            "upper_text": format_units(res, rec.upper), "regime": rec.regime, "regime_why": _regime_why(rec),
            "reason": rec.reason_text()}


UNIT = {"cpu": "cores", "memory": "GiB"}  # what the page shows each resource in
PER_UNIT = {"cpu": 1000.0, "memory": float(GIB)}  # the decisions' units (millicpu, bytes) in one of those


def saves(totals: dict[str, dict[str, int | None]], replicas: int) -> dict[str, float | None]:
    """(request - recommendation) x replicas, in cores and GiB; None where no request is known."""
    def one(res: str, per: float) -> float | None:
        t = totals.get(res)
        if not t or t["request"] is None:
            return None
        return round((t["request"] - (t["target"] or 0)) * max(1, replicas) / per, 3)
    return {"cores": one("cpu", PER_UNIT["cpu"]), "gib": one("memory", PER_UNIT["memory"])}


def workload_entry(d: VpaDecision, rep: RunReport, ctx: RunContext, outcomes: dict[str, str],
                   mode: str) -> dict[str, Any]:
    """One decision's row: per container and resource, and the workload's per-pod totals."""
    wl = ctx.state.workload(d.namespace, d.target_kind, d.target_name)
    in_force, source = requests_in_force(wl, ctx.state.pods_of(d.namespace, d.target_kind, d.target_name)) \
        if wl is not None else ({}, "template")
    containers: list[dict[str, Any]] = []
    totals: dict[str, dict[str, int | None]] = {}
    for c in d.containers:
        rows = []
        for res, rec in sorted(c.resources.items()):
            req = in_force.get((c.container, res))
            rows.append(_resource(res, rec, req))
            t = totals.setdefault(res, {"request": 0, "target": 0})
            t["target"] = (t["target"] or 0) + rec.target
            t["request"] = None if req is None or t["request"] is None else t["request"] + req
        containers.append({"container": c.container, "resources": rows})
    regimes = sorted({r["regime"] for c in containers for r in c["resources"]})
    return {"key": f"{d.namespace}/{d.target_kind}/{d.target_name}", "namespace": d.namespace,
            "kind": d.target_kind, "name": d.target_name, "vpa": d.name, "replicas": d.replicas,
            "requests_from": source, "change": _change(d.key, rep, outcomes, mode),
            "regime": regimes[0] if len(regimes) == 1 else "mixed" if regimes else "",
            "totals": totals, "saves": saves(totals, d.replicas), "containers": containers}


def run_decisions(rep: RunReport) -> dict[str, Any]:
    """Every change of the run that reached the sink, with its reasons, merged per object as the
    file sink merges them into decisions.json (written or, in a dry run, would be)."""
    out: dict[str, Any] = {}
    for c, r in zip(rep.changes, rep.results):
        if r.outcome in (WRITTEN, DRY_RUN):
            out[c.key] = {**out.get(c.key, {}), **c.reasons}
    return {k: out[k] for k in sorted(out)}


def build(rep: RunReport, ctx: RunContext, mode: str, number: int, completed: str,
          previous: Snapshot) -> Snapshot:
    """The snapshot after run `number`. A frozen run decided nothing: the page keeps the last
    good run's decisions and says the latest froze (at which step, not why: the reason may name a source)."""
    latest = {"number": number, "outcome": rep.outcome, "completed": completed,
              "step": rep.reason.split(":", 1)[0] if rep.outcome == FROZEN else ""}
    if rep.outcome == FROZEN or rep.now is None:
        return Snapshot({**previous.doc, "latest": latest}, previous.charts)
    outcomes = {c.key: r.outcome for c, r in zip(rep.changes, rep.results)}
    workloads = sorted((workload_entry(d, rep, ctx, outcomes, mode) for d in rep.vpa),
                       key=lambda w: (w["namespace"], w["kind"], w["name"]))
    charts = ChartInputs(ctx.history, ctx.forecasts, ctx.now)
    for w in workloads:
        series = ctx.index.get((w["namespace"], w["kind"], w["name"]))
        if series is not None:
            charts.series[w["key"]] = {(c, r): sid for c, rs in series.by_container.items() for r, sid in rs.items()}
    doc = {"schema": SCHEMA, "mode": mode, "latest": latest,
           "run": {"number": number, "now": iso(rep.now), "outcome": rep.outcome, "completed": completed},
           "workloads": workloads, "decisions": run_decisions(rep)}
    return Snapshot(doc, charts)
