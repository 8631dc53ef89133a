"""The node agent's `/metrics` and `/healthz` (`tidewise enforce --metrics-port N`), with prometheus-client.

Every series carries `node` (the agent always knows its own: --node, settings or $NODE_NAME), so a
dashboard groups by node rather than by the pod IP in `instance`. Everything lives in the
`CollectorRegistry` handed in (a fresh one per agent and per test; nothing is created at import
time). What each metric means, and the alerts on them: docs/node-enforcer.md, "Metrics".
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from contracts.http_endpoint import Endpoint, probe, route_handler

if TYPE_CHECKING:
    from node_enforcer.agent import ReconcileResult

log = logging.getLogger(__name__)

# where a pass can fail: the pod source or the reclaim plan (collect), the allocation (policy), cgroup,
# isolation and tc writes (enforce), the checkpoint, and Kubernetes API calls (evictions, the CNR report)
STAGES = ("collect", "policy", "enforce", "checkpoint", "kube")
# why the agent evicts (policy.eviction.triggers): MemAvailable under the watermark, or memory PSI
EVICTION_REASONS = ("memory", "pressure")
# /healthz fails when no pass ended for this long: the back-off caps a pass's wait at 60 s (agent.run)
STALL_SECONDS = 120.0


def eviction_reason(text: str) -> str:
    """An Eviction's free-text reason -> the `reason` label."""
    return "memory" if text.startswith("MemAvailable") else "pressure" if "PSI" in text else "other"


class EnforcerMetrics:
    def __init__(self, node: str, registry: CollectorRegistry | None = None, memory_floor_bytes: int = 0,
                 interval_seconds: float = 5.0, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.node, self.memory_floor_bytes, self.clock, self.monotonic = node, memory_floor_bytes, clock, monotonic
        self.stall_after = max(STALL_SECONDS, 4 * interval_seconds)
        self.runs = Counter("tidewise_enforcer_runs", "Agent passes (reconciles), whatever their outcome",
                            ["node"], registry=r)
        self.errors = Counter("tidewise_enforcer_errors", "Errors by stage: collect (pod source, reclaim plan), "
                              "policy, enforce (each failed cgroup, isolation or tc write), checkpoint, kube "
                              "(refused evictions, a failed topology report)", ["node", "stage"], registry=r)
        self.evictions = Counter("tidewise_enforcer_evictions", "Pods evicted (with eviction dry-run: sent with "
                                 "dryRun=All), by trigger: memory (MemAvailable) or pressure (PSI)",
                                 ["node", "reason"], registry=r)
        self.last_success = Gauge("tidewise_enforcer_last_success_timestamp_seconds",
                                  "Wall time of the last pass that listed the pods and enforced the allocation",
                                  ["node"], registry=r)
        self.reclaimable_cores = Gauge("tidewise_enforcer_reclaimable_cores",
                                       "CPUs of the reclaim pool: what this node lends batch pods now", ["node"], registry=r)
        self.batch_usage_cores = Gauge("tidewise_enforcer_batch_usage_cores",
                                       "Cores batch pods used between the last two passes (their cgroups' CPU time)",
                                       ["node"], registry=r)
        self.reclaimable_memory = Gauge("tidewise_enforcer_reclaimable_memory_bytes",
                                        "Memory the reclaim plan lends batch pods now (their memory cap; absent "
                                        "without a plan)", ["node"], registry=r)
        self.batch_usage_memory = Gauge("tidewise_enforcer_batch_usage_memory_bytes",
                                        "Memory batch pods use now (their cgroups')", ["node"], registry=r)
        for g in (self.runs, self.last_success, self.reclaimable_cores, self.batch_usage_cores, self.batch_usage_memory):
            g.labels(node)  # every series exists from the start: rate() sees the first increment
        for stage in STAGES:
            self.errors.labels(node, stage)
        for reason in EVICTION_REASONS:
            self.evictions.labels(node, reason)
        self.last_pass = monotonic()  # the start counts as a pass for /healthz
        self._cpu: tuple[float, dict[str, float]] | None = None  # (monotonic time, pod uid -> CPU seconds)

    def error(self, stage: str, n: int = 1) -> None:
        if n:
            self.errors.labels(self.node, stage).inc(n)

    def crashed(self, stage: str) -> None:
        """A pass that raised in `stage`: counted as a pass and an error of that stage, not a success."""
        self.runs.labels(self.node).inc()
        self.error(stage)

    def observe(self, res: "ReconcileResult") -> None:
        """Export one finished pass (`Agent.reconcile_once` calls it)."""
        node = self.node
        self.runs.labels(node).inc()
        self.last_pass = self.monotonic()
        if res.error:
            self.error(res.error_stage or "collect")
        else:
            self.last_success.labels(node).set(self.clock())
        if res.report is not None:
            self.error("enforce", len(res.report.errors))
        for ev in res.evictions:
            if ev.result.startswith("refused"):
                self.error("kube")
            else:
                self.evictions.labels(node, eviction_reason(ev.reason)).inc()
        if res.topology_report is not None and res.topology_report.startswith("failed"):
            self.error("kube")
        if res.allocation is not None:
            self.reclaimable_cores.labels(node).set(len(res.allocation.pools.get("reclaim", ())))
            self._memory(res)
        if res.usage is not None:
            self.batch_usage_memory.labels(node).set(res.usage.memory_bytes)
            self._cpu_rate(res.usage.cpu_seconds)

    def _memory(self, res: "ReconcileResult") -> None:
        if res.reclaim is None:  # no plan source: batch pods get no memory cap beyond their own limits
            try:
                self.reclaimable_memory.remove(self.node)
            except KeyError:
                pass
            return
        # the cap policy.plan gives batch pods (and policy.isolation their QoS root): the plan's, floored
        self.reclaimable_memory.labels(self.node).set(max(int(res.reclaim.reclaimed_memory_bytes),
                                                          self.memory_floor_bytes))

    def _cpu_rate(self, counters: dict[str, float]) -> None:
        """Cores between this pass and the last, over the pods seen in both (a restarted pod's
        counter starts again at 0: its drop is left out, not counted negative)."""
        now = self.monotonic()
        if self._cpu is not None and now > self._cpu[0]:
            then, before = self._cpu
            used = sum(max(0.0, v - before[uid]) for uid, v in counters.items() if uid in before)
            self.batch_usage_cores.labels(self.node).set(used / (now - then))
        self._cpu = (now, counters)

    def alive(self) -> bool:
        return self.monotonic() - self.last_pass < self.stall_after

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer(Endpoint):
    """/metrics and /healthz (a pass ended within `stall_after`) on `host:port`, from a daemon thread.
    127.0.0.1 unless told otherwise; the DaemonSet binds 0.0.0.0 so that Prometheus scrapes the pod IP."""

    def __init__(self, metrics: EnforcerMetrics, host: str = "127.0.0.1", port: int = 0) -> None:
        self.metrics = metrics
        routes = {"/metrics": lambda: (200, metrics.exposition(), CONTENT_TYPE_LATEST),
                  "/healthz": probe(metrics.alive, b"ok\n", b"no pass ended recently\n")}
        super().__init__(host, port, route_handler(routes, log), "tidewise-enforcer-http")
