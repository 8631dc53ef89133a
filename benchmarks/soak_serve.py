"""The serving side of the soak (benchmarks/soak.py), in its own process so that its RSS is serve's.

It builds what `tidewise serve --source prometheus --apply` builds (tidewise/commands/serve.py):
`WatchedCluster` + `ApiSink` over the real `kubernetes` client, `PrometheusSource`, `Metrics`, the
Lease elector, and drives `Runner.run()` — with simulated time. `SimTime` stands in for the
runner's stop event: its `wait(delay)` reports the run to the driver, which moves the simulated
clock on by `delay` (the interval, or the back-off after a freeze), applies that minute's faults,
and answers with the new time and the resourceVersion each kind's newest event has; the watches
are then given a moment to deliver those events (the 60 s between real runs), and the next run starts.

At the end, `audit` holds the last run's decisions against the API fake: every decision that
should have been written (the changes those decisions make to the objects as the API now shows
them, the loop's memory of its writes left out) must already be there.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import pandas as pd

from autoscaler.routines.context import RunReport


def _run_summary(rep: RunReport, seconds: float, cpu: float) -> dict[str, Any]:
    by: dict[str, int] = {}
    for r in rep.results:
        by[r.outcome] = by.get(r.outcome, 0) + 1
    return {"outcome": rep.outcome, "reason": rep.reason[:300], "seconds": round(seconds, 4), "cpu": round(cpu, 4),
            "changes": len(rep.changes), "results": by, "held": len(rep.held), "drifted": len(rep.drifted),
            "steps": {s.name: round(s.seconds, 4) for s in rep.steps}}


class SimTime:
    """The runner's `stop` event, driven by the soak's driver over a pipe."""

    def __init__(self, conn: Any, start: pd.Timestamp, cluster: Any, sync_timeout: float = 10.0):
        self.conn = conn
        self.now = start
        self.cluster = cluster
        self.sync_timeout = sync_timeout
        self.last: dict[str, Any] | None = None
        self.unsynced = 0  # runs that started before a watch had delivered every write
        self._stopped = False
        self._t = time.perf_counter()
        self._cpu = time.process_time()

    def is_set(self) -> bool:
        return self._stopped

    def set(self) -> None:
        self._stopped = True

    def reported(self, rep: RunReport) -> None:
        self.last = _run_summary(rep, time.perf_counter() - self._t, time.process_time() - self._cpu)

    def reached(self) -> dict[str, int]:
        return {k: int(i.resource_version or 0) for k, i in getattr(self.cluster, "informers", {}).items()}

    def wait(self, timeout: float | None = None) -> bool:
        self.conn.send(("tick", {"delay": timeout, "report": self.last, "reached": self.reached()}))
        self.last = None
        msg = self.conn.recv()
        if msg[0] == "stop":
            self._stopped = True
            return True
        self.now = msg[1]["now"]
        self._sync(msg[1]["versions"])
        self._t, self._cpu = time.perf_counter(), time.process_time()
        return False

    def _sync(self, versions: dict[str, int]) -> None:
        deadline = time.monotonic() + self.sync_timeout
        informers = getattr(self.cluster, "informers", {})
        while time.monotonic() < deadline:
            if all(int(i.resource_version or 0) >= versions.get(k, 0) for k, i in informers.items()):
                return
            time.sleep(0.01)
        self.unsynced += 1


def audit(loop: Any, kube: Any) -> dict[str, Any]:
    """The last run's decisions against the cluster as a fresh list shows it (no memory of writes)."""
    from autoscaler.features import features
    from autoscaler.input.cluster import ApiCluster
    from autoscaler.routines.change_policy import ChangePolicy
    from autoscaler.routines.changes import candidate_changes
    from autoscaler.routines.context import OK, iso
    from autoscaler.routines.drift import OBSERVED, observed_part

    rep = loop.last_report
    if rep is None or rep.outcome != OK or rep.now is None:
        return {"checked": False, "why": f"last run {rep.outcome if rep else 'missing'}: {rep.reason if rep else ''}"}
    state = ApiCluster(kube).read()
    before: dict[str, Any] = {}
    fresh = features(loop.settings, ChangePolicy(loop.settings))  # no memory of writes: the cluster alone
    changes = candidate_changes(fresh, rep, state, iso(rep.now), before)
    lost = []
    for c in changes:
        # held by a guardrail, or outside `serve.select` (named in `skipped`): not to be written
        if c.kind not in OBSERVED or c.key in rep.held or c.key in rep.skipped or c.key not in before:
            continue
        want, shown = observed_part(c.kind, c.obj, loop.settings.reclaim), observed_part(c.kind, before[c.key],
                                                                                        loop.settings.reclaim)
        if want != shown:
            lost.append({"object": c.key, "decided": str(want)[:200], "cluster": str(shown)[:200]})
    return {"checked": True, "now": str(rep.now), "decisions": len(rep.vpa) + len(rep.hpa) + len(rep.reclaim),
            "held": len(rep.held), "not_selected": sum(c.key in rep.skipped for c in changes), "lost": len(lost),
            "lost_examples": lost[:20]}


