"""Typed views of the cluster objects a decision reads (VPA, HPA, Node, Pod), and where each
workload's series are.

The snapshot keeps objects as plain API dicts (`model/cluster.py`); these views are the one place
that knows their field paths, so the decisions in `autoscaler/logic/` read names and numbers, not
dicts. Parsing is lazy: a malformed part fails only the decision that reads it (one bad object is
skipped, never the run).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import pandas as pd

from autoscaler.model.cluster import Obj, container_requests, meta
from contracts.annotations import (BUDGET_ANNOTATION, HPA_ANCHOR_ANNOTATION, HPA_USER_TARGET_ANNOTATION,
                                   USER_MIN_ANNOTATION as ANNOTATION_USER_MIN)
from contracts.qos import QOS_ANNOTATION, QosReporter, parse_qos, qos_level
from contracts.quantity import to_units
from predictor.history import History
from predictor.types import SeriesKey

WorkloadKey = tuple[str, str, str]  # (namespace, kind, name)
# serve raises an HPA's minReplicas; the floor the user set is kept in ANNOTATION_USER_MIN to return to


def _ref_key(namespace: str, ref: Any) -> WorkloadKey | None:
    return (namespace, ref.get("kind", ""), ref.get("name", "")) if isinstance(ref, dict) else None


@dataclass(frozen=True)
class ObjectView:
    """One API object (a dict), read through named properties."""

    obj: Obj

    @property
    def namespace(self) -> str:
        return str(meta(self.obj).get("namespace", "default"))

    @property
    def name(self) -> str:
        return str(meta(self.obj)["name"])

    @property
    def annotations(self) -> Mapping[str, str] | None:
        return meta(self.obj).get("annotations")

    @property
    def spec(self) -> Obj:
        """The object's spec ({} when it has none, or one that is not a mapping)."""
        return _part(self.obj, "spec")

    @property
    def status(self) -> Obj:
        """The object's status ({} when it has none, or one that is not a mapping)."""
        return _part(self.obj, "status")


def _part(obj: Obj, name: str) -> Obj:
    part = obj.get(name)
    return part if isinstance(part, dict) else {}


@dataclass(frozen=True)
class VpaView(ObjectView):
    """A VerticalPodAutoscaler: who serves it, what it targets, what its status publishes."""

    @property
    def key(self) -> str:
        return f"VerticalPodAutoscaler/{self.namespace}/{self.name}"

    def recommenders(self) -> list[Any]:
        """spec.recommenders[].name (empty: the stock recommender serves it)."""
        spec = self.obj.get("spec")
        recs = spec.get("recommenders") if isinstance(spec, dict) else None
        return [r.get("name") for r in recs if isinstance(r, dict)] if isinstance(recs, list) else []

    def target_ref(self) -> tuple[str | None, str | None]:
        """(kind, name) of spec.targetRef, None where missing."""
        ref = (self.obj.get("spec") or {}).get("targetRef") or {}
        return ref.get("kind"), ref.get("name")

    def workload_key(self) -> WorkloadKey | None:
        """The workload whose series the forecast step must cover (None: no usable targetRef)."""
        return _ref_key(self.namespace, (self.obj.get("spec") or {}).get("targetRef"))

    def update_mode(self) -> str:
        """spec.updatePolicy.updateMode as written ("Recreate", the CRD's default, when unset)."""
        mode = (self.spec.get("updatePolicy") or {}).get("updateMode")
        return str(mode) if mode else "Recreate"

    def budget_annotation(self) -> str | None:
        """The user's violation budget for this VPA, as written (`tidewise.io/violation-budget`)."""
        return (self.annotations or {}).get(BUDGET_ANNOTATION)

    def container_policies(self) -> list[Any]:
        """spec.resourcePolicy.containerPolicies ([] when there are none)."""
        return (self.spec.get("resourcePolicy") or {}).get("containerPolicies") or []

    def container_recommendations(self) -> object:
        """status.recommendation.containerRecommendations as written (None when there is none)."""
        rec = self.status.get("recommendation")
        return rec.get("containerRecommendations") if isinstance(rec, dict) else None

    def published(self) -> dict[tuple[str, str], int]:
        """(container, resource) -> target its status.recommendation shows, in units (unparsable
        quantities are left out: they are rewritten)."""
        out: dict[tuple[str, str], int] = {}
        recs = ((self.obj.get("status") or {}).get("recommendation") or {}).get("containerRecommendations") or []
        for r in recs:
            for res, q in (r.get("target") or {}).items():
                try:
                    out[(r.get("containerName"), res)] = to_units(res, q)
                except ValueError:
                    pass
        return out


