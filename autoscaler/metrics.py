"""`/metrics`, `/healthz` and `/readyz` on one port, with prometheus-client.

Every metric lives in the `CollectorRegistry` handed in (a fresh one per loop and per test; nothing
is created at import time). After a frozen run the gauges keep the last good decisions: an HPA that
reads `tidewise_predicted_replicas` through Prometheus Adapter or KEDA never sees a value derived
from stale data.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from contracts.http_endpoint import Endpoint, probe, route_handler

from predictor.types import quantile_column

log = logging.getLogger(__name__)
# the `reason` label values of tidewise_registry_refused_total: predictor.registry.RegistryError's reasons,
# and `key` (the key file could not be read)
REGISTRY_REFUSALS = ("signature", "digest", "schema", "missing", "load", "key")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None, clock: Callable[[], float] = time.time):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.clock = clock
        self.predicted_replicas = Gauge("tidewise_predicted_replicas",
                                        "Replicas the forecast needs at now + pod start-up (before bounds)",
                                        ["namespace", "hpa", "kind", "workload"], registry=r)
        self.min_replicas = Gauge("tidewise_min_replicas", "minReplicas Tidewise sets on the HPA",
                                  ["namespace", "hpa"], registry=r)
        self.ihpa_predicted = Gauge("tidewise_ihpa_predicted_replicas",
                                    "Replicas the forecast needs for a Katalyst IHPA's target (before bounds)",
                                    ["namespace", "ihpa"], registry=r)
        self.ihpa_desired = Gauge("tidewise_ihpa_desired_replicas", "status.desiredReplicas Tidewise writes on the IHPA",
                                  ["namespace", "ihpa"], registry=r)
        self.forecast = Gauge("tidewise_forecast",
                              "Forecast of a workload series at now + the HPA lead (cores for cpu, bytes for memory)",
                              ["namespace", "kind", "workload", "container", "resource", "quantile"], registry=r)
        self.vpa_target = Gauge("tidewise_vpa_target", "Recommended per-pod request (millicpu or bytes)",
                                ["namespace", "vpa", "container", "resource"], registry=r)
        self.vpa_budget = Gauge("tidewise_vpa_violation_budget",
                                "Violation budget of a VPA container resource: the share of 5-minute steps usage may "
                                "exceed the request (its tidewise.io/violation-budget annotation, else vpa.violation_budget)",
                                ["namespace", "vpa", "container", "resource"], registry=r)
        self.vpa_violation_rate = Gauge("tidewise_vpa_violation_rate",
                                        "Achieved share of the last 24 h's 5-minute steps with usage per replica over the "
                                        "request in force: the pods' own requests when serve sees pods of the workload, "
                                        "else the pod template's", ["namespace", "vpa", "container", "resource"], registry=r)
        self.vpa_replicas = Gauge("tidewise_vpa_replicas", "Replicas of a VPA's target serve saw (per-pod targets "
                                  "times this are the workload's total)", ["namespace", "vpa", "kind", "workload"],
                                  registry=r)
        self.vpa_reason = Gauge("tidewise_vpa_reason", "1 per VPA container resource: the model, quantile and regime "
                                "behind its target (the full reason is in decisions.json)",
                                ["namespace", "vpa", "container", "resource", "model", "quantile", "regime"], registry=r)
        self.reclaimed_millicpu = Gauge("tidewise_reclaimed_millicpu", "Reclaimable CPU published per node",
                                        ["node"], registry=r)
        self.reclaimed_memory = Gauge("tidewise_reclaimed_memory_bytes", "Reclaimable memory published per node",
                                      ["node"], registry=r)
        self.step_seconds = Gauge("tidewise_step_seconds", "Duration of each step of the last run", ["step"], registry=r)
        self.runs = Counter("tidewise_runs", "Runs by outcome (ok, frozen, killed)", ["outcome"], registry=r)
        self.writes = Counter("tidewise_writes", "Writes by outcome (written, dry-run, not-found, forbidden, ...)",
                              ["outcome"], registry=r)
        self.skipped = Gauge("tidewise_skipped", "Objects and series without a decision in the last run", registry=r)
        self.last_success = Gauge("tidewise_last_success_timestamp_seconds", "Wall time of the last good run",
                                  registry=r)
        self.registry_refused_total = Counter(
            "tidewise_registry_refused", "Model registry versions refused on load, by why: signature, digest "
            "(a checksum or the manifest digest), schema, missing, load (verifies but does not parse), key",
            ["reason"], registry=r)
        for reason in REGISTRY_REFUSALS:  # every series exists from the start: increase() sees the first refusal
            self.registry_refused_total.labels(reason)
        self.registry_version = Gauge("tidewise_registry_version_info",
                                      "1 for the model registry version serve forecasts with", ["version"], registry=r)
        self.last_run_ok: bool | None = None
        self.last_run_wall: float | None = None

    def observe(self, rep: Any, forecasts: dict[str, Any], hpa_series: dict[str, Any], lead_steps: int = 0) -> None:
        """Export one run. Decision gauges are replaced only by a good run."""
        self.runs.labels(rep.outcome).inc()
        for s in rep.steps:
            self.step_seconds.labels(s.name).set(s.seconds)
        for r in rep.results:
            self.writes.labels(r.outcome).inc()
        self.skipped.set(len(rep.skipped))
        self.last_run_wall = self.clock()
        self.last_run_ok = rep.outcome != "frozen"
        if rep.outcome == "frozen":
            return
        self.last_success.set(self.last_run_wall)
        for g in (self.predicted_replicas, self.min_replicas, self.forecast, self.vpa_target, self.vpa_budget,
                  self.vpa_violation_rate, self.vpa_replicas, self.vpa_reason,
                  self.reclaimed_millicpu, self.reclaimed_memory, self.ihpa_predicted, self.ihpa_desired):
            g.clear()
        for i in getattr(rep.sections.get("ihpa"), "decisions", []):  # features/ihpa.IhpaSection
            self.ihpa_predicted.labels(i.namespace, i.name).set(i.hpa.predicted)
            self.ihpa_desired.labels(i.namespace, i.name).set(i.hpa.min_replicas)
        for d in rep.hpa:
            kind, target = hpa_series.get(f"{d.namespace}/{d.name}", ("", ""))[:2]
            self.predicted_replicas.labels(d.namespace, d.name, kind, target).set(d.predicted)
            self.min_replicas.labels(d.namespace, d.name).set(d.min_replicas)
        for d in rep.vpa:
            self.vpa_replicas.labels(d.namespace, d.name, d.target_kind, d.target_name).set(d.replicas)
            for c in d.containers:
                for res, rec in c.resources.items():
                    self.vpa_target.labels(d.namespace, d.name, c.container, res).set(rec.target)
                    self.vpa_budget.labels(d.namespace, d.name, c.container, res).set(rec.budget)
                    self.vpa_reason.labels(d.namespace, d.name, c.container, res, rec.reason.model,
                                           f"{rec.reason.quantile:g}", rec.regime).set(1)
                    if rec.violation_rate is not None:
                        self.vpa_violation_rate.labels(d.namespace, d.name, c.container, res).set(rec.violation_rate)
        for p in rep.reclaim:
            self.reclaimed_millicpu.labels(p.node).set(p.reclaimed_millicpu)
            self.reclaimed_memory.labels(p.node).set(p.reclaimed_memory_bytes)
        for sid, fc in forecasts.items():
            parts = sid.split("/")
            if len(parts) != 5 or len(fc.values) == 0:
                continue
            row = fc.values[min(lead_steps, len(fc.values) - 1)]
            for j, q in enumerate(fc.quantiles):
                self.forecast.labels(*parts, quantile_column(q)[1:]).set(float(row[j]))

    def registry_refused(self, reason: str) -> None:
        """A registry version was refused (autoscaler.input.registry.RegistryReader calls it)."""
        self.registry_refused_total.labels(reason).inc()

    def registry_loaded(self, version: str) -> None:
        """The version serve forecasts with from now on."""
        self.registry_version.clear()
        self.registry_version.labels(version).set(1)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class HealthServer(Endpoint):
    """One HTTP port: /metrics, /healthz (the process loop is alive), /readyz (a run succeeded
    recently and this replica may act: it leads, or there is no election). It listens on `host`
    only: 127.0.0.1 by default (a review on a laptop shows nothing to the network), 0.0.0.0 in a pod
    (deploy/serve.yaml: Prometheus scrapes the pod IP; deploy/serve-networkpolicy.yaml admits only
    the scraper)."""

    def __init__(self, metrics: Metrics, host: str = "127.0.0.1", port: int = 8080,
                 live: Callable[[], bool] = lambda: True, ready: Callable[[], bool] = lambda: True):
        self.metrics = metrics
        self.live = live
        self.ready = ready
        routes = {"/metrics": lambda: (200, metrics.exposition(), CONTENT_TYPE_LATEST),
                  "/healthz": probe(live, b"ok\n", b"loop stalled\n"),
                  "/readyz": probe(ready, b"ready\n", b"not ready\n")}
        super().__init__(host, port, route_handler(routes, log), "tidewise-http")