def serve_child(conn: Any, cfg: dict[str, Any]) -> None:
    """The process body: serve until the driver says stop, then audit and report."""
    logging.basicConfig(filename=cfg["log"], level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from autoscaler.input.incremental import incremental_history
    from autoscaler.input.watched import WatchedCluster
    from autoscaler.kube import Kube
    from autoscaler.metrics import Metrics
    from autoscaler.output.sinks import ApiSink
    from autoscaler.routines.leader import LeaderElector
    from autoscaler.routines.loop import ServingLoop
    from autoscaler.routines.runner import Runner
    from autoscaler.settings import ServeSettings
    from predictor.sources.prometheus import PrometheusSettings, PrometheusSource
    from tidewise.commands.serve import _extra_kinds

    settings = ServeSettings()
    settings.loop.apply = True
    settings.loop.forecast_model = cfg["model"]
    settings.loop.history_window = cfg["history_window"]
    settings.loop.forecast_budget = cfg["forecast_budget"]
    if cfg.get("full_fetch"):
        settings.loop.full_refetch_every = None
    step = pd.Timedelta(settings.loop.step)
    kube = Kube.from_config(cfg["kubeconfig"])
    cluster = WatchedCluster(kube, extra_kinds=_extra_kinds(settings))
    source = incremental_history(PrometheusSource(PrometheusSettings(url=cfg["prometheus_url"],
                                                                     rate_window=cfg["rate_window"])),
                                 settings.loop.fetch_overlap, settings.loop.full_refetch_every)  # as serve's forever mode
    sim = SimTime(conn, cfg["start"], cluster)
    metrics = Metrics()
    loop = ServingLoop(settings, source, cluster, ApiSink(kube), clock=lambda: sim.now.floor(step), metrics=metrics)
    elector = LeaderElector(kube, settings.loop.lease_namespace, settings.loop.lease_name, "soak",
                            settings.loop.lease_duration_seconds, clock=lambda: sim.now.timestamp())

    def on_report(rep: RunReport) -> None:
        sim.reported(rep)

    runner = Runner(loop, elector, lambda: metrics.last_run_ok, on_report)
    runner.stop = sim  # type: ignore[assignment]  # the simulated clock is the stop event
    try:
        runner.run()
        result = audit(loop, kube)
    except Exception as exc:  # noqa: BLE001 - the driver reports it; a soak must not hang on a crash
        logging.getLogger(__name__).exception("soak serve process failed")
        result = {"checked": False, "why": f"{type(exc).__name__}: {exc}"}
    informers = {k: vars(i.stats) for k, i in cluster.informers.items()}
    cluster.stop()
    conn.send(("done", {"audit": result, "unsynced_runs": sim.unsynced, "informers": informers}))
