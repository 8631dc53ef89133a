"""A user's own history (the long file `tidewise fetch` writes) as the simulators' online services.

Each workload container's CPU usage series (`namespace/kind/name/container/cpu`) becomes one trace,
cut and shaped as the public traces are (`traces.make_trace`: the last `days` whole days simulated,
the days before them its training history). Its pods become services: as many as the workload's
`replicas` series says (its median) where the file has one, else one. A pod's demand is the
workload's usage split evenly over its pods, in cores; its request is the file's `cpu_request`
series (its median, split over the pods) where present, else sized as the studies size requests
today (the history's busiest step times U(headroom)). Pods go onto the nodes a `node` label column
names where every CPU series has one; else LeastAllocated (largest first) onto `nodes` nodes, or,
when no node count was given, onto the fewest nodes that hold every request at `request_fill`.

The file is read by `predictor.history.load_history` (the reader and validation every command
uses); its errors name the file as `--history PATH`.
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
import pandas as pd

from contracts.errors import InputError
from predictor.sources.prometheus import WORKLOAD_CONTAINER
from predictor.types import SeriesKey
from studies.simulation.harness.cluster import Cluster, ClusterSettings, Service, assemble, build_cluster
from studies.simulation.harness.traces import Trace, _longest_run, load_traces, make_trace

log = logging.getLogger(__name__)

MIN_HISTORY_DAYS = 5  # make_trace's default: whole training days before the simulated ones
FETCH_HINT = "tidewise fetch --what cpu,requests,replicas"


@dataclass
class HistoryWorkload:
    name: str  # namespace/kind/name/container
    trace: Trace
    request: float | None  # cores for the whole workload (the file's cpu_request median); None: not in the file
    pods: int  # the file's replicas median, else 1
    node: str | None = None  # the file's `node` label


@dataclass
class UserHistory:
    path: str
    step: pd.Timedelta
    workloads: list[HistoryWorkload]
    skipped: list[str] = field(default_factory=list)  # CPU series too short (or flat) for the simulated days

    @property
    def traces(self) -> list[Trace]:
        return [w.trace for w in self.workloads]


class SourceSettings(Protocol):
    """What a study's settings say about where its services come from."""

    traces: str
    history: str | None
    history_step: str
    fit_nodes: bool
    nodes: int
    days: int
    seed: int
    max_history_days: int
    trace_names: list[str] | None


def _read(path: str, step: pd.Timedelta):
    from predictor.history import load_history

    if not os.path.isfile(path):
        raise InputError(f"--history {path}: no such file; pass the long file `tidewise fetch --output PATH` wrote")
    try:
        return load_history(path, step)
    except InputError as exc:
        msg = str(exc)
        if msg.startswith("input "):
            msg = msg[len("input "):]
        raise InputError(f"--history {msg}" if msg.startswith(path) else f"--history {path}: {msg}") from None


def _median(y: pd.Series | None) -> float | None:
    if y is None or not y.notna().any():
        return None
    v = float(np.nanmedian(y.to_numpy()))
    return v if v > 0 else None


def _label(labels: pd.DataFrame | None, series: str, column: str) -> str | None:
    if labels is None or column not in labels.columns or series not in labels.index:
        return None
    v = labels.at[series, column]
    return None if v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() in ("", "nan") \
        else str(v).strip()


def _too_short(path: str, cpu: dict[SeriesKey, pd.Series], step: pd.Timedelta, days: int) -> InputError:
    # the reader put every series on `step` already: only the gaps are left to measure
    longest = max(len(_longest_run(y, step)) for y in cpu.values())
    have = longest * step / pd.Timedelta(days=1)
    need = days + MIN_HISTORY_DAYS
    return InputError(f"--history {path}: its longest CPU series covers {have:.1f} days without an hour-long gap; "
                      f"--days {days} needs {need} whole days ({MIN_HISTORY_DAYS} of training history first): "
                      f"fetch --last {need + 1}d or lower --days")


