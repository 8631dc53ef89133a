"""The simulated cluster: online services replaying real traces, packed onto nodes by request.

A service is one trace's shape times a scale. Its CPU request is sized as users size requests
today: near the peak they have seen (the training history's busiest minute times a headroom of
1.0-1.3), and its demand is capped at its limit (2 x request, a common limit-to-request ratio), so
that one trace's anomaly (a 10x spike) cannot ask for a whole node. Services are placed like the
default scheduler's LeastAllocated scoring: each goes to the least-requested node where its
request fits, until the cluster's requests reach `request_fill` of allocatable. The no-colocation
utilisation that follows (demand / capacity) is what requests-sized-at-peak clusters show.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from studies.simulation.harness.traces import Trace


@dataclass
class ClusterSettings:
    nodes: int = 40  # the default cluster
    cores: float = 32.0  # capacity per node
    system_reserved: float = 2.0  # kube-reserved + system-reserved cores: allocatable = 30
    request_median: float = 3.0  # cores; service requests are log-normal around it (sigma 0.6) ...
    request_sigma: float = 0.6
    request_min: float = 0.5  # ... clipped to [0.5, 12] cores
    request_max: float = 12.0
    headroom: tuple[float, float] = (1.0, 1.3)  # request = history peak x U(1.0, 1.3): "near the peak"
    limit_factor: float = 2.0  # demand is capped at limit = 2 x request
    request_fill: float = 0.9  # stop placing services when requests reach 90% of allocatable
    system_base: tuple[float, float] = (0.4, 0.9)  # daemons (kubelet, runtime, agents): cores per node
    system_noise: float = 0.1  # cores, std of the minute-to-minute daemon noise


@dataclass
class Service:
    name: str
    trace: int  # index into Cluster.traces
    node: int
    request: float  # cores
    limit: float  # cores
    scale: float  # cores per unit of trace shape


@dataclass
class Cluster:
    """Demand and capacity as nodes x minutes arrays (cores)."""

    settings: ClusterSettings
    traces: list[Trace]
    services: list[Service]
    online: np.ndarray  # nodes x minutes: online CPU demand
    system: np.ndarray  # nodes x minutes: daemons' CPU use
    requested: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per node: sum of online requests
    # nodes x minutes: each minute's peak online demand (bursts inside the minute, `bursts.py`);
    # None: no bursts, the peak is the mean
    peak_demand: np.ndarray | None = None

    @property
    def peak(self) -> np.ndarray:
        return self.online if self.peak_demand is None else self.peak_demand

    @property
    def nodes(self) -> int:
        return self.online.shape[0]

    @property
    def minutes(self) -> int:
        return self.online.shape[1]

    @property
    def capacity(self) -> float:
        return self.settings.cores

    @property
    def allocatable(self) -> float:
        return self.settings.cores - self.settings.system_reserved

    def service_demand(self, s: Service, shapes: np.ndarray) -> np.ndarray:
        """One service's capped demand per minute, from the per-trace shapes (traces x T)."""
        return np.minimum(shapes[s.trace] * s.scale, s.limit)

    def service_matrix(self, values_per_trace: np.ndarray) -> np.ndarray:
        """Per-trace shape values (traces x T) -> per-node sums of the services' capped demand (nodes x T)."""
        out = np.zeros((self.nodes, values_per_trace.shape[1]))
        for s in self.services:
            out[s.node] += self.service_demand(s, values_per_trace)
        return out


def build_cluster(traces: list[Trace], settings: ClusterSettings, seed: int, minutes: int | None = None) -> Cluster:
    """Draw services from the traces (seeded), pack them onto `settings.nodes` nodes."""
    if not traces:
        raise ValueError("no traces to build a cluster from")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    n = settings.nodes
    alloc = settings.cores - settings.system_reserved
    requested = np.zeros(n)
    services: list[Service] = []
    misses = 0
    while requested.sum() < settings.request_fill * alloc * n and misses < 50:
        ti = int(rng.integers(len(traces)))
        req = float(np.clip(np.round(rng.lognormal(np.log(settings.request_median), settings.request_sigma), 1),
                            settings.request_min, settings.request_max))
        head = float(rng.uniform(*settings.headroom))
        fits = np.flatnonzero(requested + req <= alloc + 1e-9)
        if len(fits) == 0:
            misses += 1
            continue
        node = int(fits[np.argmin(requested[fits])])  # LeastAllocated
        peak = float(np.nanmax(traces[ti].history.to_numpy()))
        scale = req / (peak * head)
        services.append(Service(f"svc-{len(services):03d}-{traces[ti].name}", ti, node, req,
                                req * settings.limit_factor, scale))
        requested[node] += req
    return assemble(traces, services, settings, requested, rng, minutes)


def assemble(traces: list[Trace], services: list[Service], settings: ClusterSettings, requested: np.ndarray,
             rng: np.random.Generator, minutes: int | None = None) -> Cluster:
    """Placed services -> the cluster's demand per node and minute, with the daemons' (seeded) use."""
    n = settings.nodes
    length = min(len(t.eval_1min) for t in traces) if minutes is None else minutes
    shapes = np.stack([t.eval_1min[:length] for t in traces])
    base = rng.uniform(*settings.system_base, size=(n, 1))
    system = np.clip(base + rng.normal(0.0, settings.system_noise, size=(n, length)), 0.1, settings.system_reserved)
    cluster = Cluster(settings, traces, services, np.zeros((n, length)), system, requested)
    cluster.online = cluster.service_matrix(shapes)
    return cluster
