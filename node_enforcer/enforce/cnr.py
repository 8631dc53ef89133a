"""Publish the topology report (`policy.topology_report`) on this node's Katalyst CustomNodeResource.

Written only when it changes: the status last written (or read back at start) is kept, and a pass
whose status equals it makes no API call at all. A node without a CNR gets one (empty spec) first.
An API failure is reported and retried on the next pass with a fresh read (never fatal). Dry-run
reads but writes nothing.
"""
from __future__ import annotations

import logging
from typing import Any, Protocol

from contracts.kube_errors import KubeError

log = logging.getLogger(__name__)


class CnrApi(Protocol):
    def get_cnr(self, name: str) -> dict[str, Any] | None: ...

    def create_cnr(self, name: str) -> None: ...

    def patch_cnr_status(self, name: str, status: dict[str, Any]) -> None: ...


class CnrPublisher:
    def __init__(self, api: CnrApi, node: str, dry_run: bool = False) -> None:
        self.api, self.node, self.dry_run = api, node, dry_run
        self.last: dict[str, Any] | None = None  # what the API holds, as far as we know; None = read it
        self.would: dict[str, Any] | None = None  # dry-run: the status already found to differ (no re-read)

    def publish(self, status: dict[str, Any]) -> str:
        """unchanged | created | updated | would update (dry-run) | failed: <reason>."""
        if status == self.last:
            return "unchanged"
        if self.dry_run and status == self.would:
            return "would update"
        try:
            if self.last is None:
                obj = self.api.get_cnr(self.node)
                current = (obj or {}).get("status") or {}
                if obj is not None and _same(current, status):
                    self.last = status
                    return "unchanged"
            else:
                obj = {}
            if self.dry_run:
                self.would = status
                return "would update"
            created = obj is None
            if created:
                self.api.create_cnr(self.node)
            self.api.patch_cnr_status(self.node, status)
        except KubeError as exc:
            self.last = None  # read again next pass
            log.warning("topology report not published: %s", exc)
            return f"failed: {exc}"
        self.last = status
        log.info("topology report %s on customnoderesource %s", "created" if created else "updated", self.node)
        return "created" if created else "updated"


def _same(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """The server may hold more status fields (Katalyst's own agent writes resources): compare ours."""
    return all(current.get(k) == v for k, v in wanted.items())