def load_user_history(path: str, step: pd.Timedelta, days: int, max_history_days: int = 21) -> UserHistory:
    """Every workload container with a CPU usage series long enough for `days` simulated days."""
    hist = _read(path, step)
    cpu: dict[SeriesKey, pd.Series] = {}
    resources: set[str] = set()
    for sid, y in hist.series.items():
        try:
            key = SeriesKey.parse(sid)
        except ValueError:
            continue
        resources.add(key.resource)
        if key.resource == "cpu":
            cpu[key] = y
    if not cpu:
        found = ", ".join(sorted(resources)) or "no namespace/kind/name/container/resource ids"
        raise InputError(f"--history {path}: no CPU usage series (ids namespace/kind/name/container/cpu; found "
                         f"{found}); write it with `{FETCH_HINT}`")
    workloads, skipped = [], []
    for key in sorted(cpu, key=lambda k: k.id):
        name = key.id.rsplit("/", 1)[0]
        trace = make_trace(name, cpu[key], days=days, min_history_days=MIN_HISTORY_DAYS,
                           max_history_days=max_history_days)
        if trace is None:
            skipped.append(name)
            continue
        request = _median(hist.series.get(replace(key, resource="cpu_request").id))
        replicas = _median(hist.series.get(replace(key, container=WORKLOAD_CONTAINER, resource="replicas").id))
        workloads.append(HistoryWorkload(name, trace, request, max(1, round(replicas or 1)),
                                         _label(hist.labels, key.id, "node")))
    if not workloads:
        raise _too_short(path, cpu, step, days)
    if skipped:
        log.warning("--history %s: %d of %d CPU series too short for %d simulated days, left out: %s", path,
                    len(skipped), len(cpu), days, ", ".join(skipped[:5]))
    return UserHistory(path, step, workloads, skipped)


def _pods(h: UserHistory, settings: ClusterSettings, rng: np.random.Generator) -> list[Service]:
    """Every workload's pods (node -1: not placed yet), each a share of the workload's demand."""
    alloc = settings.cores - settings.system_reserved
    out = []
    for i, w in enumerate(h.workloads):
        peak = float(np.nanmax(w.trace.history.to_numpy())) * w.trace.unit  # cores, the busiest step
        for p in range(w.pods):
            if w.request is not None:
                req = w.request / w.pods
            else:
                req = max(0.05, round(peak / w.pods * float(rng.uniform(*settings.headroom)), 2))
            if req > alloc:
                raise InputError(f"--history {h.path}: workload {w.name} requests {req:.1f} cores a pod, more than "
                                 f"a node's {alloc:g} allocatable; fetch its replicas (`{FETCH_HINT}`) so that it "
                                 "is split into its pods")
            out.append(Service(f"{w.name}/pod-{p}", i, -1, req, req * settings.limit_factor, w.trace.unit / w.pods))
    return out


def _least_allocated(pods: list[Service], n: int, alloc: float) -> np.ndarray | None:
    """The default scheduler's LeastAllocated placement, largest request first; None when one does not fit."""
    requested = np.zeros(n)
    for s in sorted(pods, key=lambda s: -s.request):
        fits = np.flatnonzero(requested + s.request <= alloc + 1e-9)
        if len(fits) == 0:
            return None
        s.node = int(fits[np.argmin(requested[fits])])
        requested[s.node] += s.request
    return requested


