"""A seeded synthetic cluster with tidal workloads: the demo's data and the tests' ground truth.

Each workload's CPU and memory follow a daily tide (morning ramp, afternoon and evening peaks), a
weekend dip, noise, occasional bursts, and for some a trend; a few series lose some hours of
samples (gaps). The same cluster can be written as cAdvisor/kube-state-metrics-shaped OpenMetrics
text for `promtool tsdb create-blocks-from openmetrics`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np
import pandas as pd

from predictor.durations import to_timedelta
from predictor.timestamps import epoch_ns, utc_ns
from predictor.types import SeriesKey

GIB = 1024**3
MIB = 1024**2


@dataclass
class Node:
    name: str
    cpu_cores: int = 32
    memory_bytes: int = 128 * GIB
    numa_nodes: int = 2


@dataclass
class Workload:
    namespace: str
    kind: str  # Deployment or StatefulSet
    name: str
    container: str
    replicas: int
    shape: str  # tidal, flat, bursty, trending
    cpu_base: float  # mean total cores across replicas
    memory_base: float  # mean total bytes across replicas
    amplitude: float  # relative daily swing
    peak_hour: float  # UTC hour of the main peak
    weekend: float  # weekend level relative to weekdays
    trend_per_week: float  # relative growth per week
    burst_rate_per_day: float
    cpu_request: float  # per pod, cores, sized as users do today (near the observed peak)
    memory_request: float  # per pod, bytes
    nodes: list[str] = field(default_factory=list)  # node of each replica
    gaps: list[tuple[pd.Timestamp, pd.Timedelta]] = field(default_factory=list)

    def key(self, resource: str) -> SeriesKey:
        return SeriesKey(self.namespace, self.kind, self.name, self.container, resource)

    @property
    def owner(self) -> str:
        """Name of the pods' direct owner (the ReplicaSet of a Deployment)."""
        return f"{self.name}-7d9f8c6b5" if self.kind == "Deployment" else self.name

    def pod_names(self) -> list[str]:
        if self.kind == "StatefulSet":
            return [f"{self.name}-{i}" for i in range(self.replicas)]
        return [f"{self.owner}-{chr(97 + i)}{i}x{i}q" for i in range(self.replicas)]


