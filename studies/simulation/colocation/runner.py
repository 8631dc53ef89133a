"""One simulation study: traces -> cluster -> forecasts -> every policy and sweep -> outputs.

`run_study` is what `tidewise simulate colocation` and `benchmarks/colocation.py` call;
`write_outputs` writes `results.json` (the fixed contract), `details.json` (what the report shows,
machine-readable) and `report.html`. The settings and the `Study` it returns are in `study`.
"""
from __future__ import annotations

import logging
from dataclasses import asdict

import numpy as np

from contracts.errors import InputError
from studies.simulation.colocation.bursts import SETTINGS as BURST_SETTINGS
from studies.simulation.colocation.bursts import BurstModel, estimate, node_peaks
from studies.simulation.colocation.catalogue import POLICY_NAMES, policy_set
from studies.simulation.colocation.engine import RunResult, simulate
from studies.simulation.colocation.forecast_policy import Tidewise
from studies.simulation.colocation.forecasts import forecast_coverage, node_forecasts, node_level_forecasts, node_series
from studies.simulation.colocation.policies import NodeForecasts, Policy
from studies.simulation.colocation.report import render_report
from studies.simulation.colocation.study import Study, StudySettings, details_json
from studies.simulation.harness import outputs
from studies.simulation.harness.cluster import Cluster, ClusterSettings
from studies.simulation.harness.forecasts import QUANTILES, forecast_series, forecast_traces
from studies.simulation.harness.sweep import Advance, ProgressFactory, check_days, stage, sweep
from studies.simulation.harness.history import UserHistory, study_cluster
from studies.simulation.harness.traces import DAY_MIN, Trace

log = logging.getLogger(__name__)


def tidewise_breakdown(policy: Tidewise) -> dict[str, float]:
    """What tidewise's run kept back and deferred: its mean reserve (cores per node) and the jobs the
    forecast kept off nodes whose current quota had room for them."""
    c = policy.counters
    return {"mean_reserve_cores": c["reserve_sum"] / max(1, c["minutes"]),
            "placements": float(c["placed"]), "deferred_by_forecast": float(c["deferred"])}


def apply_bursts(cluster: Cluster, traces: list[Trace], setting: str, seed: int) -> BurstModel:
    """Estimate the burst model from the traces' 1-minute histories and draw each node-minute's peak."""
    model = estimate({t.name: t.history_1min for t in traces if t.history_1min is not None}, setting)
    shapes = np.stack([t.eval_1min[:cluster.minutes] for t in traces])
    cluster.peak_demand = node_peaks(cluster.online, cluster.services, [t.name for t in traces],
                                     lambda s: cluster.service_demand(s, shapes), model, seed)
    return model


def _check(s: StudySettings) -> None:
    if s.policy != "all" and s.policy not in POLICY_NAMES:
        raise InputError(f"--policy {s.policy!r}: use all or one of {', '.join(POLICY_NAMES)}")
    if s.nodes < 1:
        raise InputError(f"--nodes {s.nodes}: at least one node")
    if s.forecast_level not in ("node", "service"):
        raise InputError(f"forecast level {s.forecast_level!r}: use node or service")
    if s.bursts not in BURST_SETTINGS:
        raise InputError(f"--bursts {s.bursts!r}: use one of {', '.join(BURST_SETTINGS)}")
    check_days(s.days)


def _service_forecasts(s: StudySettings, traces: list[Trace], cluster: Cluster, progress: ProgressFactory | None
                       ) -> tuple[NodeForecasts, list[dict], dict[str, str]]:
    """Every trace forecast, the services' quantiles summed per node (as the serving loop sums pods')."""
    with stage(progress, f"forecasting {len(traces)} traces, one call per simulated day", s.days) as adv:
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
    with stage(progress, f"forecasting {len(series)} nodes, one call per simulated day", s.days) as adv:
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


def run_study(s: StudySettings, progress: ProgressFactory | None = None, history: UserHistory | None = None) -> Study:
    """Everything but the writing. `progress(description, total)` (e.g. `tidewise.progress.progress`)
    yields an `advance(n)` per stage: forecasting (per simulated day), then simulating (per day and run).
    `history`: `s.history` already read (`harness.history.read_history`)."""
    _check(s)
    cs = ClusterSettings(**{**asdict(s.cluster), "nodes": s.nodes})
    traces, cluster, read = study_cluster(s, cs, minutes=s.days * DAY_MIN, loaded=history)
    bursts = apply_bursts(cluster, traces, s.bursts, s.seed)
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
    breakdown: dict[str, dict[str, float]] = {}

    def run(p: Policy, adv: Advance | None) -> RunResult:
        r = simulate(cluster, p, seed=s.seed, settings=s.engine, progress=adv)
        log.info("%s: utilisation %.3f, shortfall %.5f, batch %.0f core-h, %d evictions", r.label,
                 r.utilisation, r.shortfall, r.batch_core_hours, r.evictions)
        if isinstance(p, Tidewise) and p.knob is None:
            breakdown[r.label] = tidewise_breakdown(p)
        return r

    results = sweep(policies, s.days, run, progress)
    return Study(s, cluster, results, nf, coverage, breakdown, bursts.summary(), read)


def write_outputs(study: Study, out_dir: str) -> dict[str, str]:
    """results.json, details.json and report.html in out_dir (each written atomically)."""
    details = details_json(study)
    return outputs.write_outputs(out_dir, study.results_json(), details, render_report(study, details))
