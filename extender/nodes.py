"""Where the extender's nodes and their topology come from.

With `nodeCacheCapable: false` the scheduler sends whole Node objects; with `true` only their
names, and the extender looks them up in its own cache: a `contracts.informer.Informer` over
Nodes (list once, then watch). NUMA topology is never in the request: it is the node agents'
Katalyst CustomNodeResource (`status.topologyZone`), read through a second informer. A cache that
is not filled yet, or whose watch has been failing too long, raises `StaleCache`: the filter then
fails closed for the nodes it concerns, with that reason.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from contracts.informer import Informer, StaleCache

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class NodeSource(Protocol):
    """Nodes by name (nodeCacheCapable) and CustomNodeResources by node name; both raise `StaleCache`."""

    def nodes(self) -> Mapping[str, Obj]: ...

    def cnrs(self) -> Mapping[str, Obj]: ...


@dataclass
class StaticSource:
    """Fixed objects (tests, benchmarks, `--cluster-state`); `None` for a kind means "not available"."""

    node_objects: list[Obj] | None = None
    cnr_objects: list[Obj] | None = None

    def nodes(self) -> Mapping[str, Obj]:
        if self.node_objects is None:
            raise StaleCache("Node: no node cache (the extender was started without one)")
        return {name_of(n): n for n in self.node_objects}

    def cnrs(self) -> Mapping[str, Obj]:
        if self.cnr_objects is None:
            raise StaleCache("CustomNodeResource: no topology cache (the extender was started without one)")
        return {name_of(c): c for c in self.cnr_objects}


@dataclass
class _Indexed:
    """An informer's items by name, rebuilt only when the informer has seen new events (a scheduler
    call must not pay for indexing 5,000 nodes each time)."""

    informer: Informer
    _seen: tuple[int, int] = (-1, -1)
    _index: dict[str, Obj] = field(default_factory=dict)

    def get(self) -> Mapping[str, Obj]:
        # the mark is read before the items: an event landing in between makes the next call rebuild
        mark = (self.informer.stats.lists, self.informer.stats.events)
        items = self.informer.items()  # raises StaleCache: a stale index is never served
        if mark != self._seen:
            self._index = {name_of(o): o for o in items}
            self._seen = mark
        return self._index


class WatchedSource:
    """Node and CustomNodeResource informers over the `Kube` wrapper (`Kube.watched(kind)`)."""

    def __init__(self, kube: Any, *, stale_after: float = 120.0, watch_nodes: bool = True,
                 watch_topology: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.informers: dict[str, Informer] = {}
        for kind, wanted in (("Node", watch_nodes), ("CustomNodeResource", watch_topology)):
            if wanted:
                list_fn, watch_fn = kube.watched(kind)
                self.informers[kind] = Informer(kind, list_fn, watch_fn, stale_after=stale_after, clock=clock)
        self._nodes = _Indexed(self.informers["Node"]) if watch_nodes else None
        self._cnrs = _Indexed(self.informers["CustomNodeResource"]) if watch_topology else None

    def start(self) -> "WatchedSource":
        for inf in self.informers.values():
            inf.start()
        return self

    def stop(self) -> None:
        for inf in self.informers.values():
            inf.stop()

    def wait_synced(self, timeout: float) -> bool:
        return all(inf.wait_synced(timeout) for inf in self.informers.values())

    def ready(self) -> bool:
        """Ready while the Node cache is usable: listed, and its watch not failing for longer than
        `stale_after` (a replica that would refuse every reclaimed pod leaves the Service until its
        watch is back). Topology is not waited for: without the Katalyst CRD its list keeps failing,
        and only NUMA-bound pods need it (they are refused, with that reason, meanwhile)."""
        node = self.informers.get("Node")
        why = None if node is None else node.unusable()
        if why:
            log.warning("not ready: %s", why)
        return why is None

    def nodes(self) -> Mapping[str, Obj]:
        if self._nodes is None:
            raise StaleCache("Node: not watched (started with --no-node-cache): use nodeCacheCapable: false")
        return self._nodes.get()

    def cnrs(self) -> Mapping[str, Obj]:
        if self._cnrs is None:
            raise StaleCache("CustomNodeResource: not watched (started with --no-topology)")
        return self._cnrs.get()
