"""A pod as the node agent sees it: identity, QoS class, priority, annotations and per-container
requests and limits (integer millicpu and bytes), whatever source it was read from."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class Container:
    name: str
    id: str | None  # runtime container id without the `containerd://` prefix; None until started
    cpu_request_millis: int = 0
    cpu_limit_millis: int | None = None
    memory_request_bytes: int = 0
    memory_limit_bytes: int | None = None


@dataclass(frozen=True)
class Pod:
    uid: str
    namespace: str
    name: str
    node_name: str | None
    k8s_qos: str  # Guaranteed | Burstable | BestEffort (the kubelet's cgroup parent follows it)
    priority: int
    annotations: Mapping[str, str] = field(default_factory=dict)
    containers: tuple[Container, ...] = ()
    phase: str = "Running"
    created: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def cpu_request_millis(self) -> int:
        return sum(c.cpu_request_millis for c in self.containers)

    @property
    def cpu_limit_millis(self) -> int | None:
        limits = [c.cpu_limit_millis for c in self.containers]
        return None if not limits or any(v is None for v in limits) else sum(v for v in limits if v)

    @property
    def memory_limit_bytes(self) -> int | None:
        limits = [c.memory_limit_bytes for c in self.containers]
        return None if not limits or any(v is None for v in limits) else sum(v for v in limits if v)
