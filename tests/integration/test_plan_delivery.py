"""The reclaim plan from serve to the node's cgroups: `tidewise serve --once --apply` against the API
fake publishes each node's plan in its `tidewise.io/reclaim-plan` annotation; `tidewise enforce
--once --pods-from api --reclaim-plan-from api` reads its own node's plan from the same fake and
writes real cgroups (a tidewise-test-* tree under this machine's v1 hierarchy).

Two nodes are added to a small synthetic cluster:
- `tw-numa`, two NUMA zones, with a busy pod bound to zone 1: the plan's zones follow that usage;
- `tw-here`, shaped like this machine (one NUMA zone; its topology is read from the real /sys),
  with one online pod and one batch pod whose real cgroups the agent writes from the plan.
"""
from __future__ import annotations

import copy
import datetime as dt
import json
import math
import os

import pandas as pd
import pytest
import yaml

from autoscaler.output.objects import PLAN_ANNOTATION, PLAN_SCHEMA
from contracts import reclaim as shared_plan
from node_enforcer.collect import reclaim as agent_reclaim
from node_enforcer.collect.pods import pod_from_object
from node_enforcer.collect.topology import read_topology
from testsupport.realcgroups import CgroupsNotWritable, RealTree, leftovers
from predictor.history import write_long
from predictor.sources.synthetic import generate_cluster
from studies.demo import cluster_objects
from tests.autoscaler.conftest import validate_object
from testsupport.kube_fake import FakeApiServer
from tests.conftest import run_cli, write_kubeconfig
from tests.node_enforcer.conftest import make_pod_obj

pytestmark = pytest.mark.integration
GIB, MIB = 2**30, 2**20
HERE, NUMA = "tw-here", "tw-numa"
BIND = "katalyst.kubewharf.io/numa_bind_result"


def _node(name: str, cpu: str, memory: str, numa: int) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                         "annotations": {"tidewise.io/numa-nodes": str(numa)}},
            "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}


def _pod(name: str, node: str, cpu: str | None, memory: str | None, qos: str, k8s_qos: str, **ann: str) -> dict:
    """A pod without an owner (serve has no forecast for it: it counts its requests)."""
    obj = make_pod_obj(name, qos, cpu=cpu, memory=memory, node=node, ns="tw", k8s_qos=k8s_qos)
    obj = dict(obj, apiVersion="v1", kind="Pod")
    obj["metadata"]["annotations"].update(ann)
    for c in obj["spec"]["containers"]:
        c["image"] = "registry.example/app:1.0"
    for st in obj["status"]["containerStatuses"]:  # the fields the real schema requires
        st.update(ready=True, restartCount=0, image="registry.example/app:1.0", imageID="registry.example/app@sha256:0")
    return obj


def _plan(fake: FakeApiServer, node: str) -> dict:
    return json.loads(fake.get("Node", node)["metadata"]["annotations"][PLAN_ANNOTATION])


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read().strip()


@pytest.fixture
def tree(request):
    try:
        t = RealTree(1, "cgroupfs")
    except CgroupsNotWritable as exc:
        pytest.fail(str(exc))
    request.addfinalizer(lambda: (t.close(), _clean(t.name)))
    return t


def _clean(name: str) -> None:
    assert leftovers([name]) == [], f"cgroup sub-tree {name} was not removed"


