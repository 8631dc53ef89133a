"""One simulation study's settings and results, and what is read from them: the verdict against
issue 6's targets and `details.json` (what the report shows, machine-readable).

Both the runner (which fills a `Study`) and the report (which reads one) import this module, so
neither imports the other.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from studies.simulation.cluster import Cluster, ClusterSettings
from studies.simulation.engine import EngineSettings, RunResult
from studies.simulation.policies import NodeForecasts

SHORTFALL_TARGET = 0.001  # issue 6: at most 0.1% of node-minutes
UTILISATION_TARGET = 0.65
LEAD_TARGET = 0.05  # 5 points above the best swept baseline at that shortfall


@dataclass
class StudySettings:
    traces: str  # folder laid out like ../shared/data
    nodes: int = 40
    days: int = 7  # evaluation days (each trace's last whole days)
    seed: int = 0
    policy: str = "all"
    sweeps: bool = True
    forecast_model: str = "auto"  # predictor.forecasting model name; auto = per-series selection
    # node: forecast each node's online demand (node/<name>/cpu); service: forecast every trace and
    # sum the services' quantiles per node, as the serving loop sums pods' (quantiles do not add:
    # that holds back more CPU than the node's own quantile)
    forecast_level: str = "node"
    cache_dir: str | None = None  # where daily forecasts are cached (None: not cached)
    max_history_days: int = 21  # training history per trace, at most
    trace_names: list[str] | None = None  # only these traces (tests)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)


@dataclass
class Study:
    settings: StudySettings
    cluster: Cluster
    results: list[RunResult]
    forecasts: NodeForecasts | None
    coverage: list[dict]
    breakdown: dict[str, dict[str, float]]

    def results_json(self) -> dict:
        return {"policies": {r.label: r.metrics() for r in self.results}}

    def verdict(self) -> dict:
        """The issue's targets, measured: tidewise's best setting within the shortfall budget vs the
        best swept baseline within the same budget."""
        def best(prefix: str) -> RunResult | None:
            ok = [r for r in self.results if r.label.split("@")[0] == prefix and r.shortfall <= SHORTFALL_TARGET]
            return max(ok, key=lambda r: r.utilisation) if ok else None

        tw = next((r for r in self.results if r.label == "tidewise"), None)
        tw_best = best("tidewise")
        bases = [b for b in (best("katalyst"), best("koordinator")) if b is not None]
        base = max(bases, key=lambda r: r.utilisation) if bases else None
        out: dict = {"shortfall_budget": SHORTFALL_TARGET, "utilisation_target": UTILISATION_TARGET,
                     "lead_target": LEAD_TARGET}
        if tw is not None:
            out["tidewise_default"] = {"label": tw.label, **tw.metrics()}
            out["default_meets_utilisation"] = bool(tw.utilisation >= UTILISATION_TARGET and
                                                    tw.shortfall <= SHORTFALL_TARGET)
        if tw_best is not None:
            out["tidewise_best"] = {"label": tw_best.label, **tw_best.metrics()}
        if base is not None:
            out["best_baseline"] = {"label": base.label, **base.metrics()}
        if tw_best is not None and base is not None:
            out["lead"] = tw_best.utilisation - base.utilisation
            out["meets_lead"] = bool(out["lead"] >= LEAD_TARGET)
        # equal risk: each tidewise setting within the budget against the best baseline setting whose
        # shortfall is no higher than its own
        rows = []
        for r in sorted((r for r in self.results if r.label.split("@")[0] == "tidewise"
                         and r.shortfall <= SHORTFALL_TARGET), key=lambda r: r.shortfall):
            peers = [b for b in self.results if b.label.split("@")[0] in ("katalyst", "koordinator")
                     and b.shortfall <= r.shortfall]
            peer = max(peers, key=lambda b: b.utilisation) if peers else None
            rows.append({"tidewise": r.label, "utilisation": r.utilisation, "shortfall": r.shortfall,
                         "baseline": peer.label if peer else None,
                         "baseline_utilisation": peer.utilisation if peer else None,
                         "baseline_shortfall": peer.shortfall if peer else None,
                         "lead": r.utilisation - peer.utilisation if peer else None})
        out["equal_risk"] = rows
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
            "cluster_settings": asdict(c.settings), "engine_settings": asdict(study.settings.engine),
        },
        "runs": {r.label: {**r.metrics(), "online_unserved_core_hours": r.online_unserved_core_hours,
                           "held_back_cores": r.held_back,
                           "nodes_with_shortfall": int((r.shortfall_by_node > 0).sum())} for r in study.results},
        "verdict": study.verdict(),
        "forecast_coverage": study.coverage,
        "tidewise_breakdown": study.breakdown,
    }
