"""QoS resolution for the reconcile loop: each pod's annotations read into a `QosSpec` by the one
parser (`contracts.qos.parse_qos`), with each malformed annotation logged once per pod rather than
on every pass."""
from __future__ import annotations

import logging

from contracts.qos import QosReporter, QosSpec, parse_qos
from node_enforcer.model.pod import Pod

log = logging.getLogger(__name__)


class QosResolver:
    """Resolves pods' QoS and logs each malformed annotation once per pod (not every reconcile)."""

    def __init__(self) -> None:
        self._reporter = QosReporter(logger=log)

    def resolve(self, pod: Pod) -> QosSpec:
        spec = parse_qos(pod.annotations)
        self._reporter.report(pod.key, spec)
        return spec