class MalformedHpa(ValueError):
    """The HPA cannot be served (no maxReplicas, min > max, no scaleTargetRef, unusable metrics)."""


@dataclass(frozen=True)
class HpaView(ObjectView):
    """A HorizontalPodAutoscaler (autoscaling/v2)."""

    def user_min_annotation(self) -> str | None:
        """The user's own minReplicas, kept in an annotation once serve raised spec.minReplicas."""
        return (self.annotations or {}).get(ANNOTATION_USER_MIN)

    def workload_key(self) -> WorkloadKey | None:
        spec = self.obj.get("spec")
        return _ref_key(self.namespace, spec.get("scaleTargetRef") if isinstance(spec, dict) else None)

    def bounds(self) -> tuple[str, str, int, int]:
        """(target kind, target name, minReplicas, maxReplicas) of its spec, or MalformedHpa."""
        spec = self.obj.get("spec")
        if not isinstance(spec, dict):
            raise MalformedHpa("no spec")
        ref = spec.get("scaleTargetRef") or {}
        if not ref.get("kind") or not ref.get("name"):
            raise MalformedHpa("spec.scaleTargetRef needs kind and name")
        mx = spec.get("maxReplicas")
        if not isinstance(mx, int) or isinstance(mx, bool) or mx < 1:
            raise MalformedHpa(f"spec.maxReplicas {mx!r} is not a positive integer")
        mn = spec.get("minReplicas", 1)
        if not isinstance(mn, int) or isinstance(mn, bool) or mn < 1:
            raise MalformedHpa(f"spec.minReplicas {mn!r} is not a positive integer")
        if mn > mx:
            raise MalformedHpa(f"spec.minReplicas {mn} > maxReplicas {mx}")
        return ref["kind"], ref["name"], mn, mx

    def metrics(self) -> list[Any]:
        """spec.metrics ([] when absent: the caller applies its default target)."""
        return self.spec.get("metrics") or []

    def cpu_utilization_metric(self) -> int | None:
        """Index in spec.metrics of the Resource cpu metric with target.type Utilization (None: none)."""
        metrics = self.metrics()
        for i, m in enumerate(metrics if isinstance(metrics, list) else []):  # malformed: none (never a crash)
            res = m.get("resource") if isinstance(m, dict) and m.get("type") == "Resource" else None
            target = res.get("target") if isinstance(res, dict) and res.get("name") == "cpu" else None
            if isinstance(target, dict) and target.get("type") == "Utilization" \
                    and isinstance(target.get("averageUtilization"), int):
                return i
        return None

    def scale_anchor(self) -> tuple[str | None, str | None]:
        """(the user's target utilisation, the pod CPU request at Tidewise's first rewrite) as kept in
        annotations once serve rewrote the target (None where absent)."""
        a = self.annotations or {}
        return a.get(HPA_USER_TARGET_ANNOTATION), a.get(HPA_ANCHOR_ANNOTATION)

    def written_min_replicas(self) -> object:
        """spec.minReplicas as the cluster holds it (1, the API's default, when unset; None without a spec)."""
        spec = self.obj.get("spec")
        return spec.get("minReplicas", 1) if isinstance(spec, dict) else None


