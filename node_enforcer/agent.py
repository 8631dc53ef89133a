"""The node agent's reconcile loop: a fixed list of named, timed steps.

    pods -> reclaim plan -> restore (first pass only) -> policy -> root -> enforce -> isolate
    -> checkpoint -> report -> eviction

`root` caps the reclaimed root's memory when the policy holds batch by it, before any pod's own
cap is raised to the whole plan; a cap that does not take makes the policy split the plan among the
batch pods instead (`policy.batch_memory`). `isolate` applies the disk I/O, network and
reclaimed-root memory limits (`policy.isolation`);
`report` publishes the topology on the node's CustomNodeResource when it changed. With metrics
(`node_enforcer.metrics`), a last `usage` step reads the batch pods' cgroups and every pass,
failed or not, is exported.

Topology is read once at start (CPU hot-plug is rare; a restart re-reads it). A failing pod source
freezes the node as it is (nothing is written from missing data) and the loop backs off; one pod's
cgroup error is logged and the others are still enforced.
"""
from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Sequence, TypeVar

from contracts.errors import TidewiseError
from contracts.kube_errors import KubeError
from contracts.reclaim import ReclaimPlan
from node_enforcer.collect.pressure import read_pressure, read_psi_some_avg10
from node_enforcer.collect.qos import QosResolver
from node_enforcer.collect.usage import BatchUsage, read_batch_usage
from node_enforcer.enforce.apply import EnforceReport, enforce
from node_enforcer.enforce.cgroups import CgroupDriver
from node_enforcer.enforce.checkpoint import Restored, path_problem, restore, save_checkpoint
from node_enforcer.enforce.cnr import CnrPublisher
from node_enforcer.enforce.evictor import Eviction, Evictor
from node_enforcer.enforce.files import FilePort
from node_enforcer.enforce.isolation import enforce_isolation, enforce_root
from node_enforcer.enforce.tc import Tc, TcError
from node_enforcer.model.devices import BlockDevice
from node_enforcer.model.pod import Pod
from node_enforcer.model.pressure import Pressure
from node_enforcer.model.topology import Topology
from node_enforcer.policy.allocation import CpuAllocation
from node_enforcer.policy.eviction import triggers
from node_enforcer.policy.isolation import IsolationPlan, plan_isolation, root_memory
from node_enforcer.policy.plan import plan
from node_enforcer.policy.topology_report import topology_status
from node_enforcer.settings import EnforcerSettings

if TYPE_CHECKING:  # prometheus-client is loaded only when the metrics are asked for
    from node_enforcer.metrics import EnforcerMetrics

log = logging.getLogger(__name__)
T = TypeVar("T")
# the metrics' error stage of each step (node_enforcer.metrics.STAGES)
STAGE_OF = {"pods": "collect", "reclaim": "collect", "restore": "checkpoint", "policy": "policy",
            "root": "enforce", "policy (split)": "policy", "enforce": "enforce", "isolate": "enforce",
            "checkpoint": "checkpoint", "report": "kube", "eviction": "kube", "usage": "collect"}


@dataclass
class ReconcileResult:
    allocation: CpuAllocation | None = None
    report: EnforceReport | None = None
    evictions: list[Eviction] = field(default_factory=list)
    restored: Restored | None = None
    checkpoint_written: bool = False
    pressure: Pressure | None = None
    isolation: IsolationPlan | None = None
    topology_report: str | None = None  # what publishing the CNR status did (None: not asked)
    timings: dict[str, float] = field(default_factory=dict)  # step -> seconds
    error: str | None = None
    error_stage: str | None = None  # where `error` happened (node_enforcer.metrics.STAGES)
    reclaim: ReclaimPlan | None = None  # the plan this pass enforced (None: no plan source)
    usage: BatchUsage | None = None  # what batch pods use (read only when metrics are exported)

    def fail(self, message: str, stage: str) -> ReconcileResult:
        self.error, self.error_stage = message, stage
        log.error(message)
        return self


