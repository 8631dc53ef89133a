"""Which pods to move off nodes whose *forecast* peak will be hot: typed in, typed out, no I/O.

Koordinator's LowNodeLoad descheduler acts on current usage: a node above its high thresholds
sheds pods while some node sits below its low thresholds. Here the same rule reads the forecast:
a node is hot when the sum of its pods' forecast usage (one quantile, per step, over `horizon`)
peaks above `high_*` of allocatable; pods are chosen until that peak falls under `target_*`, and
only while some other node's forecast peak, with the pod added step by step, stays under `low_*`
(a move with nowhere to go is pointless: the pod would come back or stay pending). Pods are taken
reclaimed first, then shared; system and dedicated pods never (`Candidate.blocked`); at most
`max_per_owner` pods of one workload and `max_per_run` in all; a disruption budget with no
disruption left is respected before the API server has to refuse. Every pod on a hot node that is
not chosen gets its reason too.

`plan_rebalance` serves both the serving loop (`autoscaler/routines/rebalance.py`) and the
simulation on the real traces (`studies/simulation/rebalance/study.py`): one implementation of the choice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Mapping, Sequence

import numpy as np

from autoscaler.settings import RebalanceSettings
from contracts.qos import QosLevel

# the order pods are taken in: what borrows first, then the shared pool; anything else is never moved
QOS_ORDER = {QosLevel.RECLAIMED.value: 0, QosLevel.SHARED.value: 1}


@dataclass(frozen=True)
class Candidate:
    """One pod on a node: its forecast usage per step and whether it may move at all."""

    namespace: str
    name: str
    owner: str  # "namespace/Kind/name" of its workload ("" when unknown)
    qos: str
    cpu: np.ndarray  # cores per step
    memory: np.ndarray  # bytes per step
    blocked: str | None = None  # why it may never move (system, dedicated, no controller, ...)
    budget: str | None = None  # "namespace/name" of the disruption budget that covers it
    note: str = ""  # e.g. "no forecast: counted at its requests"

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class NodeLoad:
    """A node's allocatable resources and the pods on it."""

    name: str
    cpu: float  # allocatable cores
    memory: float  # allocatable bytes
    pods: Sequence[Candidate]
    accepts: bool = True  # a destination only when schedulable (not cordoned, no NoSchedule taint)


@dataclass(frozen=True)
class PlannedMove:
    namespace: str
    pod: str
    node: str
    destination: str  # where the forecast says it fits (the scheduler decides)
    reason: str


@dataclass
class RebalancePlan:
    """Moves in order; `hot` node -> why hot; `kept` "node ns/pod" -> why not moved."""

    moves: list[PlannedMove] = field(default_factory=list)
    hot: dict[str, str] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {"hot": self.hot, "moves": [vars(m) for m in self.moves], "kept": self.kept}


def _sum(pods: Sequence[Candidate], steps: int) -> tuple[np.ndarray, np.ndarray]:
    cpu, mem = np.zeros(steps), np.zeros(steps)
    for p in pods:
        cpu[: len(p.cpu)] += p.cpu[:steps]
        mem[: len(p.memory)] += p.memory[:steps]
    return cpu, mem


@dataclass
class _Load:
    """A node's forecast load while the plan is being made (moves change it)."""

    node: NodeLoad
    cpu: np.ndarray
    memory: np.ndarray

    def peak(self) -> tuple[float, float]:
        """Forecast peak as fractions of allocatable (inf when nothing is allocatable)."""
        c = float(self.cpu.max(initial=0.0)) / self.node.cpu if self.node.cpu > 0 else float("inf")
        m = float(self.memory.max(initial=0.0)) / self.node.memory if self.node.memory > 0 else float("inf")
        return c, m

    def peak_with(self, pod: Candidate) -> tuple[float, float]:
        n = min(len(self.cpu), len(pod.cpu))
        c = self.cpu.copy()
        m = self.memory.copy()
        c[:n] += pod.cpu[:n]
        m[:n] += pod.memory[:n]
        return float(c.max(initial=0.0)) / self.node.cpu, float(m.max(initial=0.0)) / self.node.memory

    def move(self, pod: Candidate, sign: float) -> None:
        n = min(len(self.cpu), len(pod.cpu))
        self.cpu[:n] += sign * pod.cpu[:n]
        self.memory[:n] += sign * pod.memory[:n]


def _hot_reason(peak: tuple[float, float], s: RebalanceSettings) -> str | None:
    parts = [f"forecast {res} peak {p:.2f} of allocatable > {high:.2f}"
             for res, p, high in (("CPU", peak[0], s.high_cpu), ("memory", peak[1], s.high_memory)) if p > high]
    return "; ".join(parts) or None


