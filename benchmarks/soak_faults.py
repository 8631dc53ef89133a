"""The soak's faults (benchmarks/soak.py): a seeded schedule, and the API fake that applies it.

`FaultSchedule.make(minutes, seed)` places, between a quiet first stretch and a quiet last one
(so that the last decisions can be checked against the fake once everything recovered):
Prometheus outages (killed, restarted later), and API fault windows — 409 Conflict, 429 Too Many
Requests (Retry-After 1 s), 500/503, slow answers — plus single cut watches and 410 Gone
(compaction, then a cut). `FaultyApiServer` is `testsupport.kube_fake.FakeApiServer`
with a delay before each answer, a compact log of every write's answer (for the duplicate count)
and a trim of the watch events its one consumer already has (a day of writes would otherwise grow
the fake, and its per-event scan, without bound).
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from testsupport.kube_fake import FakeApiServer
from testsupport.kube_objects import Request

# what a fault window hits: (method, path regex)
# (the kinds written at every 5-minute step: a window of one step always meets some of these)
# (VPA targets move by less than the dead-band most steps: they are reached through "/")
WRITE_TARGETS = [("PATCH", r"^/api/v1/nodes/"), ("PATCH", r"/")]  # a node: its annotation, then its status
READ_TARGETS = [("GET", r"/leases/"), ("PUT", r"/leases/")]  # every run renews the Lease
WINDOW_KINDS = ("409", "429", "5xx", "slow")


@dataclass
class Fault:
    kind: str  # prometheus | 409 | 429 | 5xx | slow | watch_cut | watch_410
    start: int  # simulated minute it begins
    end: int  # first minute it no longer applies (start + 1 for single events)
    method: str = ""
    pattern: str = ""
    status: int = 0
    per_minute: int = 0  # requests failed per simulated minute in the window
    delay: float = 0.0  # seconds added before each answer (slow)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in ("", 0, 0.0)} | {"start": self.start}


@dataclass
class FaultSchedule:
    faults: list[Fault]
    quiet_head: int
    quiet_tail: int

    @classmethod
    def make(cls, minutes: int, seed: int) -> "FaultSchedule":
        """Counts scale with the run: a day gets 6 Prometheus outages, 8 windows of each API fault,
        12 cut watches and 8 compactions; a 30-minute run one of each."""
        rng = random.Random(seed)
        head = max(3, min(60, minutes // 24))
        tail = max(10, min(60, minutes // 24))
        lo, hi = head, minutes - tail
        if hi - lo < 6:
            raise ValueError(f"--minutes {minutes} leaves no room for faults: use at least {head + tail + 6}")
        span = hi - lo

        blocked: list[tuple[int, int]] = []  # Prometheus outages and serve's back-off after them

        def window(longest: int, shortest: int = 2) -> tuple[int, int]:
            length = rng.randint(shortest, max(shortest, min(longest, span // 3)))
            for _ in range(30):  # an API fault while serve is frozen anyway would hit nothing
                start = rng.randint(lo, hi - length)
                if not any(start < b and a < start + length for a, b in blocked):
                    break
            return start, start + length

        faults: list[Fault] = []
        for _ in range(max(1, minutes // 240)):
            faults.append(Fault("prometheus", *window(15)))
            blocked.append((faults[-1].start - 1, faults[-1].end + 6))
        for kind in WINDOW_KINDS:
            for _ in range(max(1, minutes // 180)):
                s, e = window(10, 5)  # at least one 5-minute step: new data, new decisions, writes
                if kind == "slow":
                    faults.append(Fault(kind, s, e, delay=round(rng.uniform(0.05, 0.3), 3)))
                    continue
                method, pattern = rng.choice(WRITE_TARGETS if kind in ("409", "429") else WRITE_TARGETS + READ_TARGETS)
                status = {"409": 409, "429": 429}.get(kind) or rng.choice([500, 503])
                faults.append(Fault(kind, s, e, method, pattern, status, rng.randint(3, 40)))
        for kind, n in (("watch_cut", max(1, minutes // 120)), ("watch_410", max(1, minutes // 180))):
            for _ in range(n):
                m = rng.randint(lo, hi - 1)
                faults.append(Fault(kind, m, m + 1))
        faults.sort(key=lambda f: (f.start, f.kind))
        return cls(faults, head, tail)

    def active(self, minute: int, kind: str) -> list[Fault]:
        return [f for f in self.faults if f.kind == kind and f.start <= minute < f.end]

    def starting(self, first: int, last: int) -> list[Fault]:
        """Faults that begin in the minutes (first, last]."""
        return [f for f in self.faults if first < f.start <= last]

    def windows(self) -> list[tuple[int, int, str]]:
        return [(f.start, f.end, f.kind) for f in self.faults]


def body_digest(body: Any) -> str:
    """A write's body without its timestamps (as autoscaler/routines/drift.py's fingerprint)."""
    def strip(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k not in ("lastTransitionTime", "lastRecommendationTime",
                                                                   "resourceVersion")}
        if isinstance(o, list):
            return [strip(x) for x in o]
        return o
    return hashlib.sha1(json.dumps(strip(body), sort_keys=True, default=str).encode()).hexdigest()[:16]


def object_key(path: str) -> str:
    """The object a request path writes (its status subresource is the same object)."""
    return re.sub(r"/status$", "", path)


@dataclass
class Answer:
    seq: int
    method: str
    path: str
    status: int
    digest: str


class FaultyApiServer(FakeApiServer):
    """The API fake with the soak's faults applied minute by minute (`apply_minute`)."""

    def __init__(self, objects: list[dict[str, Any]]):
        super().__init__(objects)
        self.delay = 0.0
        self.answers: list[Answer] = []  # every write's answer, in order
        self.injected: dict[str, int] = {}  # fault kind -> requests (or watches) it hit
        self._armed: list[list[Any]] = []  # fault entries of `fail()` armed for this minute
        self._seq = 0
        self._minute = -1
        self._count_lock = threading.Lock()

    def _handle(self, req: Request) -> tuple[int, Any, dict[str, str]]:
        before = [f[3] for f in self._armed]
        code, out, headers = super()._handle(req)
        for f, was in zip(self._armed, before):
            if f[3] < was:
                kind = {409: "409", 429: "429"}.get(f[2], "5xx")
                self.injected[kind] = self.injected.get(kind, 0) + 1
        self.requests.pop()  # the compact log below is kept instead (a day of request bodies is large)
        if req.method in ("PATCH", "PUT", "POST") and "/leases/" not in req.path:
            self._seq += 1
            self.answers.append(Answer(self._seq, req.method, req.path, code, body_digest(req.body)))
        return code, out, headers

    def _handler(self):
        base = super()._handler()
        fake = self

        class Slow(base):  # type: ignore[misc, valid-type]
            def _do(self, method: str) -> None:
                if fake.delay:
                    with fake._count_lock:
                        fake.injected["slow"] = fake.injected.get("slow", 0) + 1
                    time.sleep(fake.delay)
                super()._do(method)

        return Slow

    def apply_minute(self, schedule: FaultSchedule, minute: int, previous: int) -> list[str]:
        """Arm the API faults of `minute` (the last run was at `previous`); returns what began. A
        minute is armed once, however many ticks it has (a replica standing by tries every 5 s)."""
        if minute == self._minute:
            return []
        self._minute = minute
        began = []
        with self.lock:
            for entry in self._armed:
                entry[3] = 0  # the last minute's window entries end with it
            self.faults = [entry for entry in self.faults if entry[3] > 0]
            self._armed = []
            for w in [x for k in ("409", "429", "5xx") for x in schedule.active(minute, k)]:
                headers = {"Retry-After": "1"} if w.status == 429 else None
                self.fail(w.method, w.pattern, w.status, w.per_minute, headers)
                self._armed.append(self.faults[-1])
        slow = schedule.active(minute, "slow")
        self.delay = max((w.delay for w in slow), default=0.0)
        for f in schedule.starting(previous, minute):
            began.append(f.kind)
            if f.kind == "watch_410":
                self.watch.compact()
                self.watch.drop()
                self.injected["watch_410"] = self.injected.get("watch_410", 0) + 1
            elif f.kind == "watch_cut":
                self.watch.drop()
                self.injected["watch_cut"] = self.injected.get("watch_cut", 0) + 1
        return began

    def kind_versions(self) -> dict[str, int]:
        """kind -> resourceVersion of its newest event (what a synced informer has reached)."""
        out: dict[str, int] = {}
        with self.watch.cond:
            for rv, _, obj in self.watch.events:
                out[obj.get("kind", "")] = rv
        return out

    def trim_delivered(self, reached: dict[str, int]) -> None:
        """Drop the events each kind's informer has already applied (it is their one consumer)."""
        with self.watch.cond:
            self.watch.events[:] = [e for e in self.watch.events if e[0] > reached.get(e[2].get("kind", ""), 0)]


