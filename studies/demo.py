"""`tidewise demo` offline: a synthetic cluster, its history, profiles, forecasts and report, the
cluster as Kubernetes objects, and one offline run of the serving loop over it.

The steps, in the order the command runs them: `generate_demo` (history.parquet: usage, and the
requests and replicas `tidewise fetch` writes), `profile_and_forecast` on its usage (profiles.json,
forecasts.csv), the forecast report (report.html, written by
the command with `training.report`: studies import nothing from training) and `write_demo_outputs` (`cluster-state.yaml`: Nodes, Deployments/StatefulSets, Pods, HPAs
autoscaling/v2, VPAs naming `tidewise` in spec.recommenders; `sysfs/<node>/`, each node's topology;
and `recommendations/`, the file sink's output of one run). Tests also use `cluster_objects` and `MemorySource` as a cluster and
a history source.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import uuid
from typing import Any, Callable

import pandas as pd
import yaml

from autoscaler.settings import ServeSettings
from contracts.annotations import MANAGE_ANNOTATION, NUMA_ANNOTATION
from contracts.quantity import GIB, cores_to_millicpu, format_bytes, format_millicpu
from contracts.atomic import write_text_atomic
from contracts.errors import InputError
from predictor.pipeline.forecasting import ForecastRequest, forecast_history, forecasts_to_frame
from predictor.history import History, history_from_frame, write_long
from predictor.profile import build_profiles
from predictor.sources.prometheus import WORKLOAD_CONTAINER
from predictor.sources.synthetic import Node, SyntheticCluster, Workload, generate_cluster
from predictor.types import Forecast, ServiceProfile

STEP = pd.Timedelta("5m")  # the synthetic history's step
USAGE = ("cpu", "memory")  # the series the demo profiles and forecasts; the others are the cluster's state
Progress = Callable[[str, int], Any]  # tidewise.progress.progress: a context manager yielding advance(n)


def _container(w: Workload) -> dict[str, Any]:
    return {"name": w.container, "image": f"registry.example/{w.name}:1.0",
            "resources": {"requests": {"cpu": format_millicpu(cores_to_millicpu(w.cpu_request)),
                                       "memory": format_bytes(int(w.memory_request))}}}


def _has_hpa(w: Workload) -> bool:
    # tidal and bursty Deployments scale out; the others are sized vertically only
    return w.kind == "Deployment" and w.shape in ("tidal", "bursty")


def uid(kind: str, namespace: str, name: str) -> str:
    """A demo object's metadata.uid: an RFC 4122 UUID, the same on every run (uuid5 of its key)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"https://tidewise.demo/{kind}/{namespace}/{name}"))


def _owned_by(kind: str, namespace: str, name: str) -> list[dict[str, Any]]:
    """The ownerReferences a controller sets: the one owner, `controller: true`, by uid."""
    return [{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid(kind, namespace, name),
             "controller": True, "blockOwnerDeletion": True}]


def _node_object(n: Any) -> dict[str, Any]:
    cap = {"cpu": str(n.cpu_cores), "memory": format_bytes(n.memory_bytes), "pods": "110"}
    alloc = {"cpu": format_millicpu(n.cpu_cores * 1000 - 500), "memory": format_bytes(n.memory_bytes - 2 * GIB),
             "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n.name, "labels": {"kubernetes.io/hostname": n.name}, "uid": uid("Node", "", n.name),
                         # the demo cluster opts its nodes and HPAs in (serve.select, docs/serve-vpa.md)
                         "annotations": {NUMA_ANNOTATION: str(n.numa_nodes), MANAGE_ANNOTATION: "true"}},
            "status": {"capacity": cap, "allocatable": alloc}}


