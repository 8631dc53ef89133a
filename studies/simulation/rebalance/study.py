"""Rebalancing hot nodes on the real traces: no rebalancing vs reactive (current usage, as
Koordinator's LowNodeLoad descheduler) vs Tidewise (forecast peak over the next `horizon`).

The cluster is the simulators' (`harness/cluster.py`: services replaying real traces, packed by
request, LeastAllocated), with requests sized *below* the services' peaks by default (`headroom`
0.5-0.8 x the history's busiest minute: requests sized for the typical hour, as right-sizing or
overcommit leaves them) — with requests at the peak (the simulator's 1.0-1.3) a node is hardly
ever hot and there is nothing to rebalance. Every `interval` minutes each policy builds the same
inputs the serving step builds and calls the same choice, `autoscaler.logic.rebalance.plan_rebalance`:

- reactive: each pod's usage is its mean over the last `reactive_window` minutes, one step;
- tidewise: each pod's usage is its trace's forecast (`harness.forecasts.forecast_series`: made at
  each simulated midnight from the past only, 25 h ahead) at the settings' quantile times its scale,
  capped at its limit, over the next `horizon` (5-minute steps; the last hour of a day sees less
  than the horizon rather than a forecast made later);
- node daemons count on every node at their recent mean and never move.

A move takes effect at the next minute (the pod restarts on the destination the plan named; start-up
time is not modelled). Measured per policy: node-minutes whose usage (online + daemons) is above
the high threshold, above allocatable (saturated), and pods moved.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import numpy as np
import pandas as pd

from autoscaler.logic.rebalance import Candidate, NodeLoad, plan_rebalance
from autoscaler.settings import RebalanceSettings
from contracts.errors import InputError
from predictor.durations import parse_duration
from studies.simulation.harness.cluster import Cluster, ClusterSettings
from studies.simulation.harness.forecasts import QUANTILES, forecast_series
from studies.simulation.harness.sweep import Advance, ProgressFactory, check_days, sweep
from studies.simulation.harness.history import UserHistory, study_cluster
from studies.simulation.harness.traces import DAY_MIN, Trace

log = logging.getLogger(__name__)

POLICIES = ("none", "reactive", "tidewise")
FORECAST_SAMPLE = 5  # minutes between the forecast steps a pod's demand is read at


@dataclass
class RebalanceStudySettings:
    traces: str  # folder laid out like ../shared/data
    nodes: int = 20
    days: int = 3
    seed: int = 0
    headroom: tuple[float, float] = (0.5, 0.8)  # request = history peak x U(lo, hi)
    interval: int = 5  # minutes between decisions (serve runs every minute; 5 keeps the study cheap)
    reactive_window: int = 5  # minutes of usage the reactive policy averages (a metrics scrape window)
    # checks in a row a node must be hot before the reactive policy acts (Koordinator's LowNodeLoad
    # anomalyCondition.consecutiveAbnormalities); 1: at the first
    consecutive: int = 1
    move_minutes: int = 2  # a moved pod's usage stays on its node this long (eviction, scheduling, start-up)
    # forecasts are made every this many hours (serve refreshes every 30 min); 24: day-ahead only
    refresh_hours: int = 6
    forecast_model: str = "auto"
    cache_dir: str | None = None
    max_history_days: int = 21
    trace_names: list[str] | None = None
    # a user's own history (the long file `tidewise fetch` writes) instead of the traces: its
    # workloads' pods are the services (harness/history.py); None: the traces
    history: str | None = None
    history_step: str = "5m"  # the grid the history file is read on (tidewise fetch --step)
    fit_nodes: bool = False  # with a history: the fewest nodes that hold its requests, not `nodes`
    rebalance: RebalanceSettings = field(default_factory=lambda: RebalanceSettings(enabled=True))


@dataclass
class PolicyResult:
    node_minutes_hot: int  # usage above high_cpu x allocatable
    hot_share: float  # of all node-minutes
    node_minutes_saturated: int  # usage above allocatable
    pods_moved: int
    moves_per_day: float


def check(s: RebalanceStudySettings) -> None:
    """InputError naming the setting that cannot work."""
    if s.nodes < 2:
        raise InputError(f"--nodes {s.nodes}: at least 2 (a move needs somewhere to go)")
    check_days(s.days)
    lo, hi = s.headroom
    if not 0 < lo <= hi:
        raise InputError(f"--headroom {lo},{hi}: two positive numbers, low first")
    if s.refresh_hours < 1 or 24 % s.refresh_hours:
        raise InputError(f"--refresh-hours {s.refresh_hours}: a divisor of 24")
    if s.interval < 1 or s.reactive_window < 1:
        raise InputError("--interval and the reactive window are whole minutes, at least 1")
    if s.rebalance.quantile not in QUANTILES:
        raise InputError(f"rebalance quantile {s.rebalance.quantile}: one of {QUANTILES} in the simulation")
    try:
        s.rebalance.check()
    except ValueError as exc:
        raise InputError(str(exc)) from None


def service_demand(cluster: Cluster) -> np.ndarray:
    """services x minutes: each service's capped demand."""
    shapes = np.stack([t.eval_1min[:cluster.minutes] for t in cluster.traces])
    return np.stack([cluster.service_demand(s, shapes) for s in cluster.services])