def _order(pods: Sequence[Candidate], load: _Load) -> list[Candidate]:
    """Reclaimed before shared, then the biggest share of the node's CPU peak step first (fewest moves)."""
    at = int(np.argmax(load.cpu)) if len(load.cpu) else 0
    return sorted(pods, key=lambda p: (QOS_ORDER.get(p.qos, 9), -float(p.cpu[at]) if at < len(p.cpu) else 0.0,
                                       p.label))


def _destination(pod: Candidate, loads: Sequence[_Load], source: str, s: RebalanceSettings
                 ) -> tuple[_Load, tuple[float, float]] | None:
    """The coolest node whose forecast peak with the pod stays under the `fill_to` thresholds, if any."""
    cap_c, cap_m = (s.low_cpu, s.low_memory) if s.fill_to == "low" else (s.target_cpu, s.target_memory)
    best = None
    for dst in loads:
        if dst.node.name == source or not dst.node.accepts or dst.node.cpu <= 0 or dst.node.memory <= 0:
            continue
        c, m = dst.peak_with(pod)
        if c <= cap_c and m <= cap_m and (best is None or c < best[1][0]):
            best = (dst, (c, m))
    return best


def plan_rebalance(nodes: Sequence[NodeLoad], settings: RebalanceSettings, steps: int,
                   budgets: Mapping[str, int] | None = None, only: Collection[str] | None = None) -> RebalancePlan:
    """The moves that bring hot nodes under their targets. `budgets`: disruption budget
    "namespace/name" -> disruptions it still allows (status.disruptionsAllowed); a pod whose budget
    is not listed is left to the API server to judge. `only`: the nodes that may shed pods (None: all)."""
    s = settings
    left = dict(budgets or {})
    loads = [_Load(n, *_sum(n.pods, steps)) for n in nodes]
    plan = RebalancePlan()
    hot = [(ld, why) for ld in loads if (why := _hot_reason(ld.peak(), s)) and (only is None or ld.node.name in only)]
    hot.sort(key=lambda x: (-max(x[0].peak()), x[0].node.name))  # the hottest first
    owners: dict[str, int] = {}
    for load, why in hot:
        name = load.node.name
        plan.hot[name] = why
        for pod in _order(load.node.pods, load):
            key = f"{name} {pod.label}"
            c, m = load.peak()
            never = pod.blocked or (None if pod.qos in QOS_ORDER else f"{pod.qos} pod")
            if never is None and c <= s.target_cpu and m <= s.target_memory:
                never = f"not needed: node forecast peak now CPU {c:.2f}, memory {m:.2f}, under target"
            if never is not None:
                plan.kept[key] = never
                continue
            why_not = _why_not(pod, s, left, owners, len(plan.moves))
            if why_not is None:
                dest = _destination(pod, loads, name, s)
                if dest is None:
                    cap = (s.low_cpu, s.low_memory) if s.fill_to == "low" else (s.target_cpu, s.target_memory)
                    why_not = (f"no other node keeps its forecast peak under CPU {cap[0]:.2f} / memory {cap[1]:.2f} "
                               f"({s.fill_to}) with it")
            if why_not is not None:
                plan.kept[key] = why_not
                continue
            assert dest is not None
            dst, (dc, dm) = dest
            load.move(pod, -1.0)
            dst.move(pod, +1.0)
            nc, nm = load.peak()
            plan.moves.append(PlannedMove(pod.namespace, pod.name, name, dst.node.name, (
                f"{name} hot ({why}); {pod.qos} pod, forecast peak {pod.cpu.max(initial=0.0):.2f} cores / "
                f"{pod.memory.max(initial=0.0) / 2**30:.2f} GiB{' (' + pod.note + ')' if pod.note else ''}; "
                f"node peak -> CPU {c:.2f}->{nc:.2f}, memory {m:.2f}->{nm:.2f}; room on {dst.node.name} "
                f"(its peak with it CPU {dc:.2f}, memory {dm:.2f})")))
            owners[pod.owner] = owners.get(pod.owner, 0) + 1
            if pod.budget is not None and pod.budget in left:
                left[pod.budget] -= 1
    return plan


def _why_not(pod: Candidate, s: RebalanceSettings, left: Mapping[str, int], owners: Mapping[str, int],
             planned: int) -> str | None:
    """Why this movable pod is not moved in this run, whatever the destinations; None when it may be."""
    if planned >= s.max_per_run:
        return f"limit of {s.max_per_run} moves a run reached"
    if pod.owner and owners.get(pod.owner, 0) >= s.max_per_owner:
        return f"limit of {s.max_per_owner} moves per workload a run reached ({pod.owner})"
    if pod.budget is not None and left.get(pod.budget, 1) < 1:
        return f"disruption budget {pod.budget} allows no more disruptions"
    return None