@dataclass
class SyntheticCluster:
    nodes: list[Node]
    workloads: list[Workload]
    start: pd.Timestamp
    end: pd.Timestamp  # exclusive
    step: pd.Timedelta
    seed: int

    @property
    def namespaces(self) -> list[str]:
        return sorted({w.namespace for w in self.workloads})

    def index(self, step: pd.Timedelta | None = None) -> pd.DatetimeIndex:
        # nanoseconds whatever pandas would pick (µs on pandas 3): the grid feeds epoch arithmetic
        return pd.date_range(self.start, self.end, freq=step or self.step, inclusive="left").as_unit("ns")

    def usage(self, w: Workload, resource: str, step: pd.Timedelta | None = None) -> pd.Series:
        """Total usage of workload `w` (sum over replicas) on the grid, before gaps are cut."""
        idx = self.index(step)
        salt = sum(map(ord, w.namespace + w.name + resource))
        rng = np.random.default_rng(self.seed * 1_000_003 + salt)
        t_h = (epoch_ns(idx) // 10**9) / 3600.0
        hour = t_h % 24
        weekday = idx.day_of_week.to_numpy()
        days = (idx - self.start).total_seconds().to_numpy() / 86400
        tide = _daily_tide(hour, w.peak_hour)
        week = np.where(weekday >= 5, w.weekend, 1.0)
        trend = 1.0 + w.trend_per_week * days / 7.0
        if resource == "cpu":
            level = w.cpu_base * trend * week * (1 + w.amplitude * tide)
            noise = rng.lognormal(0.0, 0.06 if w.shape != "bursty" else 0.15, len(idx))
            v = level * noise
            v = v + _bursts(rng, idx, w.burst_rate_per_day, w.cpu_base)
        else:
            # memory follows the tide slowly and keeps a floor (caches, heap)
            level = w.memory_base * trend * (0.75 + 0.25 * week * (1 + 0.5 * w.amplitude * tide))
            v = level * rng.lognormal(0.0, 0.02, len(idx))
        return pd.Series(np.maximum(v, 0.0), index=idx, name=w.key(resource).id)

    def history(self, step: pd.Timedelta | None = None, resources: tuple[str, ...] = ("cpu", "memory")) -> pd.DataFrame:
        """The long frame of every workload and resource, with the gaps cut out as missing rows."""
        frames = []
        for w in self.workloads:
            for res in resources:
                s = self.usage(w, res, step)
                for start, length in w.gaps:
                    s = s[(s.index < start) | (s.index >= start + length)]
                k = w.key(res)
                frames.append(pd.DataFrame({
                    "series": k.id, "timestamp": s.index, "value": s.to_numpy(),
                    "namespace": k.namespace, "kind": k.kind, "workload": k.name,
                    "container": k.container, "resource": res,
                }))
        return pd.concat(frames, ignore_index=True)

    def write_openmetrics(self, fh: TextIO, scrape: pd.Timedelta = pd.Timedelta("1m")) -> int:
        """cAdvisor / kube-state-metrics-shaped OpenMetrics, one family at a time; returns samples.

        Pods split their workload's usage evenly; the CPU counter integrates usage over time.
        """
        idx = self.index(scrape)
        ts = epoch_ns(idx) // 10**9  # OpenMetrics timestamps are epoch seconds
        dt = scrape.total_seconds()
        n = 0

        def write_series(name: str, labels: dict[str, str], values: np.ndarray, fmt: str = "{:.6f}") -> int:
            lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
            fh.writelines(f"{name}{{{lab}}} {fmt.format(v)} {t}\n" for v, t in zip(values, ts))
            return len(values)

        fh.write("# HELP container_cpu_usage_seconds Cumulative cpu time consumed in seconds.\n")
        fh.write("# TYPE container_cpu_usage_seconds counter\n")
        for w in self.workloads:
            cpu = self.usage(w, "cpu", scrape).to_numpy() / w.replicas
            counter = np.cumsum(cpu * dt) + 1000.0  # a counter starts from whatever the container had used
            for pod in w.pod_names():
                n += write_series("container_cpu_usage_seconds_total",
                                  {"namespace": w.namespace, "pod": pod, "container": w.container}, counter)
        fh.write("# HELP container_memory_working_set_bytes Current working set in bytes.\n")
        fh.write("# TYPE container_memory_working_set_bytes gauge\n")
        for w in self.workloads:
            mem = self.usage(w, "memory", scrape).to_numpy() / w.replicas
            for pod in w.pod_names():
                n += write_series("container_memory_working_set_bytes",
                                  {"namespace": w.namespace, "pod": pod, "container": w.container}, mem, "{:.0f}")
        ones = np.ones(len(ts))
        fh.write("# TYPE kube_pod_owner gauge\n")
        for w in self.workloads:
            for pod in w.pod_names():
                n += write_series("kube_pod_owner", {"namespace": w.namespace, "pod": pod,
                                  "owner_kind": "ReplicaSet" if w.kind == "Deployment" else w.kind,
                                  "owner_name": w.owner, "owner_is_controller": "true"}, ones, "{:.0f}")
        fh.write("# TYPE kube_replicaset_owner gauge\n")
        for w in self.workloads:
            if w.kind == "Deployment":
                n += write_series("kube_replicaset_owner", {"namespace": w.namespace, "replicaset": w.owner,
                                  "owner_kind": "Deployment", "owner_name": w.name,
                                  "owner_is_controller": "true"}, ones, "{:.0f}")
        fh.write("# TYPE kube_pod_container_resource_requests gauge\n")
        for w in self.workloads:
            for pod, node in zip(w.pod_names(), w.nodes):
                base = {"namespace": w.namespace, "pod": pod, "container": w.container, "node": node}
                n += write_series("kube_pod_container_resource_requests", {**base, "resource": "cpu", "unit": "core"},
                                  ones * w.cpu_request)
                n += write_series("kube_pod_container_resource_requests", {**base, "resource": "memory", "unit": "byte"},
                                  ones * w.memory_request, "{:.0f}")
        for kind, metric in (("Deployment", "kube_deployment_status_replicas"), ("StatefulSet", "kube_statefulset_status_replicas")):
            fh.write(f"# TYPE {metric} gauge\n")
            label = kind.lower()
            for w in self.workloads:
                if w.kind == kind:
                    n += write_series(metric, {"namespace": w.namespace, label: w.name}, ones * w.replicas, "{:.0f}")
        fh.write("# EOF\n")
        return n


def _daily_tide(hour: np.ndarray, peak_hour: float) -> np.ndarray:
    """A smooth day shape in [-1, 1]: main peak at peak_hour, a smaller evening peak, a night trough."""
    main = np.cos(2 * math.pi * (hour - peak_hour) / 24)
    evening = 0.35 * np.cos(2 * math.pi * (hour - (peak_hour + 6)) / 12)
    return np.clip((main + evening) / 1.2, -1, 1)


def _bursts(rng: np.random.Generator, idx: pd.DatetimeIndex, per_day: float, scale: float) -> np.ndarray:
    """Short flash crowds: Poisson arrivals, 10-60 minutes long, 0.5-2x the base level on top."""
    out = np.zeros(len(idx))
    if per_day <= 0 or len(idx) < 2:
        return out
    step_min = (idx[1] - idx[0]).total_seconds() / 60
    days = len(idx) * step_min / 1440
    for _ in range(rng.poisson(per_day * days)):
        at = rng.integers(0, len(idx))
        length = max(1, int(rng.uniform(10, 60) / step_min))
        out[at: at + length] += scale * rng.uniform(0.5, 2.0)
    return out


SHAPES = ["tidal", "tidal", "tidal", "flat", "tidal", "bursty", "tidal", "trending", "tidal", "tidal", "bursty", "trending"]
NAMES = ["frontend", "checkout", "search", "cron-reporter", "catalog", "ads", "recommend", "payments",
         "gateway", "profile", "ingest", "ledger", "inventory", "notify", "media", "auth"]


def generate_cluster(
    seed: int = 7,
    workloads: int = 12,
    namespaces: int = 3,
    nodes: int = 4,
    days: float = 21,
    step: str | pd.Timedelta = "5m",
    end: pd.Timestamp | str | None = None,
    gaps: bool = True,
) -> SyntheticCluster:
    """A cluster of `workloads` in `namespaces` on `nodes`, `days` of history ending at `end`
    (default: the last UTC midnight before now, so that the demo's days are real weekdays)."""
    if workloads < 1 or namespaces < 1 or nodes < 1 or days <= 0:
        raise ValueError("workloads, namespaces, nodes and days must be positive")
    rng = np.random.default_rng(seed)
    step = to_timedelta(step)
    end_ts = utc_ns(end) if end is not None else utc_ns(pd.Timestamp.now(tz="UTC").floor("D"))
    start = (end_ts - pd.Timedelta(days=days)).floor(step)
    ns_names = ["shop", "search", "platform", "data", "media", "ml"][:namespaces] + [f"ns{i}" for i in range(6, namespaces)]
    node_list = [Node(f"node-{i}") for i in range(nodes)]
    wls = []
    slot = 0
    for i in range(workloads):
        shape = SHAPES[i % len(SHAPES)]
        replicas = int(rng.integers(2, 5))
        cpu_base = float(rng.uniform(0.5, 4.0)) * replicas
        mem_base = float(rng.uniform(256, 2048)) * MIB * replicas
        amplitude = {"tidal": rng.uniform(0.5, 0.8), "flat": 0.03, "bursty": rng.uniform(0.1, 0.3),
                     "trending": rng.uniform(0.3, 0.5)}[shape]
        wl = Workload(
            namespace=ns_names[i % namespaces],
            kind="StatefulSet" if i % 5 == 4 else "Deployment",
            name=NAMES[i % len(NAMES)] + ("" if i < len(NAMES) else f"-{i}"),
            container="app",
            replicas=replicas,
            shape=shape,
            cpu_base=cpu_base,
            memory_base=mem_base,
            amplitude=float(amplitude),
            peak_hour=float(rng.uniform(11, 16)),
            weekend=float(rng.uniform(0.55, 0.85)) if shape != "flat" else 1.0,
            trend_per_week=0.08 if shape == "trending" else 0.0,
            burst_rate_per_day=2.0 if shape == "bursty" else 0.1,
            cpu_request=round(cpu_base / replicas * (1 + amplitude) * 1.3, 2),
            memory_request=float(int(mem_base / replicas * 1.4 / MIB) * MIB),
        )
        wl.nodes = [node_list[(slot + r) % nodes].name for r in range(replicas)]
        slot += replicas
        if gaps and i % 4 == 1:
            at = start + pd.Timedelta(days=float(rng.uniform(2, max(2.5, days - 2)))).floor(step)
            wl.gaps.append((at, pd.Timedelta(hours=float(rng.choice([0.5, 3, 6])))))
        wls.append(wl)
    return SyntheticCluster(nodes=node_list, workloads=wls, start=start, end=end_ts, step=step, seed=seed)