@dataclass(frozen=True)
class PodView(ObjectView):
    """A pod as the node plan reads it: its QoS annotation and its requests."""

    @property
    def label(self) -> str:
        """namespace/name as written (for notes)."""
        m = meta(self.obj)
        return f"{m.get('namespace')}/{m.get('name')}"

    @property
    def node_name(self) -> str | None:
        """spec.nodeName: where it was scheduled (None while pending)."""
        return self.spec.get("nodeName")

    @property
    def phase(self) -> str | None:
        """status.phase (Pending, Running, Succeeded, Failed, Unknown)."""
        return self.status.get("phase")

    @property
    def priority_class(self) -> str:
        return str(self.spec.get("priorityClassName", ""))

    @property
    def started(self) -> tuple[str, pd.Timestamp] | None:
        """(metadata.uid, metadata.creationTimestamp) in UTC; None when either is missing or unreadable."""
        m = meta(self.obj)
        uid, created = m.get("uid"), m.get("creationTimestamp")
        if not isinstance(uid, str) or not uid or not isinstance(created, str):
            return None
        try:
            at = pd.Timestamp(created)
        except ValueError:
            return None
        if pd.isna(at):
            return None
        return uid, at.tz_localize("UTC") if at.tzinfo is None else at.tz_convert("UTC")

    def qos(self, annotation: str) -> str:
        """The Katalyst QoS level as every component reads it (`contracts.qos.parse_qos`: padded or
        wrong-case names accepted, an unknown level `shared_cores`, `shared_cores` when absent)."""
        return qos_level(self.annotations, annotation).value

    def requests(self) -> tuple[int, int]:
        """(millicpu, bytes) the pod's containers request in total."""
        cpu = mem = 0
        for c in (self.obj.get("spec") or {}).get("containers") or []:
            req = (c.get("resources") or {}).get("requests") or {}
            cpu += to_units("cpu", req["cpu"]) if "cpu" in req else 0
            mem += to_units("memory", req["memory"]) if "memory" in req else 0
        return cpu, mem


@dataclass(frozen=True)
class NodeView(ObjectView):
    """A Node: its allocatable resources and NUMA count."""

    def allocatable(self) -> tuple[int, int]:
        """(millicpu, bytes) of status.allocatable; ValueError when either is missing."""
        alloc = (self.obj.get("status") or {}).get("allocatable") or {}
        if "cpu" not in alloc or "memory" not in alloc:
            raise ValueError("status.allocatable has no cpu or memory")
        return to_units("cpu", alloc["cpu"]), to_units("memory", alloc["memory"])

    def accepts_pods(self) -> bool:
        """Whether new pods may land there: not cordoned, no NoSchedule/NoExecute taint."""
        spec = self.spec
        return not spec.get("unschedulable") and not any(
            t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or [] if isinstance(t, dict))

    def allocatable_written(self) -> dict[str, object]:
        """status.allocatable as the cluster holds it ({} when absent)."""
        alloc = self.status.get("allocatable")
        return alloc if isinstance(alloc, dict) else {}

    def numa_nodes(self, annotation: str) -> int:
        """NUMA node count from the annotation; 0 when unknown or not an integer."""
        try:
            return int((self.annotations or {}).get(annotation))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return 0


@dataclass(frozen=True)
class PdbView(ObjectView):
    """A PodDisruptionBudget: the disruptions it allows now and the pods it covers."""

    def disruptions_allowed(self) -> int:
        return int(self.status.get("disruptionsAllowed", 0) or 0)

    def selector(self) -> object:
        """spec.selector as written (a label selector; None when absent)."""
        return self.spec.get("selector")


def report_qos(pods: list[Obj], reporter: QosReporter, annotation: str = QOS_ANNOTATION) -> int:
    """Logs (once per pod, through `reporter`) each pod whose QoS annotations are malformed and how
    every decision reads it; returns how many pods of `pods` have such annotations."""
    bad = 0
    for pod in pods:
        spec = parse_qos(meta(pod).get("annotations"), annotation)
        if spec.problem is not None:
            bad += 1
            reporter.report(PodView(pod).label, spec)
    return bad


