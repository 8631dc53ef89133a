"""QoS resolution for the reconcile loop: each pod's annotations read into a `QosSpec`, with each
malformed annotation logged once per pod rather than on every pass."""
from __future__ import annotations

import logging

from node_enforcer.model.pod import Pod
from node_enforcer.model.qos import QosSpec, parse_qos

log = logging.getLogger(__name__)


class QosResolver:
    """Resolves pods' QoS and logs each malformed annotation once per pod (not every reconcile)."""

    def __init__(self) -> None:
        self._logged: set[tuple[str, str]] = set()

    def resolve(self, pod: Pod) -> QosSpec:
        spec = parse_qos(pod.annotations)
        if spec.problem and (pod.uid, spec.problem) not in self._logged:
            self._logged.add((pod.uid, spec.problem))
            log.warning("pod %s: malformed QoS annotation, treated as shared_cores: %s", pod.key, spec.problem,
                        extra={"pod": pod.key, "uid": pod.uid})
        return spec
