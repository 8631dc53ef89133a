"""What a run decides, with the reason for each number (DESIGN.md, "Recommendation").

Units are exact integers: millicpu for cpu, bytes for memory; replica counts are integers.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from contracts.quantity import readable_units


@dataclass
class Reason:
    """The forecast, quantile, margin and guardrails that produced one number."""

    model: str  # forecaster that made the forecast (and registry version when there is one)
    quantile: float
    margin: float
    window: str  # the forecast window whose maximum was taken
    raw: int  # the value before floors, policy and guardrails, in units
    steps: list[str] = field(default_factory=list)  # each floor/cap/guardrail that moved the number

    def summary(self, unit: Callable[[int], str] = str) -> str:
        """The reason as one line; `unit` writes the raw value (a VPA's: with its unit, `1.67 GiB`)."""
        text = f"q{self.quantile:g} of {self.model} over {self.window} +{self.margin:.0%} = {unit(self.raw)}"
        return text + (f"; {'; '.join(self.steps)}" if self.steps else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ResourceRecommendation:
    resource: str  # cpu or memory
    target: int
    lower: int
    upper: int
    uncapped: int  # target before the VPA's minAllowed/maxAllowed
    reason: Reason
    floor: int = 0  # the lowest target allowed (stock minimum, memory peak of the last day)
    regime: str = "restart"  # how a change reaches the pod: in-place, restart, at-creation or off (logic/regime.py)
    after_oom: bool = False  # an OOM kill inside the memory window raised it (may pass the restart limit)
    budget: float = 0.05  # the violation budget in force (share of 5-minute steps over the request)
    # achieved: share of the last 24 h's steps with usage per replica over the request in force (None: unknown)
    violation_rate: float | None = None

    def reason_text(self) -> str:
        """The reason as one line, its raw value in a reader's unit (cores or m, GiB or MiB)."""
        return self.reason.summary(lambda raw: readable_units(self.resource, raw))


@dataclass
class ContainerRecommendation:
    container: str
    resources: dict[str, ResourceRecommendation]


@dataclass
class VpaDecision:
    namespace: str
    name: str  # the VPA object
    target_kind: str
    target_name: str
    replicas: int
    containers: list[ContainerRecommendation]

    @property
    def key(self) -> str:
        return f"VerticalPodAutoscaler/{self.namespace}/{self.name}"

    def reasons(self) -> dict[str, dict[str, str]]:
        return {c.container: {r: rec.reason_text() for r, rec in c.resources.items()} for c in self.containers}


@dataclass
class HpaDecision:
    namespace: str
    name: str  # the HPA object
    min_replicas: int  # to set now
    user_min_replicas: int  # the floor the user configured (kept in an annotation)
    max_replicas: int
    predicted: int  # replicas needed at now + lead (before stabilisation and bounds)
    timeline: list[int]  # replicas(t) for t = timeline_start + i x step (the next 4 hours)
    reason: Reason
    timeline_start: str = ""  # ISO-8601 UTC
    timeline_step_seconds: int = 300

    @property
    def key(self) -> str:
        return f"HorizontalPodAutoscaler/{self.namespace}/{self.name}"
