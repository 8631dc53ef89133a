"""`tidewise demo` offline: a synthetic cluster, its history, profiles, forecasts and report, the
cluster as Kubernetes objects, and one offline run of the serving loop over it.

The steps, in the order the command runs them: `generate_demo` (history.parquet),
`profile_and_forecast` (profiles.json, forecasts.csv), the forecast report (report.html, written by
the command with `training.report`: studies import nothing from training) and `write_demo_outputs` (`cluster-state.yaml`: Nodes, Deployments/StatefulSets, Pods, HPAs
autoscaling/v2, VPAs naming `tidewise` in spec.recommenders; and `recommendations/`, the file
sink's output of one run). Tests also use `cluster_objects` and `MemorySource` as a cluster and
a history source.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable

import pandas as pd
import yaml

from autoscaler.settings import ServeSettings
from contracts.annotations import MANAGE_ANNOTATION, NUMA_ANNOTATION
from contracts.quantity import GIB, cores_to_millicpu, format_bytes, format_millicpu
from contracts.atomic import write_text_atomic
from predictor.pipeline.forecasting import ForecastRequest, forecast_history, forecasts_to_frame
from predictor.history import History, history_from_frame, write_long
from predictor.profile import build_profiles
from predictor.sources.synthetic import SyntheticCluster, Workload, generate_cluster
from predictor.types import Forecast, ServiceProfile

STEP = pd.Timedelta("5m")  # the synthetic history's step
Progress = Callable[[str, int], Any]  # tidewise.progress.progress: a context manager yielding advance(n)


def _container(w: Workload) -> dict[str, Any]:
    return {"name": w.container, "image": f"registry.example/{w.name}:1.0",
            "resources": {"requests": {"cpu": format_millicpu(cores_to_millicpu(w.cpu_request)),
                                       "memory": format_bytes(int(w.memory_request))}}}


def _has_hpa(w: Workload) -> bool:
    # tidal and bursty Deployments scale out; the others are sized vertically only
    return w.kind == "Deployment" and w.shape in ("tidal", "bursty")


def cluster_objects(cluster: SyntheticCluster, recommender: str = "tidewise") -> list[dict[str, Any]]:
    """Every object of the demo cluster, in API form."""
    objs: list[dict[str, Any]] = []
    for n in cluster.nodes:
        cap = {"cpu": str(n.cpu_cores), "memory": format_bytes(n.memory_bytes), "pods": "110"}
        alloc = {"cpu": format_millicpu(n.cpu_cores * 1000 - 500), "memory": format_bytes(n.memory_bytes - 2 * GIB),
                 "pods": "110"}
        objs.append({"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": n.name, "labels": {"kubernetes.io/hostname": n.name},
                                  # the demo cluster opts its nodes and HPAs in (serve.select, docs/serve-vpa.md)
                                  "annotations": {NUMA_ANNOTATION: str(n.numa_nodes), MANAGE_ANNOTATION: "true"}},
                     "status": {"capacity": cap, "allocatable": alloc}})
    for w in cluster.workloads:
        labels = {"app": w.name}
        template = {"metadata": {"labels": labels}, "spec": {"containers": [_container(w)]}}
        spec: dict[str, Any] = {"replicas": w.replicas, "selector": {"matchLabels": labels}, "template": template}
        if w.kind == "StatefulSet":
            spec["serviceName"] = w.name
        objs.append({"apiVersion": "apps/v1", "kind": w.kind, "metadata": {"name": w.name, "namespace": w.namespace,
                     "labels": labels}, "spec": spec})
        for pod, node in zip(w.pod_names(), w.nodes):
            objs.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": pod, "namespace": w.namespace, "labels": labels,
                                      "annotations": {"katalyst.kubewharf.io/qos_level": "shared_cores"}},
                         "spec": {"nodeName": node, "containers": [_container(w)]},
                         "status": {"phase": "Running"}})
        ref = {"apiVersion": "apps/v1", "kind": w.kind, "name": w.name}
        vpa_spec: dict[str, Any] = {"targetRef": ref, "recommenders": [{"name": recommender}],
                                    "updatePolicy": {"updateMode": "Off"}}
        if _has_hpa(w):
            # an HPA on CPU and a VPA on CPU fight; the VPA sizes memory only
            vpa_spec["resourcePolicy"] = {"containerPolicies": [{"containerName": "*", "controlledResources": ["memory"]}]}
            objs.append({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                         "metadata": {"name": w.name, "namespace": w.namespace,
                                      "annotations": {MANAGE_ANNOTATION: "true"}},
                         # minReplicas 1: the user's floor; Tidewise raises it ahead of each peak
                         "spec": {"scaleTargetRef": ref, "minReplicas": 1, "maxReplicas": w.replicas * 4,
                                  "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                                      "type": "Utilization", "averageUtilization": 70}}}]}})
        else:
            vpa_spec["resourcePolicy"] = {"containerPolicies": [{"containerName": "*",
                                                                 "minAllowed": {"cpu": "50m", "memory": "64Mi"},
                                                                 "maxAllowed": {"cpu": "16", "memory": "64Gi"}}]}
        objs.append({"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
                     "metadata": {"name": w.name, "namespace": w.namespace}, "spec": vpa_spec})
    return objs


class MemorySource:
    """A History already in memory, as a HistorySource."""

    name = "memory"

    def __init__(self, history: History):
        self.history = history

    def fetch(self, start: pd.Timestamp | None, end: pd.Timestamp | None, step: pd.Timedelta) -> History:
        return self.history.window(start, end) if (start is not None or end is not None) else self.history


def write_demo_outputs(cluster: SyntheticCluster, history: History | pd.DataFrame, out_dir: str,
                       settings: ServeSettings | None = None) -> dict[str, Any]:
    """Write cluster-state.yaml and recommendations/ under out_dir; return paths and the run summary."""
    from autoscaler.input.cluster import FileCluster
    from autoscaler.output.sinks import FileSink
    from autoscaler.routines.loop import ServingLoop

    settings = settings or ServeSettings()
    if isinstance(history, pd.DataFrame):
        history = history_from_frame(history, pd.Timedelta(settings.loop.step), "demo")
    os.makedirs(out_dir, exist_ok=True)
    state_path = os.path.join(out_dir, "cluster-state.yaml")
    doc = {"apiVersion": "v1", "kind": "List", "items": cluster_objects(cluster, settings.vpa.recommender_name)}
    write_text_atomic(state_path, yaml.safe_dump(doc, sort_keys=False))
    rec_dir = os.path.join(out_dir, "recommendations")
    sink = FileSink(rec_dir)
    loop = ServingLoop(settings, MemorySource(history), FileCluster(state_path), sink)
    rep = loop.run_once()
    return {"cluster_state": state_path, "recommendations": rec_dir, "files": sorted(sink.written.values()),
            "outcome": rep.outcome, "summary": rep.summary()}


def generate_demo(out_dir: str, seed: int, workloads: int, namespaces: int, nodes: int, days: float
                  ) -> tuple[SyntheticCluster, History, int]:
    """The synthetic cluster and its history, written to out_dir/history.parquet; (cluster, history, rows)."""
    cluster = generate_cluster(seed=seed, workloads=workloads, namespaces=namespaces, nodes=nodes, days=days,
                               step=STEP)
    frame = cluster.history()
    write_long(frame, os.path.join(out_dir, "history.parquet"))
    return cluster, history_from_frame(frame, STEP, "synthetic"), len(frame)


def profile_and_forecast(out_dir: str, history: History, horizon: pd.Timedelta, progress: Progress
                         ) -> tuple[dict[str, ServiceProfile], list[Forecast]]:
    """Every series' profile (profiles.json) and forecast over `horizon` (forecasts.csv)."""
    with progress("profiling", len(history.series)) as advance:
        profiles = build_profiles(history)
        advance(len(profiles))
    write_text_atomic(os.path.join(out_dir, "profiles.json"),
                      json.dumps({k: p.to_dict() for k, p in profiles.items()}, indent=1, allow_nan=False) + "\n")
    req = ForecastRequest(horizon=horizon, step=STEP)
    with progress("forecasting", len(history.series)) as advance:
        forecasts = forecast_history(history, req, progress=advance)
    write_long(forecasts_to_frame(forecasts), os.path.join(out_dir, "forecasts.csv"))
    return profiles, forecasts