def test_serve_publishes_per_numa_plans_that_enforce_applies_to_real_cgroups(tree, tmp_path):
    topo = read_topology("/sys")
    assert len(topo.numa_nodes) == 1 and len(topo.cpus) >= 2 and topo.threads_per_core == 1, \
        "this test shapes tw-here like a 1-NUMA machine with >= 2 single-thread cores"
    # history ending now, so that the plan is valid when the agent reads it (it checks the wall clock)
    end = pd.Timestamp.now(tz="UTC").floor("5min")
    c = generate_cluster(seed=5, workloads=2, namespaces=1, nodes=1, days=3, end=end, gaps=False)
    history = tmp_path / "history.parquet"
    write_long(c.history(), str(history))
    ncpu = len(topo.cpus)
    online = _pod("web", HERE, "300m", "64Mi", "shared_cores", "Burstable")
    batch = _pod("batch", HERE, None, None, "reclaimed_cores", "BestEffort")
    objects = cluster_objects(c) + [
        _node(NUMA, "8", "16Gi", 2),
        _pod("db", NUMA, "2", "4Gi", "shared_cores", "Burstable", **{BIND: "1"}),
        _pod("api", NUMA, "1", "2Gi", "shared_cores", "Burstable"),
        _node(HERE, str(ncpu + 1), "4Gi", 1), online, batch,
    ]
    for o in objects:
        validate_object(o)
    fake = FakeApiServer(objects).start()
    try:
        kc = write_kubeconfig(tmp_path / "kubeconfig", fake.url)
        serve_cfg = tmp_path / "serve.yaml"
        # no step limit, so that the first publication is the whole plan (the limit is unit-tested)
        serve_cfg.write_text("serve:\n  reclaim:\n    max_step_fraction: 1.0\n  select:\n    node: {all: true}\n")
        r = run_cli("--config", str(serve_cfg), "serve", "--once", "--apply", "--kubeconfig", kc,
                    "--source", "file", "--input", str(history), "--model", "seasonal_naive_daily",
                    "--now", end.isoformat(), "--no-leader-election", "--port", "0")
        assert r.returncode == 0, r.stderr
        for name in (HERE, NUMA):
            validate_object(fake.get("Node", name))
        annotation_patches = [q for q in fake.writes("PATCH") if q.path == f"/api/v1/nodes/{HERE}"]
        assert annotation_patches and set(annotation_patches[0].body) == {"metadata"}  # metadata only

        # per NUMA from usage: zone 1 holds the bound 2-core pod, the unbound 1-core pod is spread
        numa_plan = _plan(fake, NUMA)
        assert numa_plan["schema"] == PLAN_SCHEMA == shared_plan.PLAN_SCHEMA  # one schema, in contracts
        assert PLAN_ANNOTATION == agent_reclaim.PLAN_ANNOTATION
        zone_alloc, zone_reserved, zone_margin = 4000, 500, 200  # 8 cores / 2; 1000m reserve / 2; 5%
        want = {"0": zone_alloc - zone_reserved - 500 - zone_margin,  # 2800m
                "1": zone_alloc - zone_reserved - 2500 - zone_margin}  # 800m
        assert {z: v["millicpu"] for z, v in numa_plan["numa"].items()} == want
        assert numa_plan["reclaimed_millicpu"] == sum(want.values())
        zone_mem = 8 * GIB - GIB - math.ceil(8 * GIB * 0.05)  # 16Gi / 2, 2Gi reserve / 2, margin
        assert numa_plan["numa"]["0"]["memory_bytes"] == zone_mem - GIB  # half of the unbound 2Gi
        assert numa_plan["numa"]["1"]["memory_bytes"] == zone_mem - 4 * GIB - GIB

        plan = _plan(fake, HERE)
        assert plan["node"] == HERE and plan["numa_layout"] == "known" and list(plan["numa"]) == ["0"]
        zone0 = plan["numa"]["0"]
        alloc_cpu = (ncpu + 1) * 1000
        assert zone0["millicpu"] == plan["reclaimed_millicpu"] == \
            alloc_cpu - 1000 - 300 - math.ceil(alloc_cpu * 0.05)
        assert zone0["memory_bytes"] == plan["reclaimed_memory_bytes"] == \
            4 * GIB - 2 * GIB - 64 * MIB - math.ceil(4 * GIB * 0.05)
        assert dt.datetime.fromisoformat(plan["valid_until"].replace("Z", "+00:00")) > \
            dt.datetime.now(dt.timezone.utc)

        # the agent on "this node": pods and plan from the same fake, cgroups real
        pod_online, pod_batch = pod_from_object(online), pod_from_object(batch)
        tree.add_pod(pod_online)
        batch_pids = tree.add_pod(pod_batch)
        enforce_cfg = tmp_path / "enforce.yaml"
        enforce_cfg.write_text(yaml.safe_dump({"enforcer": {
            "reserved_cpus": 0, "reclaim_floor_cpus": 0, "share_headroom": 0.0,
            "cgroup_parent": dict(tree.parents)}}))
        args = ["--config", str(enforce_cfg), "enforce", "--once", "--node", HERE, "--kubeconfig", kc,
                "--pods-from", "api", "--reclaim-plan-from", "api", "--sysfs-root", "/sys",
                "--cgroup-root", "/sys/fs/cgroup", "--cgroup-driver", "cgroupfs", "--cgroup-version", "1",
                "--checkpoint", str(tmp_path / "ck.json"), "--no-eviction"]
        r = run_cli(*args)
        assert r.returncode == 0, r.stderr + r.stdout
        driver = tree.driver()
        # the plan's zone-0 whole cores (capped by what the 300m online pod leaves), highest first
        cores = min(zone0["millicpu"] // 1000, ncpu - 1)
        pool = sorted(topo.cpus)[-cores:]
        assert os.sched_getaffinity(batch_pids[0]) == set(pool)
        assert _read(os.path.join(driver.pod_dir(pod_batch, "cpuset"), "cpuset.cpus")) == \
            (str(pool[0]) if len(pool) == 1 else f"{pool[0]}-{pool[-1]}")
        assert int(_read(os.path.join(driver.pod_dir(pod_batch, "cpu"), "cpu.cfs_quota_us"))) == cores * 100_000
        assert int(_read(os.path.join(driver.pod_dir(pod_batch, "memory"), "memory.limit_in_bytes"))) == \
            zone0["memory_bytes"] // 4096 * 4096  # the kernel rounds a limit down to whole pages
        assert requested_node_gets(fake) >= 1

        # serve stops: the plan expires and the agent fails closed instead of lending on old numbers:
        # reclaim 0 and (floor 0 here) no reclaim pool; batch runs on the share pool at the lowest weight
        node = copy.deepcopy(fake.get("Node", HERE))
        expired = dict(plan, generated_at="2020-01-01T00:00:00Z", valid_until="2020-01-01T01:00:00Z")
        node["metadata"]["annotations"][PLAN_ANNOTATION] = json.dumps(expired)
        fake.put(node)
        r = run_cli(*args)
        assert r.returncode == 0, r.stderr + r.stdout
        assert "expired" in r.stderr and "reclaiming nothing" in r.stderr
        assert os.sched_getaffinity(batch_pids[0]) == set(topo.cpus)  # no cores of its own any more
        cpu_dir = driver.pod_dir(pod_batch, "cpu")
        if os.path.exists(f"{cpu_dir}/cpu.idle"):
            assert _read(f"{cpu_dir}/cpu.idle") == "1"
        else:
            assert _read(f"{cpu_dir}/cpu.shares") == "2"
    finally:
        fake.stop()


def requested_node_gets(fake: FakeApiServer) -> int:
    return sum(1 for q in fake.requests if q.method == "GET" and q.path == f"/api/v1/nodes/{HERE}")