def pod_template_requests(workload: Obj) -> dict[str, int]:
    """resource -> the pod template's total cpu/memory request, in units."""
    out: dict[str, int] = {}
    for r in container_requests(workload).values():
        for res, q in r.items():
            if res in ("cpu", "memory"):
                out[res] = out.get(res, 0) + to_units(res, q)
    return out


def resizes_in_place(workload: Obj, container: str, resource: str) -> bool:
    """True when the pod template's container declares `resizePolicy` NotRequired for `resource`
    (InPlacePodVerticalScaling): a new request is applied by a resize, without a restart."""
    spec = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    for c in spec.get("containers") or []:
        if isinstance(c, dict) and c.get("name") == container:
            return any(isinstance(p, dict) and p.get("resourceName") == resource
                       and p.get("restartPolicy") == "NotRequired" for p in c.get("resizePolicy") or [])
    return False


def last_oom_kills(pods: list[Obj]) -> dict[str, pd.Timestamp]:
    """container -> its latest OOM kill among `pods` (`lastState.terminated.reason` OOMKilled, at
    `finishedAt`). A status without a readable finishedAt is skipped: a kill at an unknown time
    cannot be placed in the memory window."""
    out: dict[str, pd.Timestamp] = {}
    for pod in pods:
        for st in (pod.get("status") or {}).get("containerStatuses") or []:
            term = ((st or {}).get("lastState") or {}).get("terminated") or {}
            if term.get("reason") != "OOMKilled" or not st.get("name"):
                continue
            try:
                at = pd.Timestamp(term.get("finishedAt"))
            except (TypeError, ValueError):
                continue
            if pd.isna(at):
                continue
            at = at.tz_localize("UTC") if at.tzinfo is None else at.tz_convert("UTC")
            if st["name"] not in out or at > out[st["name"]]:
                out[st["name"]] = at
    return out


@dataclass
class WorkloadSeries:
    """Where a workload's series are: container -> resource -> series id."""

    by_container: dict[str, dict[str, str]] = field(default_factory=dict)

    def ids(self, resource: str) -> list[str]:
        """The series of `resource`, one per container that has one."""
        return [x for x in (c.get(resource) for c in self.by_container.values()) if x]


def index_series(history: History) -> dict[WorkloadKey, WorkloadSeries]:
    """(namespace, kind, name) -> its series; ids that are not SeriesKeys are ignored."""
    out: dict[WorkloadKey, WorkloadSeries] = {}
    for sid in history.series:
        try:
            k = SeriesKey.parse(sid)
        except ValueError:
            continue
        out.setdefault((k.namespace, k.kind, k.name), WorkloadSeries()).by_container \
            .setdefault(k.container, {})[k.resource] = sid
    return out


def requests_in_force(workload: Obj, pods: list[Obj]) -> tuple[dict[tuple[str, str], int], str]:
    """(container, resource) -> the request in force per pod, and where it was read: the pods' own
    spec requests (their mean, during a rollout) when the cluster state holds pods of the workload,
    else the pod template's ("pods" or "template"). Unparsable quantities are left out."""
    seen: dict[tuple[str, str], list[int]] = {}
    for pod in pods:
        for c in (pod.get("spec") or {}).get("containers") or []:
            for res, q in ((c.get("resources") or {}).get("requests") or {}).items() if isinstance(c, dict) else ():
                try:
                    seen.setdefault((str(c.get("name")), res), []).append(to_units(res, q))
                except ValueError:
                    pass
    if seen:
        return {k: round(sum(v) / len(v)) for k, v in seen.items()}, "pods"
    out: dict[tuple[str, str], int] = {}
    for name, r in container_requests(workload).items():
        for res, q in r.items():
            try:
                out[(name, res)] = to_units(res, q)
            except ValueError:
                pass
    return out, "template"