def _workload_objects(w: Workload) -> list[dict[str, Any]]:
    """The workload, its ReplicaSet (a Deployment's; the pod-template-hash in the owner's name) and its
    pods, each with a uid and owned by its controller, as the API server holds them."""
    labels = {"app": w.name}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [_container(w)]}}
    spec: dict[str, Any] = {"replicas": w.replicas, "selector": {"matchLabels": labels}, "template": template}
    if w.kind == "StatefulSet":
        spec["serviceName"] = w.name
    objs = [{"apiVersion": "apps/v1", "kind": w.kind, "metadata": {
        "name": w.name, "namespace": w.namespace, "labels": labels, "uid": uid(w.kind, w.namespace, w.name)},
        "spec": spec}]
    pod_labels, owner_kind = labels, w.kind
    if w.kind == "Deployment":
        pod_labels, owner_kind = {**labels, "pod-template-hash": w.owner.rsplit("-", 1)[1]}, "ReplicaSet"
        objs.append({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
            "name": w.owner, "namespace": w.namespace, "labels": pod_labels,
            "uid": uid("ReplicaSet", w.namespace, w.owner), "ownerReferences": _owned_by(w.kind, w.namespace, w.name)},
            "spec": {"replicas": w.replicas, "selector": {"matchLabels": pod_labels},
                     "template": {**template, "metadata": {"labels": pod_labels}}},
            "status": {"replicas": w.replicas, "readyReplicas": w.replicas}})
    for pod, node in zip(w.pod_names(), w.nodes):
        objs.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": pod, "namespace": w.namespace, "labels": pod_labels,
                                  "uid": uid("Pod", w.namespace, pod),
                                  "ownerReferences": _owned_by(owner_kind, w.namespace, w.owner),
                                  "annotations": {"katalyst.kubewharf.io/qos_level": "shared_cores"}},
                     "spec": {"nodeName": node, "containers": [_container(w)]},
                     "status": {"phase": "Running"}})
    return objs


def _autoscalers(w: Workload, recommender: str) -> list[dict[str, Any]]:
    """The workload's VPA (naming `recommender`) and, for those that scale out, its HPA."""
    objs: list[dict[str, Any]] = []
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


def cluster_objects(cluster: SyntheticCluster, recommender: str = "tidewise") -> list[dict[str, Any]]:
    """Every object of the demo cluster, in API form: Nodes, then per workload its controller,
    ReplicaSet and pods, HPA and VPA."""
    objs = [_node_object(n) for n in cluster.nodes]
    for w in cluster.workloads:
        objs += _workload_objects(w) + _autoscalers(w, recommender)
    return objs


def _cpus(first: int, count: int, apart: int, threads: int) -> str:
    """The cpulist of `count` consecutive cores from `first`, each with its `threads` threads `apart`."""
    return ",".join(f"{first + t * apart}-{first + t * apart + count - 1}" for t in range(threads))


