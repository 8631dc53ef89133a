"""One tide study: traces -> cluster -> the online pool under the HPA -> its forecasts -> every
policy and sweep -> results.json, details.json, report.html.

`run_tide_study` is what `tidewise simulate tide` and `benchmarks/tide.py` call. The verdict reads
issue 17's targets: tidewise's default lends >= 1.2x the node-hours of the best watermark setting
with no more late minutes, has zero late minutes itself, and moves no more pods per node-hour lent.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field

from contracts.errors import InputError
from studies.simulation.harness.cluster import ClusterSettings
from studies.simulation.harness.history import UserHistory, study_cluster
from studies.simulation.harness.page import family
from studies.simulation.harness.sweep import Advance, ProgressFactory, check_days, stage, sweep
from studies.simulation.harness.traces import DAY_MIN
from studies.simulation.tide.engine import TideRun, simulate_tide
from studies.simulation.tide.forecasts import PoolForecasts, forecast_pool
from studies.simulation.tide.model import OnlinePool, PoolSettings, build_pool
from studies.simulation.tide.policies import POLICY_NAMES, TidePolicy, TidewiseTide, tide_policy_set

log = logging.getLogger(__name__)

LEND_TARGET = 1.2  # tidewise's node-hours lent over the best watermark's with no more late minutes

@dataclass
class TideStudySettings:
    traces: str  # folder laid out like ../shared/data
    nodes: int = 40
    days: int = 7
    seed: int = 0
    policy: str = "all"  # all | watermark | schedule | tidewise
    sweeps: bool = True
    forecast_model: str = "auto"
    cache_dir: str | None = None  # where the pool's forecasts are cached (None: not cached)
    max_history_days: int = 21
    trace_names: list[str] | None = None  # only these traces (tests)
    # a user's own history (the long file `tidewise fetch` writes) instead of the traces: its
    # workloads' pods are the services (harness/history.py); None: the traces
    history: str | None = None
    history_step: str = "5m"  # the grid the history file is read on (tidewise fetch --step)
    fit_nodes: bool = False  # with a history: the fewest nodes that hold its requests, not `nodes`
    pool: PoolSettings = field(default_factory=PoolSettings)
    batch_load: float = 0.8  # arriving batch work, share of the cluster's allocatable (batch.py)


@dataclass
class TideStudy:
    settings: TideStudySettings
    pool: OnlinePool
    runs: list[TideRun]
    forecasts: PoolForecasts | None
    services: int
    traces: list[str]
    breakdown: dict[str, dict[str, int]] = field(default_factory=dict)  # tidewise settings: why nodes moved
    history: dict | None = None  # what was read from a user's history file (harness.history.summary)
    node_size: tuple[float, float] | None = None  # (cores, GiB) of a pool node: what a lent node-hour holds

    def results_json(self) -> dict:
        """The contract; `tidewise_default` names the setting the label `tidewise` ran (when it ran), and
        `cores_per_node`, `memory_gib_per_node` the size of a lent node (`tidewise report --cost --tide`)."""
        out: dict = {"policies": {r.label: r.metrics() for r in self.runs}}
        if any(r.label == "tidewise" for r in self.runs):
            out["tidewise_default"] = tidewise_default(self.forecasts)
        if self.node_size is not None:
            out["cores_per_node"], out["memory_gib_per_node"] = self.node_size
        if self.history is not None:
            out["history"] = self.history
        return out

    def verdict(self) -> dict:
        """Issue 17's targets on this seed (see the module docstring)."""
        by = {r.label: r for r in self.runs}
        tw = by.get("tidewise")
        out: dict = {"lend_target": LEND_TARGET}
        if tw is None:
            return out
        wm = [r for r in self.runs if family(r.label) == "watermark" and r.late_minutes <= tw.late_minutes]
        out["tidewise"] = {"label": tw.label, **tw.metrics()}
        if "oracle" in by:  # perfect foresight: what every ratio is read against
            out["oracle_node_hours_lent"] = by["oracle"].node_hours_lent
        out["zero_late"] = tw.late_minutes == 0
        if not wm:
            return out
        best = max(wm, key=lambda r: r.node_hours_lent)
        out["best_watermark"] = {"label": best.label, **best.metrics()}
        ratio = tw.node_hours_lent / best.node_hours_lent if best.node_hours_lent > 0 else float("inf")
        per_tw = per_node_hour(tw)
        per_wm = per_node_hour(best)
        out["lend_ratio"] = ratio
        out["pods_moved_per_100_node_hours"] = {"tidewise": per_tw, "best_watermark": per_wm}
        out["targets"] = {"lend": bool(ratio >= LEND_TARGET), "zero_late": bool(tw.late_minutes == 0),
                          "pods_moved": bool(per_tw <= per_wm)}
        out["meets_all"] = all(out["targets"].values())
        return out