class Agent:
    def __init__(self, settings: EnforcerSettings, topology: Topology, list_pods: Callable[[], Sequence[Pod]],
                 driver: CgroupDriver, files: FilePort, reclaim: Callable[[], ReclaimPlan | None] = lambda: None,
                 evictor: Evictor | None = None, read_pressure_fn: Callable[[], Pressure] | None = None,
                 clock: Callable[[], float] = time.perf_counter, devices: Sequence[BlockDevice] = (),
                 tc: Tc | None = None, cnr: CnrPublisher | None = None,
                 read_io_psi: Callable[[], float | None] | None = None,
                 metrics: EnforcerMetrics | None = None) -> None:
        self.s, self.topology, self.list_pods, self.driver, self.files = settings, topology, list_pods, driver, files
        self.reclaim, self.evictor, self.clock = reclaim, evictor, clock
        self.read_pressure = read_pressure_fn or (lambda: read_pressure(settings.proc_root, settings.psi_path))
        self.resolver = QosResolver()
        self.devices, self.tc, self.cnr = tuple(devices), tc, cnr
        self.read_io_psi = read_io_psi or (lambda: read_psi_some_avg10(
            settings.io.psi_path or f"{settings.proc_root}/pressure/io"))
        self.previous: dict[str, frozenset[int]] | None = None  # None until restored
        self.last: CpuAllocation | None = None
        self._refusals_logged: set[str] = set()
        self._io_logged: set[tuple[str, str]] = set()
        self._memory_note = self._root_problem = ""  # how batch memory was held last pass: logged when it changes
        self.stopping, self._sleeping = False, False
        self.metrics, self._stage = metrics, "collect"

    def _step(self, res: ReconcileResult, name: str, fn: Callable[[], T]) -> T:
        t = self.clock()
        self._stage = STAGE_OF.get(name, "collect")
        try:
            return fn()
        finally:
            res.timings[name] = self.clock() - t

    def reconcile_once(self) -> ReconcileResult:
        """One pass; exported to the metrics when there are some (a pass that raises counts as an
        error of the stage it was in, then the exception goes on)."""
        if self.metrics is None:
            return self._reconcile()
        try:
            res = self._reconcile()
        except Exception:
            self.metrics.crashed(self._stage)
            raise
        self.metrics.observe(res)
        return res

    def _reconcile(self) -> ReconcileResult:
        res = ReconcileResult()
        try:
            pods = self._step(res, "pods", self.list_pods)
        except TidewiseError as exc:
            return res.fail(f"pod source failed, node left as it is: {exc}",
                            "kube" if isinstance(exc, KubeError) else "collect")
        saving = not self.files.dry_run and bool(self.s.checkpoint)
        # checked before any cgroup write: enforcing without being able to save the allocation
        # would move dedicated pods after the next restart (and used to crash after the writes)
        if saving and (problem := path_problem(self.s.checkpoint)):
            return res.fail(f"checkpoint {self.s.checkpoint}: {problem}; nothing enforced", "checkpoint")
        reclaim = res.reclaim = self._step(res, "reclaim", self.reclaim)
        if self.previous is None:
            res.restored = self._step(res, "restore", lambda: restore(self.s.checkpoint, self.s.node, pods,
                                                                      self.driver, self.files, self.resolver))
            self.previous = dict(res.restored.dedicated)
            log.info("restored %d dedicated allocation(s) from %s", len(self.previous), res.restored.source)
        alloc, root = self._policy(res, pods, reclaim, self.previous)
        res.allocation = alloc
        self._log_refusals(alloc)
        report = self._step(res, "enforce", lambda: enforce(alloc, pods, self.driver, self.files, self.s.proc_root))
        if root is not None:  # written first: its changes and problems lead the report
            report.changes[:0] = root.changes
            report.unsupported[:0], report.errors[:0] = root.unsupported, root.errors
        res.report = report
        if self.s.io.enabled or self.s.network.enabled or self.s.reclaimed_root_memory:
            self._step(res, "isolate", lambda: self._isolate(res, pods, reclaim, alloc))
        if saving:
            try:
                res.checkpoint_written = self._step(res, "checkpoint",
                                                    lambda: save_checkpoint(self.s.checkpoint, self.s.node, alloc))
            except (OSError, TidewiseError) as exc:  # e.g. the disk filled since the check: report, retry next pass
                res.fail(f"checkpoint {self.s.checkpoint} not saved: {exc}", "checkpoint")
        self.previous = dict(alloc.dedicated)
        self.last = alloc
        if self.cnr is not None:
            status = topology_status(self.topology, alloc, pods, reclaim)
            res.topology_report = self._step(res, "report", lambda: self.cnr.publish(status))  # type: ignore[union-attr]
        if self.evictor is not None:
            res.evictions = self._step(res, "eviction", lambda: self._evict(res, pods, alloc))
        if self.metrics is not None:
            res.usage = self._step(res, "usage", lambda: read_batch_usage(self.driver, self.files, pods, alloc))
        log.info("reconcile: %s; %s", report.summary(),
                 ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in res.timings.items()))
        return res

    def _policy(self, res: ReconcileResult, pods: Sequence[Pod], reclaim: ReclaimPlan | None,
                previous: Mapping[str, frozenset[int]] | None) -> tuple[CpuAllocation, EnforceReport | None]:
        """The allocation, with the reclaimed root's cap written first when it holds batch; a cap
        that does not take (an error, a file this hierarchy lacks) splits the plan among the pods."""
        def decide(root_ok: bool) -> CpuAllocation:
            return plan(self.topology, pods, reclaim, self.s.policy, previous, self.resolver, root_memory=root_ok)

        alloc = self._step(res, "policy", lambda: decide(self.s.reclaimed_root_memory))
        root, written = root_memory(alloc.batch_memory, self.s.isolation()), None
        if root is not None and root.memory_max_bytes is not None:
            written = self._step(res, "root", lambda: enforce_root(root, self.driver, self.files))
            if written.errors or written.unsupported:
                problem = "; ".join(written.errors + written.unsupported)
                log.log(logging.DEBUG if problem == self._root_problem else logging.WARNING,
                        "reclaimed root %s: memory cap not in force (%s); the plan is split among the reclaimed pods",
                        root.k8s_qos, problem)
                self._root_problem = problem
                alloc = self._step(res, "policy (split)", lambda: decide(False))
        memory = alloc.batch_memory
        if memory is not None and memory.note != self._memory_note:
            log.info("%s", memory.note)
        self._memory_note = "" if memory is None else memory.note
        return alloc, written

    def _isolate(self, res: ReconcileResult, pods: Sequence[Pod], reclaim: ReclaimPlan | None,
                 alloc: CpuAllocation) -> None:
        """Disk I/O, network and reclaimed-root limits; tc changes join the report's changes."""
        psi = self.read_io_psi() if self.s.io.enabled else None
        iso = plan_isolation(alloc, pods, reclaim, self.devices, psi, self.s.isolation(), self.s.policy)
        res.isolation = iso
        for p in iso.io:  # a malformed I/O annotation: once per pod and problem, not every pass
            if p.problem and (p.uid, p.problem) not in self._io_logged:
                self._io_logged.add((p.uid, p.problem))
                log.warning("pod %s: %s", p.key, p.problem, extra={"pod": p.key})
        assert res.report is not None
        enforce_isolation(iso, pods, self.driver, self.files, res.report)
        if iso.net is not None and self.tc is not None:
            try:
                changes, problems = self.tc.ensure(iso.net)
            except TcError as exc:
                changes, problems = [], []
                res.report.errors.append(f"tc on {iso.net.device}: {exc}")
            res.report.changes.extend(changes)
            res.report.unsupported.extend(problems)

    def _log_refusals(self, alloc: CpuAllocation) -> None:
        for r in alloc.refused:  # once per pod, not every pass
            if r.uid not in self._refusals_logged:
                log.warning("dedicated_cores refused for %s (runs in the share pool): %s", r.key, r.reason,
                            extra={"pod": r.key})
        self._refusals_logged = {r.uid for r in alloc.refused}

    def _evict(self, res: ReconcileResult, pods: Sequence[Pod], alloc: CpuAllocation) -> list[Eviction]:
        res.pressure = self.read_pressure()
        if self.evictor is None or not triggers(res.pressure, self.evictor.s)[0]:
            return []  # calm: no need to read every pod's memory usage
        usage = {p.uid: u for p in pods if (u := self.driver.memory_usage(p, self.files)) is not None}
        return self.evictor.run(res.pressure, pods, alloc, usage)

    def run(self, iterations: int | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        """Reconcile every `interval_seconds`; after a failed pass back off (x2, at most 60 s).
        Returns after the pass under way once `stop` was called (SIGTERM: see `run_until_signalled`)."""
        delay, n = self.s.interval_seconds, 0
        try:
            while (iterations is None or n < iterations) and not self.stopping:
                n += 1
                res = self.reconcile_once()
                delay = min(delay * 2, 60.0) if res.error else self.s.interval_seconds
                if (iterations is None or n < iterations) and not self.stopping:
                    self._sleeping = True
                    try:
                        sleep(delay)
                    finally:
                        self._sleeping = False
        except _Wake:
            pass  # raised by `stop` only while sleeping, between two passes
        if self.stopping:
            log.info("stopped after %d pass(es): the last one finished", n)

    def stop(self, signum: int | None = None, frame: object = None) -> None:
        """Finish the pass under way (never a pod's cgroup half written), then return from `run`;
        a stop during the sleep between passes ends it at once."""
        self.stopping = True
        if self._sleeping:
            raise _Wake

    def run_until_signalled(self) -> None:
        """`run`, with SIGTERM (what the kubelet sends on pod deletion) and SIGINT calling `stop`."""
        previous = {sig: signal.signal(sig, self.stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class _Wake(Exception):
    """Ends the sleep between passes when the agent is told to stop."""
