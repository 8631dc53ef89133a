"""An informer-style cache of one kind of Kubernetes object: list once, then watch from the list's
resourceVersion, so a quiet cluster costs one idle connection instead of a full list every run.

Standard library only, so that both the serving loop and the node agent use it without importing
each other or the `kubernetes` client: each side's API wrapper supplies two callables,
`list_fn() -> (items, resourceVersion)` and `watch_fn(resourceVersion, opened) -> iterator of events`
(`{"type": "ADDED|MODIFIED|DELETED|BOOKMARK|ERROR", "object": {...}}`, ending when the server closes
the stream; `opened()` is called once the server has answered the watch with 200), and raises `Gone`
when the resourceVersion is too old (HTTP 410, or an ERROR event with code 410). On `Gone` the
informer lists again; on a dropped connection it watches again from the last resourceVersion it saw,
after a bounded exponential backoff. `items()` refuses to answer before the first list and when the
watch has been failing for longer than `stale_after` seconds: no decision is made from a cache that
may have stopped following the cluster (fail closed).

A failure ends when a watch is open again and has held for `settle` seconds, an event arrives, or
the server ends a stream on its timeout: a quiet kind (an HPA watch with no change for 300 s) has
no event to show, and its reopened watch is as current as a busy one. A watch cut as soon as it
opens (a flapping load balancer) does not end the failure: the server had no time to send what
happened since our resourceVersion.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, ParamSpec, TypeVar

from contracts.kube_errors import KubeError

log = logging.getLogger(__name__)
_P = ParamSpec("_P")
_R = TypeVar("_R")

Object = dict[str, Any]
ListFn = Callable[[], tuple[list[Object], str]]
WatchFn = Callable[[str, Callable[[], None]], Iterable[Object]]


class Gone(KubeError):
    """410: the resourceVersion a watch started from was compacted away; list again."""

    status = 410


class StaleCache(KubeError):
    """The cache has not been filled yet, or its watch has been failing for too long."""


def object_key(obj: Object) -> str:
    """`namespace/name` (`name` for cluster-scoped objects): unique within one kind."""
    md = obj.get("metadata") or {}
    ns = md.get("namespace")
    return f"{ns}/{md.get('name')}" if ns else str(md.get("name"))


def answered(call: Callable[_P, _R], opened: Callable[[], None]) -> Callable[_P, _R]:
    """`call` (a client's list function asked to watch), calling `opened()` once it returned a
    response with a 2xx status: the API wrappers hand this to their client's watch stream, which
    otherwise shows nothing until the first event (a quiet kind's could be minutes away)."""

    def call_and_tell(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        response = call(*args, **kwargs)
        status = getattr(response, "status", 200)
        if not isinstance(status, int) or 200 <= status < 300:
            opened()
        return response

    return call_and_tell


@dataclass
class Backoff:
    """Exponential backoff between failed watches: 0.5 s doubling to a 30 s cap, so a broken API
    server sees at most two reconnects a minute from each informer once the cap is reached."""

    initial: float = 0.5
    cap: float = 30.0
    _next: float = field(default=0.0, init=False)

    def next(self) -> float:
        self._next = self.initial if self._next == 0.0 else min(self._next * 2, self.cap)
        return self._next

    def reset(self) -> None:
        self._next = 0.0


@dataclass
class InformerStats:
    """What the informer asked of the API server (for logs, metrics and tests)."""

    lists: int = 0
    watches: int = 0
    relists_after_gone: int = 0
    resumes_after_error: int = 0
    events: int = 0
    opened: int = 0  # watches the server answered with 200


class Informer:
    """One kind's cache, kept current by a daemon thread (`start()`), read with `items()`."""

    def __init__(self, name: str, list_fn: ListFn, watch_fn: WatchFn, *, backoff: Backoff | None = None,
                 stale_after: float = 120.0, settle: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.list_fn, self.watch_fn = list_fn, watch_fn
        self.backoff = backoff or Backoff()
        self.stale_after = stale_after  # 2 min: two missed 60 s runs of serve before it freezes
        # 5 s: a cut at once (load balancer, restarting API server) happens within a second of the
        # open; a watch that held 5 s got what the server kept since our resourceVersion
        self.settle = settle
        self.clock = clock
        self.stats = InformerStats()
        self.resource_version: str | None = None  # None: list before the next watch
        self._store: dict[str, Object] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._failing_since: float | None = None
        self._open_since: float | None = None  # when the current watch was answered; None between watches
        self._held_open: float | None = None  # how long the last failed watch had been open (None: never)
        self._last_error = ""
        self._thread: threading.Thread | None = None

    # reading ------------------------------------------------------------------------------------
    def items(self) -> list[Object]:
        """The cached objects (shared, not copied: callers must not mutate them); raises
        `StaleCache` before the first list or when the watch has failed for `stale_after` s."""
        with self._lock:
            why = self._unusable()
            if why:
                raise StaleCache(why)
            return list(self._store.values())

    def unusable(self) -> str | None:
        """Why `items()` would refuse now (for a health check), or None when it would answer."""
        with self._lock:
            return self._unusable()

    def _unusable(self) -> str | None:
        if not self._synced.is_set():
            return f"{self.name}: not listed yet ({self._last_error or 'waiting for the first list'})"
        now = self.clock()
        if self._open_since is not None and now - self._open_since >= self.settle:
            return None  # open again and held: whatever failed before is over
        if self._failing_since is not None and now - self._failing_since > self.stale_after:
            return (f"{self.name}: watch failing for more than {self.stale_after:g} s "
                    f"({self._last_error}); not deciding from a stale cache")
        return None

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def prime(self) -> "Informer":
        """The first list, in the caller's thread: its errors (a missing CRD, RBAC) reach the caller."""
        self._relist()
        return self

    # one cycle ----------------------------------------------------------------------------------
    def run_cycle(self) -> None:
        """List if needed, then follow one watch stream until the server ends it."""
        if self.resource_version is None:
            self._relist()
        self.stats.watches += 1
        self._held_open = None
        try:
            for event in self.watch_fn(str(self.resource_version), self._opened):
                self._apply(event)
                if self._stop.is_set():
                    return
        except Exception:
            opened = self._open_since
            self._held_open = None if opened is None else self.clock() - opened
            raise
        finally:
            self._open_since = None
        self._healthy()  # a stream the server closed on its timeout is a healthy one

    def _opened(self) -> None:
        """The server answered the watch: from `settle` seconds on, the cache counts as followed."""
        self.stats.opened += 1
        self._open_since = self.clock()

    def _relist(self) -> None:
        items, version = self.list_fn()
        self.stats.lists += 1
        with self._lock:
            self._store = {object_key(o): o for o in items}
            self.resource_version = version
        self._healthy()
        self._synced.set()

    def _apply(self, event: Object) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            message = f"{self.name}: watch error {code} {obj.get('reason', '')}: {obj.get('message', '')}"
            raise Gone(message) if code == Gone.status else KubeError(message, code)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                self._store[object_key(obj)] = obj
            elif kind == "DELETED":
                self._store.pop(object_key(obj), None)
            if version:
                self.resource_version = str(version)
        self.stats.events += 1
        self._healthy()

    def _healthy(self) -> None:
        self._failing_since = None
        self.backoff.reset()

    # the thread ---------------------------------------------------------------------------------
    def start(self) -> "Informer":
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_cycle()
            except Gone as exc:
                log.info("%s: %s; listing again", self.name, exc)
                self.stats.relists_after_gone += 1
                self.resource_version = None  # the next cycle lists, no wait: the server is answering
            except Exception as exc:  # noqa: BLE001 - any failure: back off, resume from the last version
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        now = self.clock()
        if self._held_open is not None and self._held_open >= self.settle:
            self._failing_since = now  # it had recovered: this is a new failure, counted from now
            self.backoff.reset()
        elif self._failing_since is None:
            self._failing_since = now
        self._last_error = f"{type(exc).__name__}: {exc}"
        self.stats.resumes_after_error += 1
        wait = self.backoff.next()
        log.warning("%s: watch failed (%s); resuming from resourceVersion %s in %.1f s",
                    self.name, self._last_error, self.resource_version, wait)
        self._stop.wait(wait)