def duplicates(answers: list[Answer]) -> dict[str, Any]:
    """Per object: successful writes, distinct bodies written, and duplicates — a successful write
    whose body equals the previous successful one on that path while no write to the object failed
    in between (a retry after a half-done or refused write is not a duplicate)."""
    last_ok: dict[str, str] = {}
    failed_since: set[str] = set()
    ok: dict[str, int] = {}
    changes: dict[str, int] = {}
    dups: list[dict[str, Any]] = []
    for a in answers:
        obj = object_key(a.path)
        if a.status >= 300:
            failed_since.add(obj)
            continue
        ok[obj] = ok.get(obj, 0) + 1
        if last_ok.get(a.path) == a.digest and obj not in failed_since:
            dups.append({"path": a.path, "seq": a.seq})
        elif last_ok.get(a.path) != a.digest:
            changes[obj] = changes.get(obj, 0) + 1
        last_ok[a.path] = a.digest
        failed_since.discard(obj)
    writes, distinct = sum(ok.values()), sum(changes.values())
    return {"successful_writes": writes, "distinct_bodies": distinct, "objects_written": len(ok),
            "duplicates": len(dups), "duplicate_examples": dups[:20],
            "writes_per_decision_change": round(writes / distinct, 4) if distinct else None,
            "failed_answers": sum(a.status >= 300 for a in answers)}


@dataclass
class Timeline:
    """Per run, what the driver saw (plotted and summarised by benchmarks/soak.py)."""

    minute: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    seconds: list[float | None] = field(default_factory=list)  # None: not leading (no run)
    outcome: list[str] = field(default_factory=list)
