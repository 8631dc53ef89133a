"""Run the serving loop until SIGTERM: one run per interval (backing off after a freeze), only
while holding the leader Lease when there is an elector; liveness and readiness for the probes.

A replica that does not lead waits at most 5 s between tries, so a takeover after the leader dies
is quick; it reports ready (it is healthy, just standing by). The cyclic garbage of a run is collected
after the run is handed over, in the idle time before the next one (`ServingLoop.collect_garbage`).
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any, Callable

from autoscaler.routines.context import RunReport, parse_duration
from autoscaler.routines.leader import LeaderElector
from autoscaler.routines.loop import ServingLoop
from autoscaler.settings import LoopSettings

log = logging.getLogger(__name__)


def leader_elector(kube: Any, loop_settings: LoopSettings, identity: str | None) -> LeaderElector:
    """The Lease elector; identity defaults to $POD_NAME, then the host name."""
    who = identity or os.environ.get("POD_NAME") or socket.gethostname()
    return LeaderElector(kube, loop_settings.lease_namespace, loop_settings.lease_name, who,
                         loop_settings.lease_duration_seconds)


class Runner:
    """Drives `loop` until `stop` is set (by SIGTERM once `stop_on_sigterm` is called)."""

    def __init__(self, loop: ServingLoop, elector: LeaderElector | None, last_run_ok: Callable[[], bool | None],
                 on_report: Callable[[RunReport], None]):
        self.loop = loop
        self.elector = elector
        self.last_run_ok = last_run_ok
        self.on_report = on_report
        self.interval = parse_duration(loop.settings.loop.interval).total_seconds()
        loop.collect_between_runs = True  # the cyclic GC runs in the idle time after each run, not inside it
        self.stop = threading.Event()
        self._last_tick = time.monotonic()

    def stop_on_sigterm(self) -> None:
        """Kubernetes stops a pod with SIGTERM: finish the current run, then return."""
        signal.signal(signal.SIGTERM, lambda *_: self.stop.set())

    def live(self) -> bool:
        """The loop has come round within a few intervals (back-off included)."""
        return time.monotonic() - self._last_tick < max(3 * self.loop.next_delay(), 3 * self.interval) + 60

    def ready(self) -> bool:
        """The last run decided (not frozen), or this replica is standing by for the Lease."""
        return self.last_run_ok() is True or (self.elector is not None and not self.elector.leading)

    def run(self) -> None:
        while not self.stop.is_set():
            self._last_tick = time.monotonic()
            leading = self.elector is None or self.elector.try_acquire()
            if leading:
                try:
                    self.on_report(self.loop.run_once())
                finally:
                    took = self.loop.collect_garbage()
                    log.debug("garbage of the run collected in %.2f s", took)
            self.stop.wait(self.loop.next_delay() if self.elector is None or self.elector.leading
                           else min(self.interval, 5.0))
