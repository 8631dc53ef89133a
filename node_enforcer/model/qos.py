"""Katalyst QoS levels and enhancements from pod annotations, as the node agent reads them.

The one parser is `contracts.qos.parse_qos` (shared with serve, the extender, tide and rebalance,
so that every component treats a pod alike); this module re-exports it for the agent's policy and
names what resolves a pod's spec (`QosSource`). A malformed annotation never crashes the agent and
fails closed: an unknown level reads as `shared_cores`, a malformed enhancement keeps the declared
level without enhancements (`collect.qos.QosResolver` logs it once per pod).
"""
from __future__ import annotations

from typing import Protocol

from contracts.qos import OOM_PRIORITY_RANGE, QosSpec, json_object_annotation, parse_qos
from node_enforcer.model.pod import Pod

__all__ = ["OOM_PRIORITY_RANGE", "QosSource", "QosSpec", "json_object_annotation", "parse_qos"]


class QosSource(Protocol):
    """What reads a pod's QoS spec: `parse_qos` of its annotations, or `collect.qos.QosResolver`,
    which also logs each malformed annotation once."""

    def resolve(self, pod: Pod) -> QosSpec: ...
