"""The tide simulator's online side: the colocation simulator's services, run under the HPA, as one
pool of whole nodes.

Each service of `cluster.build_cluster` (a real trace times a scale, capped at its limit) runs pods
of about one core (its request split into whole cores) under a Horizontal Pod Autoscaler: the
replicas the HPA wants each minute are ceil(last minute's demand / (target x pod request)), at
least `min_replicas`, and a scale-down waits for the `stabilisation` window (Kubernetes' default
5 minutes: replicas are the most wanted over the window). What the online side needs is the
CPU its pods request; packed onto nodes of `allocatable` cores with `pack_headroom` for the
scheduler's fragmentation, that is the nodes online service needs each minute
(`autoscaler.logic.tide.nodes_needed`, the serving loop's own function). Where the pods go inside
the online side is not modelled (fluid packing): a lent node drains the online side's mean pods
per node.

The same arithmetic on each trace's 15-minute peaks, history included, is the pool's series that
the forecast-driven policy forecasts and the schedule is sized from (`history_requested`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from autoscaler.logic.tide import nodes_needed
from studies.simulation.harness.cluster import Cluster, Service
from studies.simulation.harness.traces import SIM_EPOCH


@dataclass
class PoolSettings:
    hpa_target: float = 0.7  # the HPA's target CPU utilisation of requests (a common setting)
    min_replicas: int = 1
    stabilisation: int = 5  # minutes a scale-down waits (Kubernetes' default 300 s)
    # nodes are filled to at most 1 / (1 + 0.1) = 91% of allocatable by requests: one-core pods on
    # 30-core nodes leave a few cores unusable to fragmentation and DaemonSets' spread
    pack_headroom: float = 0.1
    drain_minutes: int = 2  # a lent node's online pods leave (PDB-paced evictions) before batch starts
    # a handed-back node serves online this long after the decision: batch pods evicted (grace
    # period), taints swapped, online pods scheduled and started
    return_minutes: int = 3
    # the simulator places CPU only; a lent node is priced whole (`tidewise report --cost --tide`):
    # 4 GiB a core on the 32-core nodes, the general-purpose shape (AWS m-class, GCP n2-standard)
    memory_gib_per_node: float = 128.0


@dataclass
class OnlinePool:
    """The online side's numbers per simulated minute, and its history on the forecasting grid."""

    nodes: int
    allocatable: float  # cores per node
    demand: np.ndarray  # minutes: online CPU demand (cores)
    requested: np.ndarray  # minutes: CPU requested by the HPA's replicas (cores)
    pods: np.ndarray  # minutes: online pods
    needed: np.ndarray  # minutes: nodes that hold `requested` (int)
    history_requested: pd.Series  # 15-minute peaks of requested cores, history and evaluation days
    settings: PoolSettings

    @property
    def minutes(self) -> int:
        return len(self.requested)

    def needed_for(self, requested: np.ndarray | float) -> np.ndarray:
        """Nodes that hold these requested cores with the pool's packing headroom."""
        return nodes_needed(np.atleast_1d(np.asarray(requested, dtype=float)), self.allocatable,
                            self.settings.pack_headroom)


def pod_cores(s: Service) -> float:
    """A service's pod request: its request split into whole cores (about one core a pod)."""
    return s.request / max(1, round(s.request))


def hpa_replicas(demand: np.ndarray, pod: float, ps: PoolSettings) -> np.ndarray:
    """Replicas per minute: wanted from the previous minute's demand, scale-down after the window."""
    wanted = np.maximum(ps.min_replicas, np.ceil(demand / (ps.hpa_target * pod) - 1e-9))
    wanted = np.concatenate([wanted[:1], wanted[:-1]])  # the HPA reads the last minute's metrics
    padded = np.concatenate([np.full(ps.stabilisation - 1, wanted[0]), wanted])
    return sliding_window_view(padded, ps.stabilisation).max(axis=1)


def history_requested(cluster: Cluster, ps: PoolSettings) -> pd.Series:
    """Requested cores on the 15-minute grid, from each trace's step peaks (history + evaluation),
    only where every service has data: a partial sum would show a level shift that never happened."""
    parts = []
    for s in cluster.services:
        d = np.minimum(cluster.traces[s.trace].grid_series * s.scale, s.limit)
        pod = pod_cores(s)
        parts.append(np.maximum(ps.min_replicas, np.ceil(d / (ps.hpa_target * pod) - 1e-9)) * pod)
    total = pd.concat(parts, axis=1, sort=True).sum(axis=1, min_count=len(parts))
    return total.loc[total.first_valid_index():].rename("pool/online/requested_cores")


def build_pool(cluster: Cluster, ps: PoolSettings) -> OnlinePool:
    """The cluster's services under the HPA, summed over the pool, minute by minute."""
    shapes = np.stack([t.eval_1min[:cluster.minutes] for t in cluster.traces])
    demand = np.zeros(cluster.minutes)
    requested = np.zeros(cluster.minutes)
    pods = np.zeros(cluster.minutes)
    for s in cluster.services:
        d = cluster.service_demand(s, shapes)
        pod = pod_cores(s)
        replicas = hpa_replicas(d, pod, ps)
        demand += d
        requested += replicas * pod
        pods += replicas
    hist = history_requested(cluster, ps)
    pool = OnlinePool(cluster.nodes, cluster.allocatable, demand, requested, pods, np.zeros(0, dtype=int), hist, ps)
    pool.needed = pool.needed_for(requested)
    return pool


def history_needed_by_hour(pool: OnlinePool) -> np.ndarray:
    """Per hour of the day (0-23, the simulated clock), the most nodes the history days needed: what
    a team sizing a fixed schedule by hand would read off a dashboard (history only)."""
    hist = pool.history_requested
    hist = hist[hist.index < SIM_EPOCH].dropna()
    needed = pool.needed_for(hist.to_numpy())
    hours = np.asarray(hist.index.hour)
    return np.array([needed[hours == h].max() if (hours == h).any() else pool.nodes for h in range(24)])
