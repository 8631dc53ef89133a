"""The cluster as one run sees it: plain dicts in API form (camelCase), indexed for lookups.

Read from the API (`input/cluster.py`) or from a YAML file (`--cluster-state`); the logic never
talks to Kubernetes, only to this snapshot.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from contracts.selector import has_labels

Obj = dict[str, Any]

WORKLOAD_KINDS = ("Deployment", "StatefulSet")
KINDS = ("VerticalPodAutoscaler", "HorizontalPodAutoscaler", "Deployment", "StatefulSet", "Pod", "Node")
# kinds read only when a feature needs them (serve passes them as `extra_kinds` to the cluster readers):
# disruption budgets (rebalancing, tide pools) and Katalyst's SPD, IHPA and TideNodePool objects
OPTIONAL_KINDS = ("PodDisruptionBudget", "ServiceProfileDescriptor", "IntelligentHorizontalPodAutoscaler",
                  "TideNodePool")


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def obj_key(obj: Obj) -> str:
    m = meta(obj)
    return f"{obj.get('kind')}/{m.get('namespace', '')}/{m.get('name', '')}" if m.get("namespace") \
        else f"{obj.get('kind')}/{m.get('name', '')}"


@dataclass
class ClusterState:
    vpas: list[Obj] = field(default_factory=list)
    hpas: list[Obj] = field(default_factory=list)
    workloads: dict[tuple[str, str, str], Obj] = field(default_factory=dict)  # (ns, kind, name)
    pods: list[Obj] = field(default_factory=list)
    nodes: list[Obj] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # objects that could not be used, and why
    # OPTIONAL_KINDS by kind (absent when not read); e.g. `state.others.get("TideNodePool", [])`
    others: dict[str, list[Obj]] = field(default_factory=dict)

    @classmethod
    def from_objects(cls, objects: Iterable[Obj]) -> "ClusterState":
        state = cls()
        for i, o in enumerate(objects):
            if not isinstance(o, dict) or not o.get("kind") or not meta(o).get("name"):
                state.skipped.append(f"item {i}: not a Kubernetes object with kind and metadata.name")
                continue
            kind = o["kind"]
            if kind == "VerticalPodAutoscaler":
                state.vpas.append(o)
            elif kind == "HorizontalPodAutoscaler":
                state.hpas.append(o)
            elif kind in WORKLOAD_KINDS:
                m = meta(o)
                state.workloads[(m.get("namespace", "default"), kind, m["name"])] = o
            elif kind == "Pod":
                state.pods.append(o)
            elif kind == "Node":
                state.nodes.append(o)
            elif kind in OPTIONAL_KINDS:
                state.others.setdefault(kind, []).append(o)
            # other kinds (Services, ConfigMaps, ...) are ignored on purpose
        state._index()
        return state

    def _index(self) -> None:
        # pods find their workload by its selector (matchLabels), as the controllers do; candidates
        # are looked up by one (namespace, label) pair so that 30,000 pods x 10,000 workloads stays linear
        self._pods_by_wl: dict[tuple[str, str, str], list[Obj]] = {}
        by_label: dict[tuple[str, str, str], list[tuple[tuple[str, str, str], dict[str, str]]]] = {}
        for key, wl in self.workloads.items():
            spec: Obj = wl["spec"] if isinstance(wl.get("spec"), dict) else {}
            sel = (spec.get("selector") or {}).get("matchLabels") or {}
            if sel and isinstance(sel, dict):
                k, v = sorted(sel.items())[0]
                by_label.setdefault((key[0], k, str(v)), []).append((key, sel))
        self._wl_of_pod: dict[str, tuple[str, str, str]] = {}
        for pod in self.pods:
            m = meta(pod)
            ns = m.get("namespace", "default")
            labels = m.get("labels") or {}
            found = None
            for k, v in labels.items():
                for key, sel in by_label.get((ns, k, str(v)), ()):
                    if has_labels(sel, labels):
                        found = key
                        break
                if found:
                    break
            if found:
                self._pods_by_wl.setdefault(found, []).append(pod)
                self._wl_of_pod[f"{ns}/{m['name']}"] = found

    def workload(self, namespace: str, kind: str, name: str) -> Obj | None:
        return self.workloads.get((namespace, kind, name))

    def pods_of(self, namespace: str, kind: str, name: str) -> list[Obj]:
        return self._pods_by_wl.get((namespace, kind, name), [])

    def workload_of_pod(self, pod: Obj) -> tuple[str, str, str] | None:
        m = meta(pod)
        return self._wl_of_pod.get(f"{m.get('namespace', 'default')}/{m.get('name')}")

    def replicas(self, namespace: str, kind: str, name: str) -> int:
        """Running pods of the workload, else its spec.replicas, else 1 (never 0: it divides)."""
        pods = [p for p in self.pods_of(namespace, kind, name)
                if (p.get("status") or {}).get("phase", "Running") in ("Running", "Pending")]
        if pods:
            return len(pods)
        wl = self.workload(namespace, kind, name) or {}
        return max(1, int((wl.get("spec") or {}).get("replicas") or 1))

    def pods_on(self) -> dict[str, list[Obj]]:
        out: dict[str, list[Obj]] = {}
        for pod in self.pods:
            node = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase", "Running")
            if node and phase in ("Running", "Pending"):
                out.setdefault(node, []).append(pod)
        return out


def container_requests(wl: Obj) -> dict[str, dict[str, str]]:
    """container name -> resources.requests of a workload's pod template."""
    spec = ((wl.get("spec") or {}).get("template") or {}).get("spec") or {}
    return {c["name"]: dict((c.get("resources") or {}).get("requests") or {}) for c in spec.get("containers") or []
            if c.get("name")}
