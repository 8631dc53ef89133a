"""What one extender process lets its clients cost it: body and node counts, time, connections,
workers and the bytes its memories keep. Defaults are sized for the 1 GiB container limit of
deploy/scheduler-extender.yaml (BENCHMARKS.md, "Extender under a flood", measures them) and set
from `tidewise extender`'s flags.

`Deadlines` cuts a connection whose request has not arrived whole in time (a client sending a byte
every few seconds never trips a per-read timeout); `ByteBudget` bounds the request bodies held at
once, so that many clients sending large bodies together are told 503, not buffered.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    # nodeCacheCapable: true sends names (5,000 are ~150 KiB); false sends whole Nodes, ~3.4 KiB each
    # here, so 4 MiB holds ~1,200 of them: raise it for a larger fleet without the node cache. Parsing
    # holds the GIL (~10 ms a MiB): a smaller bound keeps a flood of large bodies from stalling calls
    max_body_bytes: int = 4 * 2**20
    max_nodes: int = 5_000  # Kubernetes' largest supported cluster: more names in one call is not a scheduler
    client_timeout: float = 10.0  # s per read, and for a whole request to arrive; the scheduler's own is 5 s
    max_connections: int = 256  # open at once; past it 503 at once (the scheduler keeps 1-2; an idle thread ~100 KiB)
    workers: int = 4  # requests parsed and answered at once (the GIL runs one anyway; parsing is the memory)
    inflight_bytes: int = 64 * 2**20  # request bodies held at once, read but not yet parsed
    explain_nodes: int = 1_000  # per call kept for /explain, refusals first (the counts are in the log)
    explain_bytes: int = 64 * 2**20  # all of /explain's reasons; the oldest pods are forgotten first
    annotation_bytes: int = 64 * 2**20  # parsed plans and forecasts (5,000 nodes x 2 need ~20 MiB)


class ByteBudget:
    """`take(n)` is False when `n` more bytes would pass the budget; `give(n)` returns them."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.limit:
                return False
            self.used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.used -= n


class Deadlines:
    """Connections armed with a deadline, shut down by one daemon thread once it passes."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, tick: float = 0.2) -> None:
        self.clock, self.tick = clock, tick
        self.cut = 0  # connections cut so far (for tests and logs)
        self._armed: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._run, name="extender-deadlines", daemon=True).start()

    def arm(self, conn: socket.socket, seconds: float) -> None:
        with self._lock:
            self._armed[conn] = self.clock() + seconds

    def disarm(self, conn: socket.socket) -> None:
        with self._lock:
            self._armed.pop(conn, None)

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.tick):
            now = self.clock()
            with self._lock:
                late = [c for c, t in self._armed.items() if t <= now]
                for c in late:
                    del self._armed[c]
            for c in late:
                self.cut += 1
                log.debug("cut a client whose request did not arrive in time")
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already gone
