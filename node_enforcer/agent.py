"""The node agent's reconcile loop: a fixed list of named, timed steps.

    pods -> reclaim plan -> restore (first pass only) -> policy -> enforce -> checkpoint -> eviction

Topology is read once at start (CPU hot-plug is rare; a restart re-reads it). A failing pod source
freezes the node as it is (nothing is written from missing data) and the loop backs off; one pod's
cgroup error is logged and the others are still enforced.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, Sequence

from node_enforcer.cgroups import CgroupDriver
from node_enforcer.checkpoint import Restored, path_problem, restore, save_checkpoint
from node_enforcer.enforce import EnforceReport, enforce
from node_enforcer.eviction import Eviction, EvictionSettings, Evictor, Pressure, read_pressure, triggers
from node_enforcer.pods import Pod
from node_enforcer.policy import CpuAllocation, PolicySettings, ReclaimLike, plan
from node_enforcer.qos import QosResolver
from node_enforcer.topology import Topology
from node_enforcer.writers import Writer
from predictor.errors import TidewiseError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnforcerSettings:
    """The `enforcer:` section of the settings file (flags override it)."""

    node: str = ""  # this node's name (the DaemonSet passes spec.nodeName)
    pods_from: str = "kubelet"  # kubelet | api | file
    pods_file: str | None = None  # with pods_from=file
    kubelet_url: str = "https://127.0.0.1:10250"  # the kubelet's authenticated port (needs nodes/proxy)
    kubelet_ca: str | None = None  # CA bundle for the kubelet's serving cert; None = system CAs
    sysfs_root: str = "/sys"
    cgroup_root: str = "/sys/fs/cgroup"
    cgroup_driver: str = "cgroupfs"  # the kubelet's --cgroup-driver: cgroupfs | systemd
    cgroup_version: int = 0  # 0 = detect (2 when the root has cgroup.controllers)
    # folder under each hierarchy that holds kubepods[.slice]; a mapping gives one per v1 controller
    # (`{cpuset: a, memory: b, "*": default}`), for nodes whose hierarchies differ
    cgroup_parent: str | dict[str, str] = ""
    proc_root: str = "/proc"
    # memory PSI file for eviction; None = <proc_root>/pressure/memory (the whole node). A cgroup's
    # own file (e.g. kubepods' memory.pressure on v2) measures the pods' stalls only.
    psi_path: str | None = None
    checkpoint: str = "/var/lib/tidewise/enforcer-checkpoint.json"
    reclaim_plan: str | None = None  # the serving loop's ReclaimPlan for this node (JSON file)
    # where the plan comes from: api (this Node's tidewise.io/reclaim-plan annotation, written by
    # `tidewise serve --apply`), file (reclaim_plan), none; "" = file when reclaim_plan is set, else none
    reclaim_plan_from: str = ""
    interval_seconds: float = 5.0  # reconcile period: cgroups drift (kubelet rewrites) within seconds
    dry_run: bool = False  # cgroup writes: print the diff instead
    # policy
    reserved_cpus: int = 2  # threads for the kubelet, runtime and system_cores pods
    reclaim_floor_cpus: int = 2  # batch keeps at least this many threads
    min_share_cpus: int = 1
    share_headroom: float = 0.10  # margin over the shared pool's demand
    # eviction
    evict: bool = False  # False = evictions are sent with dryRun=All (or only logged without an API)
    eviction_enabled: bool = True
    min_available_ratio: float = 0.05
    min_available_bytes: int = 0
    psi_some_avg10: float = 30.0
    max_evictions: int = 1
    rate_window_seconds: float = 60.0

    def policy(self) -> PolicySettings:
        return PolicySettings(reserved_cpus=self.reserved_cpus, reclaim_floor_cpus=self.reclaim_floor_cpus,
                              min_share_cpus=self.min_share_cpus, share_headroom=self.share_headroom)

    def eviction(self) -> EvictionSettings:
        names = {f.name for f in fields(EvictionSettings)} - {"dry_run"}
        return EvictionSettings(dry_run=not self.evict, **{n: getattr(self, n) for n in names})


@dataclass
class ReconcileResult:
    allocation: CpuAllocation | None = None
    report: EnforceReport | None = None
    evictions: list[Eviction] = field(default_factory=list)
    restored: Restored | None = None
    checkpoint_written: bool = False
    pressure: Pressure | None = None
    timings: dict[str, float] = field(default_factory=dict)  # step -> seconds
    error: str | None = None


class Agent:
    def __init__(self, settings: EnforcerSettings, topology: Topology, list_pods: Callable[[], Sequence[Pod]],
                 driver: CgroupDriver, writer: Writer, reclaim: Callable[[], ReclaimLike | None] = lambda: None,
                 evictor: Evictor | None = None, read_pressure_fn: Callable[[], Pressure] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.s, self.topology, self.list_pods, self.driver, self.writer = settings, topology, list_pods, driver, writer
        self.reclaim, self.evictor, self.clock = reclaim, evictor, clock
        self.read_pressure = read_pressure_fn or (lambda: read_pressure(settings.proc_root, settings.psi_path))
        self.resolver = QosResolver()
        self.previous: dict[str, frozenset[int]] | None = None  # None until restored
        self.last: CpuAllocation | None = None
        self._refusals_logged: set[str] = set()

    def reconcile_once(self) -> ReconcileResult:
        res = ReconcileResult()
        state: dict[str, Any] = {}

        def step(name: str, fn: Callable[[], Any]) -> Any:
            t = self.clock()
            try:
                return fn()
            finally:
                res.timings[name] = self.clock() - t

        try:
            pods = step("pods", self.list_pods)
        except TidewiseError as exc:
            res.error = f"pod source failed, node left as it is: {exc}"
            log.error(res.error)
            return res
        if not self.writer.dry_run and self.s.checkpoint:
            # checked before any cgroup write: enforcing without being able to save the allocation
            # would move dedicated pods after the next restart (and used to crash after the writes)
            problem = path_problem(self.s.checkpoint)
            if problem:
                res.error = f"checkpoint {self.s.checkpoint}: {problem}; nothing enforced"
                log.error(res.error)
                return res
        state["reclaim"] = step("reclaim", self.reclaim)
        if self.previous is None:
            res.restored = step("restore", lambda: restore(self.s.checkpoint, self.s.node, pods, self.driver,
                                                            self.writer, self.resolver))
            self.previous = dict(res.restored.dedicated)
            log.info("restored %d dedicated allocation(s) from %s", len(self.previous), res.restored.source)
        alloc = step("policy", lambda: plan(self.topology, pods, state["reclaim"], self.s.policy(),
                                            self.previous, self.resolver))
        res.allocation = alloc
        for r in alloc.refused:  # once per pod, not every pass
            if r.uid not in self._refusals_logged:
                log.warning("dedicated_cores refused for %s (runs in the share pool): %s", r.key, r.reason,
                            extra={"pod": r.key})
        self._refusals_logged = {r.uid for r in alloc.refused}
        res.report = step("enforce", lambda: enforce(alloc, pods, self.driver, self.writer, self.s.proc_root))
        if not self.writer.dry_run and self.s.checkpoint:
            try:
                res.checkpoint_written = step("checkpoint", lambda: save_checkpoint(self.s.checkpoint, self.s.node, alloc))
            except (OSError, TidewiseError) as exc:  # e.g. the disk filled since the check: report, retry next pass
                res.error = f"checkpoint {self.s.checkpoint} not saved: {exc}"
                log.error(res.error)
        self.previous = dict(alloc.dedicated)
        self.last = alloc
        if self.evictor is not None:
            def evict() -> list[Eviction]:
                res.pressure = self.read_pressure()
                if self.evictor is None or not triggers(res.pressure, self.evictor.s)[0]:
                    return []  # calm: no need to read every pod's memory usage
                usage = {p.uid: u for p in pods if (u := self.driver.memory_usage(p, self.writer)) is not None}
                return self.evictor.run(res.pressure, pods, alloc, usage)
            res.evictions = step("eviction", evict)
        log.info("reconcile: %s; %s", res.report.summary(),
                 ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in res.timings.items()))
        return res

    def run(self, iterations: int | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        """Reconcile every `interval_seconds`; after a failed pass back off (x2, at most 60 s)."""
        delay, n = self.s.interval_seconds, 0
        while iterations is None or n < iterations:
            n += 1
            res = self.reconcile_once()
            delay = min(delay * 2, 60.0) if res.error else self.s.interval_seconds
            if iterations is None or n < iterations:
                sleep(delay)


def reclaim_loader(path: str | None, node: str,
                   now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
                   annotations: Callable[[], Mapping[str, str]] | None = None,
                   ) -> Callable[[], ReclaimLike | None]:
    """Re-read the plan every pass (the publisher rewrites it): from the node's annotation when
    `annotations` is given (it returns this Node's annotations), else from the file at `path`.

    Fails closed: a plan that is missing, unreadable, malformed, another node's or expired is
    refused with a warning (once per distinct reason) and replaced by `zero_plan` — the reclaim pool
    keeps only its floor. No source at all (no path, no annotations) means no plan: None."""
    from node_enforcer.reclaim import load_reclaim_plan, plan_from_annotation, zero_plan, PLAN_ANNOTATION

    last: list[str] = [""]

    def warn(msg: str) -> None:  # once per distinct problem, not every pass
        log.log(logging.DEBUG if msg == last[0] else logging.WARNING, msg)
        last[0] = msg

    def read(at: dt.datetime) -> ReclaimLike:
        if annotations is not None:
            return plan_from_annotation(annotations().get(PLAN_ANNOTATION), node, at)
        p = load_reclaim_plan(path or "", node or None)
        if p.expired(at):
            raise TidewiseError(f"reclaim plan {path}: its window ({p.window_start} + {p.window_seconds} s) "
                                "has passed")
        return p

    def load() -> ReclaimLike | None:
        if annotations is None and not path:
            return None
        at = now()
        try:
            p = read(at)
        except TidewiseError as exc:
            warn(f"reclaim plan refused, reclaiming nothing beyond the floor: {exc}")
            return zero_plan(node, at)
        last[0] = ""
        return p

    return load