def write_sysfs(root: str, node: Node, threads_per_core: int = 2) -> None:
    """`node`'s CPU topology as the sysfs tree `tidewise enforce --sysfs-root` reads (`devices/system/
    {cpu,node}`), numbered as Linux numbers a machine known by its counts (Topology.uniform): NUMA node
    n is socket n, its cores consecutive, a core's threads `cores` apart; each NUMA node holds an equal
    share of the node's memory."""
    cores, numa = node.cpu_cores // threads_per_core, node.numa_nodes
    if node.cpu_cores % (numa * threads_per_core):
        raise ValueError(f"node {node.name}: {node.cpu_cores} threads do not split into {numa} NUMA node(s) "
                         f"of {threads_per_core}-thread cores")
    per_numa = cores // numa
    files = {"devices/system/cpu/online": f"0-{node.cpu_cores - 1}", "devices/system/node/online": f"0-{numa - 1}"}
    for cpu in range(node.cpu_cores):
        core = cpu % cores
        topo = f"devices/system/cpu/cpu{cpu}/topology"
        files |= {f"{topo}/physical_package_id": str(core // per_numa), f"{topo}/core_id": str(core % per_numa),
                  f"{topo}/thread_siblings_list": ",".join(str(core + t * cores) for t in range(threads_per_core))}
    for n in range(numa):
        files |= {f"devices/system/node/node{n}/cpulist": _cpus(n * per_numa, per_numa, cores, threads_per_core),
                  f"devices/system/node/node{n}/meminfo":
                      f"Node {n} MemTotal:       {node.memory_bytes // numa // 1024} kB"}
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")


def write_sysfs_trees(cluster: SyntheticCluster, out_dir: str) -> str:
    """out_dir/sysfs/<node>/: each node's topology (write_sysfs), for `enforce --sysfs-root`. Built
    aside and renamed into place, replacing the folder an earlier demo wrote there."""
    target = os.path.join(out_dir, "sysfs")
    if os.path.lexists(target) and (os.path.islink(target) or not os.path.isdir(target)):
        raise InputError(f"{target}: not a folder the demo wrote (a link or a file); move it away and run again")
    tmp = tempfile.mkdtemp(prefix=".sysfs-", dir=out_dir)
    try:
        for n in cluster.nodes:
            write_sysfs(os.path.join(tmp, n.name), n)
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


class MemorySource:
    """A History already in memory, as a HistorySource."""

    name = "memory"

    def __init__(self, history: History):
        self.history = history

    def fetch(self, start: pd.Timestamp | None, end: pd.Timestamp | None, step: pd.Timedelta) -> History:
        return self.history.window(start, end) if (start is not None or end is not None) else self.history


def write_demo_outputs(cluster: SyntheticCluster, history: History | pd.DataFrame, out_dir: str,
                       settings: ServeSettings | None = None, rebalance_horizon: str | None = None) -> dict[str, Any]:
    """Write cluster-state.yaml, pods.yaml (its pods alone, a PodList for `enforce --pods-from file`),
    sysfs/<node>/ (each node's topology, for `enforce --sysfs-root`) and recommendations/ under
    out_dir; return paths and the run summary. With `rebalance_horizon`,
    also the plan of a dry-run rebalance over it and rebalance-config.yaml, which reproduces it
    (serve's 2 h default finds no demo node hot at midnight, where the history ends: the tide peaks
    later in the day); without it (tests that only serve) no second run."""
    from autoscaler.input.cluster import FileCluster
    from autoscaler.output.sinks import FileSink
    from autoscaler.routines.loop import ServingLoop

    settings = settings or ServeSettings()
    if isinstance(history, pd.DataFrame):
        history = history_from_frame(history, pd.Timedelta(settings.loop.step), "demo")
    os.makedirs(out_dir, exist_ok=True)
    state_path, pods_path = os.path.join(out_dir, "cluster-state.yaml"), os.path.join(out_dir, "pods.yaml")
    objs = cluster_objects(cluster, settings.vpa.recommender_name)
    write_text_atomic(state_path, yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objs}, sort_keys=False))
    write_text_atomic(pods_path, yaml.safe_dump({"apiVersion": "v1", "kind": "PodList",
                                                 "items": [o for o in objs if o["kind"] == "Pod"]}, sort_keys=False))
    sysfs = write_sysfs_trees(cluster, out_dir)
    rec_dir = os.path.join(out_dir, "recommendations")
    sink = FileSink(rec_dir)
    loop = ServingLoop(settings, MemorySource(history), FileCluster(state_path), sink)
    rep = loop.run_once()
    return {"cluster_state": state_path, "pods": pods_path, "sysfs": sysfs, "recommendations": rec_dir,
            "files": sorted(sink.written.values()), "outcome": rep.outcome, "summary": rep.summary(),
            "now": rep.now, **({} if rebalance_horizon is None else {
                "rebalance": rebalance_demo(state_path, history, settings, rebalance_horizon),
                "rebalance_config": _rebalance_config(out_dir, settings, rebalance_horizon)})}


def _rebalance_config(out_dir: str, settings: ServeSettings, horizon: str) -> str:
    """The settings file that makes `tidewise --config F rebalance` plan what the demo's summary shows:
    the horizon, and every rebalance setting the demo ran with that is not the default."""
    default = dataclasses.asdict(type(settings.rebalance)())
    section = {k: v for k, v in dataclasses.asdict(settings.rebalance).items() if k != "enabled" and v != default[k]}
    path = os.path.join(out_dir, "rebalance-config.yaml")
    write_text_atomic(path, yaml.safe_dump({"serve": {"rebalance": section | {"horizon": horizon}}}))
    return path