class Inputs:
    """What each policy's choice reads at minute t: per-pod usage arrays and the daemons'."""

    def __init__(self, cluster: Cluster, demand: np.ndarray, forecasts: dict[int, np.ndarray] | None,
                 s: RebalanceStudySettings):
        self.cluster, self.demand, self.forecasts, self.s = cluster, demand, forecasts, s
        self.horizon = int(parse_duration(s.rebalance.horizon).total_seconds() // 60)
        self.q = QUANTILES.index(s.rebalance.quantile)

    def reactive(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        w = slice(max(0, t - self.s.reactive_window), t)
        return self.demand[:, w].mean(axis=1)[:, None], self.cluster.system[:, w].mean(axis=1)[:, None]

    def forecast(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        assert self.forecasts is not None
        day, within = divmod(t, DAY_MIN)
        k = within // (60 * self.s.refresh_hours) * self.s.refresh_hours  # the latest origin, hours into the day
        at = within - 60 * k
        fc = self.forecasts[k]
        span = slice(at, at + self.horizon, FORECAST_SAMPLE)
        per_trace = fc[:, day, self.q, span]
        svc = self.cluster.services
        scale = np.array([x.scale for x in svc])[:, None]
        limit = np.array([x.limit for x in svc])[:, None]
        pods = np.minimum(per_trace[[x.trace for x in svc]] * scale, limit)
        w = slice(max(0, t - self.s.reactive_window), t)
        if self.s.rebalance.with_current:
            pods[:, 0] = np.maximum(pods[:, 0], self.demand[:, w].mean(axis=1))
        daemons = np.repeat(self.cluster.system[:, w].mean(axis=1)[:, None], pods.shape[1], axis=1)
        return pods, daemons


def _loads(cluster: Cluster, assign: np.ndarray, pods: np.ndarray, daemons: np.ndarray) -> list[NodeLoad]:
    zeros = np.zeros(pods.shape[1])
    by_node: list[list[Candidate]] = [[Candidate("sim", f"daemons-{n}", "", "system_cores", daemons[n], zeros,
                                                 "system pod")] for n in range(cluster.nodes)]
    for i, svc in enumerate(cluster.services):
        by_node[assign[i]].append(Candidate("sim", str(i), svc.name, "shared_cores", pods[i], zeros))
    return [NodeLoad(f"node-{n:03d}", cluster.allocatable, 1.0, by_node[n]) for n in range(cluster.nodes)]


def simulate(cluster: Cluster, demand: np.ndarray, inputs: Inputs | None,
             read: Callable[[Inputs, int], tuple[np.ndarray, np.ndarray]] | None,
             s: RebalanceStudySettings, consecutive: int = 1) -> PolicyResult:
    """One policy over the whole run (`read` None: never rebalance); a node sheds pods only once it
    has been hot `consecutive` checks in a row."""
    n_svc, minutes = demand.shape
    assign = np.array([x.node for x in cluster.services])
    usage = cluster.system[:, :minutes].copy()
    moved = 0
    streak = np.zeros(cluster.nodes, dtype=int)  # checks in a row each node was hot (reactive's reading)
    for t0 in range(0, minutes, s.interval):
        before = assign.copy()
        if read is not None and inputs is not None and t0 >= s.reactive_window:
            pods, daemons = read(inputs, t0)
            loads = _loads(cluster, assign, pods, daemons)
            shed = None
            if consecutive > 1:
                per_node = np.zeros(cluster.nodes)
                np.add.at(per_node, assign, pods.max(axis=1))
                hot = (per_node + daemons.max(axis=1)) / cluster.allocatable > s.rebalance.high_cpu
                streak = np.where(hot, streak + 1, 0)
                shed = {ld.name for n, ld in enumerate(loads) if streak[n] >= consecutive}
            plan = plan_rebalance(loads, s.rebalance, pods.shape[1], only=shed)
            for m in plan.moves:
                assign[int(m.pod)] = int(m.destination.split("-")[1])
            moved += len(plan.moves)
        t1 = min(minutes, t0 + s.interval)
        land = min(t1, t0 + s.move_minutes)  # this check's moves land after move_minutes
        for a, (lo, hi) in ((before, (t0, land)), (assign, (land, t1))):
            if hi > lo:
                onehot = np.zeros((cluster.nodes, n_svc))
                onehot[a, np.arange(n_svc)] = 1.0
                usage[:, lo:hi] += onehot @ demand[:, lo:hi]
    share = usage / cluster.allocatable
    hot = int((share > s.rebalance.high_cpu).sum())
    return PolicyResult(hot, hot / share.size, int((share > 1.0).sum()), moved, moved / (minutes / DAY_MIN))


def intraday_forecasts(traces: list[Trace], s: RebalanceStudySettings) -> dict[int, np.ndarray]:
    """hours into the day -> traces x days x quantiles x minutes, made at that hour of every day from
    the past only. The daily origins of `forecasts.forecast_series` are reused by moving each series
    back `k` hours: its origin at simulated midnight is then real time k o'clock, and the history it
    sees is the real history before it (the daily and weekly seasons keep their lags)."""
    out = {}
    for k in range(0, 24, s.refresh_hours):
        shift = pd.Timedelta(hours=k)
        series = {t.name: pd.Series(t.grid_series.to_numpy(), index=t.grid_series.index - shift) for t in traces}
        out[k], _ = forecast_series(series, s.days, model=s.forecast_model, cache_dir=s.cache_dir)
    return out


def variants(s: RebalanceStudySettings, sweeps: bool) -> list[tuple[str, str, RebalanceStudySettings]]:
    """(label, policy, settings) to run: each policy at `s`, and with `sweeps` the knobs that explain it."""
    out = [("none", "none", s), ("reactive", "reactive", s), ("tidewise", "tidewise", s)]
    if not sweeps:
        return out
    rb = s.rebalance
    out += [(f"reactive@consecutive={n}", "reactive", replace(s, consecutive=n)) for n in (3, 5)]
    out += [("tidewise@quantile=0.9", "tidewise", replace(s, rebalance=replace(rb, quantile=0.9))),
            ("tidewise@fill_to=low", "tidewise", replace(s, rebalance=replace(rb, fill_to="low"))),
            ("tidewise@with_current=false", "tidewise", replace(s, rebalance=replace(rb, with_current=False))),
            ("tidewise@refresh=24h", "tidewise", replace(s, refresh_hours=24))]
    return out


def run_rebalance_study(s: RebalanceStudySettings, policy: str = "all", sweeps: bool = True,
                        history: UserHistory | None = None, progress: ProgressFactory | None = None) -> dict:
    """Every policy (or one), with its sweep, on one seeded cluster; a JSON-ready dict of settings and
    results ("policies": label -> PolicyResult fields). `history`: `s.history` already read;
    `progress(description, total)` is told each setting's days once it is simulated."""
    check(s)
    if policy != "all" and policy not in POLICIES:
        raise InputError(f"--policy {policy!r}: use all or one of {', '.join(POLICIES)}")
    traces, cluster, read = study_cluster(s, ClusterSettings(nodes=s.nodes, headroom=s.headroom),
                                          minutes=s.days * DAY_MIN, min_nodes=2, loaded=history)
    demand = service_demand(cluster)
    runs = [v for v in variants(s, sweeps) if policy in ("all", v[1])]
    forecasts = intraday_forecasts(traces, s) if any(p == "tidewise" for _, p, _ in runs) else None
    readers: dict[str, Callable[[Inputs, int], tuple[np.ndarray, np.ndarray]] | None] = {
        "none": None, "reactive": Inputs.reactive, "tidewise": Inputs.forecast}

    def run(v: tuple[str, str, RebalanceStudySettings], advance: Advance | None) -> PolicyResult:
        label, name, vs = v
        r = simulate(cluster, demand, Inputs(cluster, demand, forecasts, vs), readers[name], vs,
                     vs.consecutive if name == "reactive" else 1)
        log.info("%s: %d node-minutes hot (%.3f%%), %d saturated, %d pods moved", label, r.node_minutes_hot,
                 100 * r.hot_share, r.node_minutes_saturated, r.pods_moved)
        if advance is not None:  # the engine runs every day at once
            advance(s.days)
        return r

    results = {label: asdict(r) for (label, _, _), r in zip(runs, sweep(runs, s.days, run, progress))}
    settings = {k: v for k, v in asdict(s).items() if k not in ("trace_names", "cache_dir", "traces")}
    out = {"settings": settings, "services": len(cluster.services), "traces": len(traces), "nodes": cluster.nodes,
           "node_minutes": int(cluster.nodes * demand.shape[1]), "policies": results}
    return out if read is None else {**out, "history": read}
