"""The small Kubernetes exception tree both API wrappers map their client's errors onto.

`autoscaler.kube.Kube` (serve) and `node_enforcer.kube.KubeApi` (the node agent) each wrap the
official client; callers catch these classes, never the client's `ApiException`, so a test can
raise them from a fake without the client installed. `status` is the HTTP status (0 when the server
was not reached).
"""
from __future__ import annotations

from contracts.errors import TidewiseError


class KubeError(TidewiseError):
    """An API call failed; `status` is the HTTP status (0 when the server was not reached)."""

    status = 0

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class NotFound(KubeError):
    """404: the object is gone (deleted between list and write) or the CRD is not installed."""

    status = 404


class Conflict(KubeError):
    """409: the resourceVersion we wrote against is stale; read again and retry."""

    status = 409


class TooManyRequests(KubeError):
    """429: API priority and fairness pushed back, or a PodDisruptionBudget refused an eviction;
    `retry_after` seconds as the server asked (None when it did not say)."""

    status = 429

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, status)
        self.retry_after = retry_after


class Forbidden(KubeError):
    """403: RBAC does not allow this verb on this resource (see deploy/rbac.yaml)."""

    status = 403


_BY_STATUS: dict[int, type[KubeError]] = {c.status: c for c in (NotFound, Conflict, TooManyRequests, Forbidden)}


def error_for_status(status: int, message: str, retry_after: float | None = None) -> KubeError:
    """The class for an HTTP status, `KubeError` for any other; `retry_after` is kept for 429."""
    if status == TooManyRequests.status:
        return TooManyRequests(message, status, retry_after)
    return _BY_STATUS.get(status, KubeError)(message, status)
