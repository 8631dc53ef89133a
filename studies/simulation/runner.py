"""One simulation study: traces -> cluster -> forecasts -> every policy and sweep -> outputs.

`run_study` is what `tidewise simulate colocation` and `benchmarks/colocation.py` call;
`write_outputs` writes `results.json` (the fixed contract), `details.json` (what the report shows,
machine-readable) and `report.html`. The settings and the `Study` it returns are in `study`.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import asdict
from typing import Callable, ContextManager

import numpy as np

from contracts.errors import InputError
from predictor.atomic import write_text_atomic
from predictor.types import finite_or_none
from studies.simulation.cluster import Cluster, ClusterSettings, build_cluster
from studies.simulation.engine import RunResult, simulate
from studies.simulation.forecasts import (QUANTILES, forecast_coverage, forecast_series, forecast_traces,
                                          node_forecasts, node_level_forecasts, node_series)
from studies.simulation.policies import POLICY_NAMES, NodeForecasts, Observation, Tidewise, policy_set
from studies.simulation.report import render_report
from studies.simulation.study import Study, StudySettings, details_json
from studies.simulation.traces import DAY_MIN, Trace, load_traces

log = logging.getLogger(__name__)


def tidewise_breakdown(cluster: Cluster, policy: Tidewise, result: RunResult) -> dict[str, float]:
    """Where tidewise's held-back CPU goes, in mean cores per node-minute (see the report).

    Replays the policy's estimate on the measured demand (which no policy changes) and splits what
    it keeps from batch against the demand that the next minute really brought."""
    policy.reset(cluster)
    T, n = cluster.minutes, cluster.nodes
    bias, miss, est = np.zeros((n, T)), np.zeros((n, T)), np.zeros((n, T))
    zeros = np.zeros(n)
    for t in range(T):
        o = Observation(t, cluster.online[:, t], cluster.online[:, t], zeros, zeros)
        b = policy.level_error(o)
        policy.misses[:, t % policy.recent] = np.maximum(0.0, o.online_demand - (policy.now[:, t] + b))
        bias[:, t], miss[:, t] = b, policy.misses.max(axis=1)
        est[:, t] = np.maximum(policy.peak[:, min(t + 1, policy.peak.shape[1] - 1)] + b + miss[:, t], o.online_demand)
    nxt = np.concatenate([cluster.online[:, 1:], cluster.online[:, -1:]], axis=1)
    q_next = np.concatenate([policy.now[:, 1:T], policy.now[:, T - 1:T]], axis=1)
    p_next = policy.peak[:, np.minimum(np.arange(T) + 1, policy.peak.shape[1] - 1)]
    return {
        "online_demand_next_minute": float(nxt.mean()),
        "forecast_quantile_over_demand": float((q_next - nxt).mean()),
        "window_peak_over_quantile": float((p_next - q_next).mean()),
        "nowcast_correction": float(bias.mean()),
        "reactive_term": float(miss.mean()),
        "estimate_over_demand": float((est - nxt).mean()),
        "reserve_and_margin": float(policy.s.reserved_millicpu / 1000 + policy.margin_m / 1000),
        "batch_used": float(result.batch_by_minute.mean()),
    }


ProgressFactory = Callable[[str, int], ContextManager[Callable[[int], None]]]


def _stage(progress: ProgressFactory | None, description: str, total: int) -> ContextManager:
    return progress(description, total) if progress is not None else contextlib.nullcontext(None)


def _check(s: StudySettings) -> None:
    if s.policy != "all" and s.policy not in POLICY_NAMES:
        raise InputError(f"--policy {s.policy!r}: use all or one of {', '.join(POLICY_NAMES)}")
    if s.nodes < 1:
        raise InputError(f"--nodes {s.nodes}: at least one node")
    if s.forecast_level not in ("node", "service"):
        raise InputError(f"forecast level {s.forecast_level!r}: use node or service")
    if not 1 <= s.days <= 14:
        raise InputError(f"--days {s.days}: between 1 and 14 (each trace needs 5 history days before them)")


def _service_forecasts(s: StudySettings, traces: list[Trace], cluster: Cluster, progress: ProgressFactory | None
                       ) -> tuple[NodeForecasts, list[dict], dict[str, str]]:
    """Every trace forecast, the services' quantiles summed per node (as the serving loop sums pods')."""
    with _stage(progress, f"forecasting {len(traces)} traces, one call per simulated day", s.days) as adv:
        per_trace, models = forecast_traces(traces, s.days, model=s.forecast_model, cache_dir=s.cache_dir,
                                            progress=adv)
    nf = node_forecasts(cluster, per_trace, models, QUANTILES)
    names = [t.name for t in traces]
    coverage = forecast_coverage(names, np.stack([t.eval_1min[:cluster.minutes] for t in traces]),
                                 per_trace, QUANTILES, unit="history p99")
    return nf, coverage, models


def _node_forecasts(s: StudySettings, cluster: Cluster, progress: ProgressFactory | None
                    ) -> tuple[NodeForecasts, list[dict], dict[str, str]]:
    """Each node's online demand forecast as one series."""
    series = node_series(cluster)
    with _stage(progress, f"forecasting {len(series)} nodes, one call per simulated day", s.days) as adv:
        per_node, models = forecast_series(series, s.days, model=s.forecast_model, cache_dir=s.cache_dir,
                                           progress=adv)
    full = np.zeros((cluster.nodes,) + per_node.shape[1:])
    index = {name: i for i, name in enumerate(series)}
    for n in range(cluster.nodes):
        if f"node/node-{n:03d}/cpu" in index:
            full[n] = per_node[index[f"node/node-{n:03d}/cpu"]]
    nf = node_level_forecasts(cluster, full, models, QUANTILES)
    names = [f"node/node-{n:03d}/cpu" for n in range(cluster.nodes)]
    coverage = forecast_coverage(names, cluster.online, full, QUANTILES)
    for n, row in enumerate(coverage):
        row["traces"] = ", ".join(sorted({cluster.traces[x.trace].name for x in cluster.services if x.node == n}))
    return nf, coverage, models


