"""The extender's `/metrics`: calls and their latency per verb and HTTP code, and what became of
the nodes it judged (filter: passed, failed, unresolvable; prioritize: scored, zero, neutral).

Everything lives in the `CollectorRegistry` handed in (a fresh one per extender and per test;
nothing is created at import time). A rising `neutral` count means nodes without a fresh forecast
(is serve running?); a rising `unresolvable` count, nodes without a valid plan or topology.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

# 5 ms .. 1 s: the 50 ms target sits in the middle; kube-scheduler's own timeout is 5 s here
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class ExtenderMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.calls = Counter("tidewise_extender_calls", "Scheduler calls answered, by verb and HTTP code",
                             ["verb", "code"], registry=r)
        self.seconds = Histogram("tidewise_extender_call_seconds", "Time to answer one scheduler call",
                                 ["verb"], buckets=BUCKETS, registry=r)
        self.nodes = Counter("tidewise_extender_nodes", "Nodes judged, by verb and what became of them",
                             ["verb", "result"], registry=r)

    def call(self, verb: str, code: int, seconds: float) -> None:
        self.calls.labels(verb, str(code)).inc()
        self.seconds.labels(verb).observe(seconds)

    def judged(self, verb: str, result: str, count: int) -> None:
        if count:
            self.nodes.labels(verb, result).inc(count)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