def _place(h: UserHistory, pods: list[Service], settings: ClusterSettings, fit: bool,
           min_nodes: int) -> tuple[int, np.ndarray]:
    """(nodes, requested per node): by the file's node labels, else LeastAllocated (see the module docstring)."""
    alloc = settings.cores - settings.system_reserved
    total = sum(s.request for s in pods)
    if all(w.node for w in h.workloads):
        names = sorted({str(w.node) for w in h.workloads})
        n = max(len(names), min_nodes, 0 if fit else settings.nodes)
        labelled = np.zeros(n)
        for s in pods:
            s.node = names.index(str(h.workloads[s.trace].node))
            labelled[s.node] += s.request
        return n, labelled
    if not fit:
        requested = _least_allocated(pods, settings.nodes, alloc)
        if requested is None:
            raise InputError(f"--nodes {settings.nodes}: the history's {len(pods)} pods request {total:.1f} cores, "
                             f"more than {settings.nodes} nodes of {alloc:g} allocatable cores hold; give more "
                             "nodes, or leave --nodes out for the fewest that hold them")
        return settings.nodes, requested
    n = max(min_nodes, math.ceil(total / (settings.request_fill * alloc)))
    while (requested := _least_allocated(pods, n, alloc)) is None:
        n += 1
    return n, requested


def _placed(h: UserHistory, settings: ClusterSettings, seed: int, fit: bool,
            min_nodes: int) -> tuple[list[Service], int, np.ndarray, np.random.Generator]:
    """The history's pods sized (seeded) and placed: (pods, nodes, requested per node, the generator
    to go on with)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    pods = _pods(h, settings, rng)
    n, requested = _place(h, pods, settings, fit, min_nodes)
    return pods, n, requested, rng


def history_cluster(h: UserHistory, settings: ClusterSettings, seed: int, minutes: int, fit: bool = True,
                    min_nodes: int = 1) -> Cluster:
    """The history's pods on a cluster (seeded: sized requests and the daemons' noise)."""
    pods, n, requested, rng = _placed(h, settings, seed, fit, min_nodes)
    return assemble(h.traces, pods, replace(settings, nodes=n), requested, rng, minutes)


def summary(h: UserHistory, cluster: Cluster) -> dict:
    """What the study read from the file (results.json's `history`)."""
    from predictor.durations import format_duration

    return {"file": h.path, "step": format_duration(h.step), "workloads": len(h.workloads),
            "pods": len(cluster.services), "nodes": cluster.nodes,
            "requests_from_file": sum(1 for w in h.workloads if w.request is not None),
            "nodes_from_labels": all(w.node for w in h.workloads),
            "requested_cores": round(float(cluster.requested.sum()), 3),
            "mean_usage_cores": round(float(cluster.online.mean() * cluster.nodes), 3),
            "skipped": h.skipped}


def read_history(s: SourceSettings, settings: ClusterSettings | None = None, min_nodes: int = 1) -> UserHistory | None:
    """The study's history file read and checked (None: the study reads the traces), and with the
    study's cluster `settings` its pods placed once: what the command line calls before it creates the
    output folder, so that a bad file or too few nodes leave nothing behind."""
    if s.history is None:
        return None
    from predictor.durations import parse_duration
    from studies.simulation.harness.sweep import check_days

    check_days(s.days)
    h = load_user_history(s.history, parse_duration(s.history_step, what="--step"), s.days, s.max_history_days)
    if settings is not None:
        _placed(h, settings, s.seed, s.fit_nodes, min_nodes)  # raises where the pods do not fit
    return h


def study_cluster(s: SourceSettings, settings: ClusterSettings, minutes: int, min_nodes: int = 1,
                  loaded: UserHistory | None = None) -> tuple[list[Trace], Cluster, dict | None]:
    """A study's traces and cluster: from the user's history file (`s.history`; `loaded` when already
    read) when given, else drawn from the public traces in `s.traces`; and what was read from the
    history (None for the traces)."""
    if s.history is None:
        traces = load_traces(s.traces, days=s.days, max_history_days=s.max_history_days, names=s.trace_names)
        return traces, build_cluster(traces, settings, seed=s.seed, minutes=minutes), None
    h = loaded or read_history(s)
    assert h is not None
    cluster = history_cluster(h, settings, s.seed, minutes, fit=s.fit_nodes, min_nodes=min_nodes)
    return h.traces, cluster, summary(h, cluster)
