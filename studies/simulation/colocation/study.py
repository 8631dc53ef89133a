"""One simulation study's settings and results, and what is read from them: the verdict against
issue 13's targets and `details.json` (what the report shows, machine-readable).

Both the runner (which fills a `Study`) and the report (which reads one) import this module, so
neither imports the other.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from studies.simulation.colocation.engine import EngineSettings, RunResult
from studies.simulation.colocation.policies import NodeForecasts
from studies.simulation.harness.cluster import Cluster, ClusterSettings
from studies.simulation.harness.page import family

SHORTFALL_TARGET = 0.001  # at most 0.1% of node-minutes (issues 6 and 13)
UTILISATION_TARGET = 0.65
GOODPUT_TARGET = 1.05  # tidewise's goodput over the best baseline's, both within the budget
EVICTION_TARGET = 0.5  # tidewise's evictions over the best baseline's
BASELINES = ("katalyst", "koordinator")


@dataclass
class StudySettings:
    traces: str  # folder laid out like ../shared/data
    nodes: int = 40
    days: int = 7  # evaluation days (each trace's last whole days)
    seed: int = 0
    policy: str = "all"
    sweeps: bool = True
    bursts: str = "calibrated"  # within-minute bursts: none | calibrated | high (bursts.py)
    forecast_model: str = "auto"  # predictor.pipeline.forecasting model name; auto = per-series selection
    # node: forecast each node's online demand (node/<name>/cpu); service: forecast every trace and
    # sum the services' quantiles per node, as the serving loop sums pods' (quantiles do not add:
    # that holds back more CPU than the node's own quantile)
    forecast_level: str = "node"
    cache_dir: str | None = None  # where daily forecasts are cached (None: not cached)
    max_history_days: int = 21  # training history per trace, at most
    trace_names: list[str] | None = None  # only these traces (tests)
    # a user's own history (the long file `tidewise fetch` writes) instead of the traces: its
    # workloads' pods are the services (harness/history.py); None: the traces
    history: str | None = None
    history_step: str = "5m"  # the grid the history file is read on (tidewise fetch --step)
    fit_nodes: bool = False  # with a history: the fewest nodes that hold its requests, not `nodes`
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)


def best_within_budget(results: list[RunResult], families: tuple[str, ...]) -> RunResult | None:
    """The setting of these families with the most goodput among those within the shortfall budget."""
    ok = [r for r in results if family(r.label) in families and r.shortfall <= SHORTFALL_TARGET]
    return max(ok, key=lambda r: r.goodput_core_hours) if ok else None


@dataclass
class Study:
    settings: StudySettings
    cluster: Cluster
    results: list[RunResult]
    forecasts: NodeForecasts | None
    coverage: list[dict]
    breakdown: dict[str, dict[str, float]]
    bursts: dict = field(default_factory=dict)  # the burst model's estimated numbers
    history: dict | None = None  # what was read from a user's history file (harness.history.summary)

    def results_json(self) -> dict:
        setting = self.settings.bursts if self.settings is not None else "calibrated"
        out = {"bursts": setting, "policies": {r.label: r.metrics() for r in self.results}}
        return out if self.history is None else {**out, "history": self.history}

    def verdict(self) -> dict:
        """Issue 13's targets, measured: tidewise's best setting within the shortfall budget (most
        goodput) against the best katalyst or koordinator setting within it."""
        tw, base = best_within_budget(self.results, ("tidewise",)), best_within_budget(self.results, BASELINES)
        out: dict = {"shortfall_budget": SHORTFALL_TARGET, "utilisation_target": UTILISATION_TARGET,
                     "goodput_target": GOODPUT_TARGET, "eviction_target": EVICTION_TARGET}
        if tw is not None:
            out["tidewise_best"] = {"label": tw.label, **tw.metrics()}
        if base is not None:
            out["best_baseline"] = {"label": base.label, **base.metrics()}
        if tw is None or base is None:
            return out
        ratio = tw.goodput_core_hours / base.goodput_core_hours if base.goodput_core_hours > 0 else float("inf")
        out["goodput_ratio"] = ratio
        out["targets"] = {
            "goodput": bool(ratio >= GOODPUT_TARGET),
            "slowdown_p95": bool(tw.slowdown_p95 <= base.slowdown_p95),
            "evictions": bool(tw.evictions <= EVICTION_TARGET * base.evictions),
            "utilisation": bool(tw.utilisation >= UTILISATION_TARGET),
        }
        out["meets_all"] = all(out["targets"].values())
        return out


def details_json(study: Study) -> dict:
    c = study.cluster
    return {
        "settings": {k: v for k, v in asdict(study.settings).items() if k not in ("cluster", "engine")},
        "cluster": {
            "nodes": c.nodes, "cores_per_node": c.capacity, "allocatable_per_node": c.allocatable,
            "services": len(c.services), "traces": [t.name for t in c.traces],
            "requested_share": float(c.requested.sum() / (c.allocatable * c.nodes)),
            "no_colocation_utilisation": float((c.online + c.system).mean() / c.capacity),
            "mean_peak_over_mean_cores": float((c.peak - c.online).mean()),
            "cluster_settings": asdict(c.settings), "engine_settings": asdict(study.settings.engine),
        },
        "bursts": study.bursts,
        "runs": {r.label: {**r.metrics(), "online_unserved_core_hours": r.online_unserved_core_hours,
                           "held_back_cores": r.held_back,
                           "nodes_with_shortfall": int((r.shortfall_by_node > 0).sum())} for r in study.results},
        "verdict": study.verdict(),
        "forecast_coverage": study.coverage,
        "tidewise_breakdown": study.breakdown,
    }