def tidewise_default(forecasts: PoolForecasts | None) -> dict | None:
    """The default tidewise setting's knobs (the serving loop's `TideSettings`), None without forecasts."""
    if forecasts is None:
        return None
    d = TidewiseTide(forecasts)
    return {"lead_minutes": d.lead, "min_dwell_minutes": d.min_dwell, "max_moves": d.max_moves, "margin": d.margin,
            "error_quantile": d.error_quantile, "error_window_minutes": d.error_window, "return_slack": d.return_slack,
            "rise_quantile": d.rise_quantile, "hold_minutes": d.hold, "fallback_quantile": d.quantile,
            "fallback_headroom": d.headroom}


def per_node_hour(r: TideRun) -> float:
    """Pods moved per 100 node-hours lent: pods moved per day compared at equal lending."""
    return 100.0 * r.pods_moved / r.node_hours_lent if r.node_hours_lent > 0 else 0.0


def check_settings(s: TideStudySettings) -> None:
    if s.policy != "all" and s.policy not in POLICY_NAMES:
        raise InputError(f"--policy {s.policy!r}: use all or one of {', '.join(POLICY_NAMES)}")
    if s.nodes < 2:
        raise InputError(f"--nodes {s.nodes}: at least 2 (one to lend, one to serve)")
    check_days(s.days)


def run_tide_study(s: TideStudySettings, progress: ProgressFactory | None = None,
                   history: UserHistory | None = None) -> TideStudy:
    """Everything but the writing; `progress(description, total)` yields an `advance(n)` per stage;
    `history`: `s.history` already read (`harness.history.read_history`)."""
    check_settings(s)
    traces, cluster, read = study_cluster(s, ClusterSettings(nodes=s.nodes), minutes=s.days * DAY_MIN, min_nodes=2,
                                          loaded=history)
    pool = build_pool(cluster, s.pool)
    log.info("pool: %d nodes, %d services; online needs %d-%d nodes (mean %.1f)", pool.nodes,
             len(cluster.services), pool.needed.min(), pool.needed.max(), pool.needed.mean())
    fc = None
    if s.policy in ("all", "tidewise"):
        n_origins = -(-pool.minutes // 60)
        with stage(progress, "forecasting the online pool, hourly from the past only", n_origins) as adv:
            fc = forecast_pool(pool.history_requested, pool.minutes, model=s.forecast_model, cache_dir=s.cache_dir,
                               progress=adv)
    policies = tide_policy_set(s.policy, fc, sweeps=s.sweeps)
    breakdown: dict[str, dict[str, int]] = {}

    def run(p: TidePolicy, adv: Advance | None) -> TideRun:
        r = simulate_tide(pool, p, seed=s.seed, batch_load=s.batch_load, progress=adv)
        log.info("%s: %.0f node-hours lent, %d late minutes, %d pods moved, %.0f goodput core-hours", r.label,
                 r.node_hours_lent, r.late_minutes, r.pods_moved, r.goodput_core_hours)
        if isinstance(p, TidewiseTide):
            breakdown[r.label] = dict(p.counters)
        return r

    runs = sweep(policies, s.days, run, progress)
    return TideStudy(s, pool, runs, fc, len(cluster.services), [t.name for t in traces], breakdown, read,
                     node_size=(cluster.capacity, s.pool.memory_gib_per_node))


def details_json(study: TideStudy) -> dict:
    p = study.pool
    return {
        "settings": {k: v for k, v in asdict(study.settings).items() if k != "pool"},
        "pool_settings": asdict(p.settings),
        "pool": {"nodes": p.nodes, "allocatable_per_node": p.allocatable, "services": study.services,
                 "traces": study.traces, "needed_min": int(p.needed.min()), "needed_mean": float(p.needed.mean()),
                 "needed_max": int(p.needed.max()), "mean_online_pods": float(p.pods.mean()),
                 "mean_demand_cores": float(p.demand.mean()), "mean_requested_cores": float(p.requested.mean()),
                 "lendable_node_hours": float((p.nodes - p.needed.clip(max=p.nodes)).sum() / 60.0)},
        "forecast_model": study.forecasts.model if study.forecasts is not None else None,
        "tidewise_default": tidewise_default(study.forecasts),
        "runs": {r.label: {**r.metrics(), "pods_moved_per_100_node_hours": per_node_hour(r)} for r in study.runs},
        "verdict": study.verdict(),
        "tidewise_breakdown": study.breakdown,
    }
