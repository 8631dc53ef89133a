"""From decisions to the changes a run writes, and writing them.

Every feature proposes the changes its decisions make (`Feature.changes`, in the order of their
`write_rank`); the change policy (`change_policy.py`) decides which of them may be written. A change
with a companion (a VPA's CPU request and the HPA target utilisation that keeps its scale point) is
written with it, both or neither: the first, then the companion; when the companion fails, the first
is put back as it was read and both are reported failed.
"""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Iterable

from autoscaler.model.cluster import ClusterState
from autoscaler.output.objects import Change
from autoscaler.output.sinks import DRY_RUN, FAILED, WRITTEN, Sink, WriteResult
from autoscaler.routines.context import RunReport

if TYPE_CHECKING:
    from autoscaler.features.base import Feature

log = logging.getLogger(__name__)


def candidate_changes(features: Iterable["Feature"], rep: RunReport, state: ClusterState, now_iso: str,
                      before: dict[str, Any]) -> list[Change]:
    """Every change the run's decisions make to the objects as read; `before` gets change -> the
    live object it was made against."""
    changes: list[Change] = []
    for f in sorted(features, key=lambda f: f.write_rank):
        changes += f.changes(rep, state, now_iso, before)
    return changes


def write_pair(sink: Sink, change: Change) -> WriteResult:
    """`change`, then its companion; a failed companion undoes `change` (its `undo`) and fails both."""
    first = sink.write(change)
    companion = change.companion
    if companion is None or first.outcome not in (WRITTEN, DRY_RUN):
        return first
    second = sink.write(companion)
    if second.outcome in (WRITTEN, DRY_RUN):
        return WriteResult(change.key, first.outcome, "; ".join(
            x for x in (first.detail, f"with {companion.key} ({second.outcome})") if x))
    undone = sink.write(change.undo) if change.undo is not None else None
    back = f"{change.key} put back as read ({undone.outcome})" if undone is not None else f"{change.key} not undone"
    if undone is None or undone.outcome not in (WRITTEN, DRY_RUN):
        log.error("%s: written, its companion %s failed and the undo failed too: %s", change.key, companion.key,
                  undone.detail if undone else "no undo")
    log.error("%s and %s both failed: %s %s; %s", change.key, companion.key, second.outcome, second.detail, back)
    return WriteResult(change.key, FAILED, f"both failed: {companion.key} {second.outcome} ({second.detail}); {back}")


def write_all(sink: Sink, changes: list[Change], workers: int) -> list[WriteResult]:
    """Each change through the sink, a few at once when `workers` > 1; a sink that raises fails
    that one change, never the run."""
    def write(c: Change) -> WriteResult:
        try:
            return write_pair(sink, c)
        except Exception as exc:  # noqa: BLE001 - sinks should not raise; one object never stops the run
            return WriteResult(c.key, "failed", f"{type(exc).__name__}: {exc}")

    if workers > 1 and len(changes) > 1:
        # writes are independent and I/O-bound (API round trips, files): a few in flight at once
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tidewise-write") as pool:
            return list(pool.map(write, changes))
    return [write(c) for c in changes]