def run_study(s: StudySettings, progress: ProgressFactory | None = None) -> Study:
    """Everything but the writing. `progress(description, total)` (e.g. `tidewise.progress.progress`)
    yields an `advance(n)` per stage: forecasting (per simulated day), then simulating (per day and run)."""
    _check(s)
    traces = load_traces(s.traces, days=s.days, max_history_days=s.max_history_days, names=s.trace_names)
    cs = ClusterSettings(**{**asdict(s.cluster), "nodes": s.nodes})
    cluster = build_cluster(traces, cs, seed=s.seed, minutes=s.days * DAY_MIN)
    log.info("cluster: %d nodes, %d services from %d traces; no-colocation utilisation %.1f%%", cluster.nodes,
             len(cluster.services), len(traces), 100 * (cluster.online + cluster.system).mean() / cluster.capacity)
    nf: NodeForecasts | None = None
    coverage: list[dict] = []
    if s.policy in ("all", "tidewise"):
        if s.forecast_level == "service":
            nf, coverage, models = _service_forecasts(s, traces, cluster, progress)
        else:
            nf, coverage, models = _node_forecasts(s, cluster, progress)
        for row in coverage:
            row["model"] = models.get(row["series"], "")
    policies = policy_set(s.policy, nf, sweeps=s.sweeps)
    results = []
    breakdown: dict[str, dict[str, float]] = {}
    with _stage(progress, f"simulating {len(policies)} policy settings x {s.days} days",
                len(policies) * s.days) as adv:
        for p in policies:
            r = simulate(cluster, p, seed=s.seed, settings=s.engine, progress=adv)
            log.info("%s: utilisation %.3f, shortfall %.5f, batch %.0f core-h, %d evictions", r.label,
                     r.utilisation, r.shortfall, r.batch_core_hours, r.evictions)
            results.append(r)
            if isinstance(p, Tidewise) and p.knob is None:
                breakdown[r.label] = tidewise_breakdown(cluster, p, r)
    return Study(s, cluster, results, nf, coverage, breakdown)


def write_outputs(study: Study, out_dir: str) -> dict[str, str]:
    """results.json, details.json and report.html in out_dir (each written atomically)."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {"results": os.path.join(out_dir, "results.json"), "details": os.path.join(out_dir, "details.json"),
             "report": os.path.join(out_dir, "report.html")}
    details = details_json(study)
    write_text_atomic(paths["results"], json.dumps(finite_or_none(study.results_json()), indent=2) + "\n")
    write_text_atomic(paths["details"], json.dumps(finite_or_none(details), indent=2) + "\n")
    write_text_atomic(paths["report"], render_report(study, details))
    return paths