def rebalance_demo(state_path: str, history: History, settings: ServeSettings, horizon: str) -> dict[str, Any]:
    """What `tidewise rebalance --cluster-state` plans on the demo cluster over `horizon`: the serving
    loop with the rebalance feature alone, dry-run (nothing evicted); its plan as
    `RebalanceResult.as_dict()`, with the run's outcome."""
    from autoscaler.input.cluster import FileCluster
    from autoscaler.output.eviction import Evictor
    from autoscaler.output.sinks import DryRunSink
    from autoscaler.routines.loop import ServingLoop
    from autoscaler.routines.rebalance import RebalanceResult

    s = dataclasses.replace(settings, rebalance=dataclasses.replace(settings.rebalance, enabled=True, horizon=horizon))
    loop = ServingLoop(s, MemorySource(history), FileCluster(state_path), DryRunSink(),
                       evictor=Evictor(None, dry_run=True, per_minute=s.rebalance.per_minute), only=("rebalance",))
    rep = loop.run_once()
    result = rep.sections.get("rebalance")
    if not isinstance(result, RebalanceResult):
        return {"outcome": rep.outcome, "hot": {}, "moves": [], "kept": {},
                "note": rep.skipped.get("rebalance") or rep.reason or "not planned"}
    return {"outcome": rep.outcome, **result.as_dict()}


def state_frame(cluster: SyntheticCluster) -> pd.DataFrame:
    """Each workload's requests and replicas as `tidewise fetch --what requests,replicas` writes them
    from kube-state-metrics: `cpu_request` and `memory_request` per container, summed over its pods
    (fetch's default `--aggregate sum`), and `replicas` per workload (container `-`). On the history's
    grid without its gaps: kube-state-metrics reports the objects while a pod's own samples are missing."""
    idx = cluster.index()
    frames = []
    for w in cluster.workloads:
        replicas = dataclasses.replace(w.key("replicas"), container=WORKLOAD_CONTAINER)
        for key, value in ((w.key("cpu_request"), w.cpu_request * w.replicas),
                           (w.key("memory_request"), w.memory_request * w.replicas), (replicas, float(w.replicas))):
            frames.append(pd.DataFrame({"series": key.id, "timestamp": idx, "value": value, "namespace": key.namespace,
                                        "kind": key.kind, "workload": key.name, "container": key.container,
                                        "resource": key.resource}))
    return pd.concat(frames, ignore_index=True)


def generate_demo(out_dir: str, seed: int, workloads: int, namespaces: int, nodes: int, days: float
                  ) -> tuple[SyntheticCluster, History, int]:
    """The synthetic cluster and its history, written to out_dir/history.parquet: usage, requests and
    replicas, as `tidewise fetch --what cpu,memory,requests,replicas` writes a real cluster's;
    (cluster, history, rows)."""
    cluster = generate_cluster(seed=seed, workloads=workloads, namespaces=namespaces, nodes=nodes, days=days,
                               step=STEP)
    frame = pd.concat([cluster.history(), state_frame(cluster)], ignore_index=True)
    write_long(frame, os.path.join(out_dir, "history.parquet"))
    return cluster, history_from_frame(frame, STEP, "synthetic"), len(frame)


def usage_history(history: History) -> History:
    """The history's usage series alone (USAGE): what the demo profiles, forecasts and plots."""
    keep = {k: y for k, y in history.series.items() if k.rsplit("/", 1)[-1] in USAGE}
    return History(keep, history.step, {k: g for k, g in history.gaps.items() if k in keep}, history.labels,
                   [k for k in history.signed if k in keep], dict(history.failed))


def profile_and_forecast(out_dir: str, history: History, horizon: pd.Timedelta, progress: Progress
                         ) -> tuple[dict[str, ServiceProfile], list[Forecast]]:
    """Every series' profile (profiles.json) and forecast over `horizon` (forecasts.csv)."""
    with progress("profiling", len(history.series)) as advance:
        profiles = build_profiles(history, progress=advance)
    write_text_atomic(os.path.join(out_dir, "profiles.json"),
                      json.dumps({k: p.to_dict() for k, p in profiles.items()}, indent=1, allow_nan=False) + "\n")
    req = ForecastRequest(horizon=horizon, step=STEP)
    with progress("forecasting", len(history.series)) as advance:
        forecasts = forecast_history(history, req, progress=advance)
    write_long(forecasts_to_frame(forecasts), os.path.join(out_dir, "forecasts.csv"))
    return profiles, forecasts
