"""The extender's two verbs over parsed requests, the node lookup, and the memory of its reasons.

`Extender.filter(args)` and `Extender.prioritize(args)` answer one scheduler call each; every node
gets a reason, logged (one INFO line per call with the counts, a DEBUG line per node) and kept for
the last `explain_pods` pods so that `GET /explain?pod=NAMESPACE/NAME` shows why each node was
filtered or scored as it was. What is kept is bounded by bytes too (`Limits.explain_bytes`, the
oldest pods forgotten first) and per call by nodes (`Limits.explain_nodes`, refusals first; the
entry says how many were left out). Nothing is written anywhere: the extender only answers.
"""
from __future__ import annotations

import collections
import datetime as dt
import logging
import threading
from typing import Any, Callable, Mapping

from extender.annotations import AnnotationCache
from extender.filter import filter_node
from extender.limits import Limits
from extender.metrics import ExtenderMetrics
from extender.nodes import NodeSource, StaticSource
from extender.payload import ExtenderArgs, filter_result, priority_list
from extender.pod import PodNeeds, pod_needs
from extender.prioritize import NEUTRAL, score_node
from extender.sizes import deep_size
from contracts.informer import StaleCache

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class Extender:
    """Filter and prioritize for one scheduler; `source` gives cached Nodes and CNRs."""

    def __init__(self, source: NodeSource | None = None, *, clock: Callable[[], dt.datetime] = _utcnow,
                 explain_pods: int = 256, metrics: ExtenderMetrics | None = None, limits: Limits | None = None) -> None:
        self.source: NodeSource = source or StaticSource()
        self.metrics = metrics or ExtenderMetrics()
        self.clock = clock
        self.limits = limits or Limits()
        # plans and forecasts parsed once per text, not per call
        self.annotations = AnnotationCache(max_bytes=self.limits.annotation_bytes)
        self.explain_pods = explain_pods  # 256 pods of 500 nodes' reasons: ~25 MiB
        self._explained: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._sizes: dict[str, int] = {}  # pod -> deep size of its entry
        self.explained_bytes = 0
        self._lock = threading.Lock()

    # nodes --------------------------------------------------------------------------------------
    def _nodes(self, args: ExtenderArgs) -> tuple[dict[str, Obj | None], str | None]:
        """name -> Node object (None when unknown) for the candidates; the cache error, if any."""
        if args.nodes is not None:
            return {str(n["metadata"].get("name") or ""): n for n in args.nodes}, None
        try:
            cache = self.source.nodes()
        except StaleCache as exc:
            return {name: None for name in args.names}, str(exc)
        return {name: cache.get(name) for name in args.names}, None

    def _cnrs(self) -> tuple[Mapping[str, Obj], str | None]:
        try:
            return self.source.cnrs(), None
        except StaleCache as exc:
            return {}, str(exc)

    # verbs --------------------------------------------------------------------------------------
    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        """ExtenderFilterResult; `ValueError` for a pod whose requests do not parse (the caller answers 400)."""
        pod = pod_needs(args.pod)
        now = self.clock()
        passed: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        reasons: dict[str, dict[str, Any]] = {}
        if not (pod.is_reclaimed or pod.reclaimed_millicpu or pod.reclaimed_memory_bytes or pod.needs_whole_numa):
            # nothing here concerns the pod: pass every candidate without reading a node
            passed = args.names
            reasons = {n: {"ok": True, "reason": f"{pod.level} pod: no reclaimed or NUMA need"} for n in passed}
        else:
            nodes, node_error = self._nodes(args)
            cnrs, cnr_error = self._cnrs() if pod.needs_whole_numa else ({}, None)
            for name, node in nodes.items():
                if node is None:
                    why = f"node cache unavailable ({node_error})" if node_error else \
                        "not in the extender's node cache yet"
                    unresolvable[name] = why
                    reasons[name] = {"ok": False, "reason": why}
                    continue
                v = filter_node(pod, node, cnrs.get(name), cnr_error, now, self.annotations)
                reasons[name] = {"ok": v.ok, "reason": v.reason}
                if v.ok:
                    passed.append(name)
                else:
                    (failed if v.resolvable else unresolvable)[name] = v.reason
        self._remember(pod, "filter", now, reasons)
        for result, count in (("passed", len(passed)), ("failed", len(failed)), ("unresolvable", len(unresolvable))):
            self.metrics.judged("filter", result, count)
        log.info("filter %s (%s): %d of %d nodes pass, %d failed, %d unresolvable%s", pod.name, pod.level,
                 len(passed), len(args.names), len(failed), len(unresolvable), _sample({**failed, **unresolvable}))
        return filter_result(args, passed, failed, unresolvable)

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        """HostPriorityList; `ValueError` for a pod whose requests do not parse."""
        pod = pod_needs(args.pod)
        now = self.clock()
        nodes, node_error = self._nodes(args)
        scores: dict[str, int] = {}
        reasons: dict[str, dict[str, Any]] = {}
        for name, node in nodes.items():
            if node is None:
                s, why = NEUTRAL, f"neutral: node cache unavailable ({node_error})" if node_error else \
                    "neutral: not in the extender's node cache yet"
            else:
                score = score_node(pod, node, now, self.annotations)
                s, why = score.score, score.reason
            scores[name] = s
            reasons[name] = {"score": s, "reason": why}
        self._remember(pod, "prioritize", now, reasons)
        neutral = sum(1 for r in reasons.values() if str(r["reason"]).startswith("neutral"))
        zero = sum(1 for s in scores.values() if s == 0)
        for result, count in (("neutral", neutral), ("zero", zero), ("scored", len(scores) - neutral - zero)):
            self.metrics.judged("prioritize", result, count)
        best = sorted(scores.items(), key=lambda kv: -kv[1])[:3]
        log.info("prioritize %s (%s, lifetime %s): best %s", pod.name, pod.level, pod.lifetime_note,
                 ", ".join(f"{n}={s}" for n, s in best) or "no nodes")
        return priority_list(scores)

    # reasons ------------------------------------------------------------------------------------
    def _remember(self, pod: PodNeeds, verb: str, now: dt.datetime, reasons: dict[str, dict[str, Any]]) -> None:
        if log.isEnabledFor(logging.DEBUG):
            for name, r in reasons.items():
                log.debug("%s %s on %s: %s", verb, pod.name, name, r["reason"])
        kept: dict[str, Any] = {"at": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "nodes": reasons}
        cap = self.limits.explain_nodes
        if len(reasons) > cap:  # refusals and low scores first: they are what /explain is asked about
            worst = sorted(reasons.items(), key=lambda kv: (kv[1].get("ok", True), kv[1].get("score", 0)))
            kept = {**kept, "nodes": dict(worst[:cap]), "nodes_left_out": len(reasons) - cap}
        with self._lock:
            entry = self._explained.pop(pod.name, None) or {"pod": pod.name, "level": pod.level,
                                                             "lifetime": pod.lifetime_note}
            self.explained_bytes -= self._sizes.pop(pod.name, 0)
            entry[verb] = kept
            size = deep_size(entry)
            if size > self.limits.explain_bytes:
                return  # one call larger than the whole memory (a tiny --explain budget): not kept
            self._explained[pod.name], self._sizes[pod.name] = entry, size
            self.explained_bytes += size
            while len(self._explained) > self.explain_pods or self.explained_bytes > self.limits.explain_bytes:
                gone, _ = self._explained.popitem(last=False)
                self.explained_bytes -= self._sizes.pop(gone)

    def explain(self, pod: str | None = None) -> dict[str, Any]:
        """The reasons of the last calls for `pod` (NAMESPACE/NAME), or the list of pods remembered."""
        with self._lock:
            if pod is None:
                return {"pods": list(self._explained)}
            entry = self._explained.get(pod)
        if entry is None:
            raise KeyError(f"no filter or prioritize call for pod {pod} among the last {self.explain_pods}")
        return entry


def _sample(reasons: Mapping[str, str], n: int = 3) -> str:
    """A few refusals for the log line (the rest are in /explain and at DEBUG)."""
    if not reasons:
        return ""
    items = list(reasons.items())[:n]
    return "; e.g. " + "; ".join(f"{k}: {v}" for k, v in items)
