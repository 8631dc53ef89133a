"""Issue 25 item 6: the demo as a small real cluster. Its pods have uids and owner references that
resolve (Pod -> ReplicaSet -> Deployment, Pod -> StatefulSet), so `tidewise rebalance` considers them
and `tidewise enforce --pods-from file` plans them from the reclaim plan serve wrote for their node."""
import dataclasses
import json
import logging
import os
import shutil

import pandas as pd
import pytest
import yaml

from autoscaler.settings import ServeSettings
from predictor.history import history_from_frame
from predictor.sources.synthetic import generate_cluster
from studies.demo import STEP, cluster_objects, write_demo_outputs
from tests.conftest import run_main
from tests.node_enforcer.conftest import TWO_SOCKET


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's files for a history ending now (to the step), so that the plans serve writes are in
    force for the agent's clock (the demo's own history ends at the last midnight). The tide's peak over
    the next 24 h depends on the hour and weekday of now (at the default 0.8 no node was hot at noon on
    a Saturday), so the rebalance thresholds are lowered to where a node is hot at every hour of the
    week; the config the demo writes carries them to the command."""
    out = tmp_path_factory.mktemp("demo")
    defaults = ServeSettings()
    settings = dataclasses.replace(defaults, rebalance=dataclasses.replace(
        defaults.rebalance, high_cpu=0.5, target_cpu=0.4, low_cpu=0.3))
    end = pd.Timestamp.now(tz="UTC").floor(STEP)
    cluster = generate_cluster(seed=7, workloads=12, namespaces=3, nodes=4, days=21, step=STEP, end=end)
    frame = cluster.history()
    frame.to_parquet(out / "history.parquet")
    served = write_demo_outputs(cluster, history_from_frame(frame, STEP, "synthetic"), str(out), settings=settings,
                                rebalance_horizon="24h")
    return cluster, served


def test_pods_have_uids_and_owner_references_that_resolve():
    cluster = generate_cluster(seed=7, workloads=12, namespaces=3, nodes=4, days=3, step=STEP)
    objs = cluster_objects(cluster)
    owned = [o for o in objs if o["kind"] in ("Node", "Deployment", "ReplicaSet", "StatefulSet", "Pod")]
    by_uid = {o["metadata"]["uid"]: o for o in owned}
    assert len(by_uid) == len(owned)  # each has a uid of its own
    pods = [o for o in objs if o["kind"] == "Pod"]
    assert len(pods) == sum(w.replicas for w in cluster.workloads)
    kinds = set()
    for pod in pods:
        (ref,) = pod["metadata"]["ownerReferences"]
        owner = by_uid[ref["uid"]]  # resolves, by uid, to an object of the cluster with that kind and name
        assert ref["controller"] is True and (owner["kind"], owner["metadata"]["name"]) == (ref["kind"], ref["name"])
        assert owner["metadata"]["namespace"] == pod["metadata"]["namespace"]
        if owner["kind"] == "ReplicaSet":
            (top,) = owner["metadata"]["ownerReferences"]
            assert by_uid[top["uid"]]["kind"] == "Deployment" and top["controller"] is True
            sel = owner["spec"]["selector"]["matchLabels"]
            assert sel.items() <= pod["metadata"]["labels"].items()  # the ReplicaSet selects its pods
        kinds.add(owner["kind"])
    assert kinds == {"ReplicaSet", "StatefulSet"}
    assert cluster_objects(cluster) == objs  # the same uids on every run


def test_rebalance_on_the_demo_files_considers_its_pods(demo, tmp_path):
    _, served = demo
    out_dir = os.path.dirname(served["cluster_state"])
    out = tmp_path / "rebalance.json"
    r = run_main("--config", served["rebalance_config"], "rebalance", "--cluster-state", served["cluster_state"],
                 "--source", "file", "--input", os.path.join(out_dir, "history.parquet"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    reasons = [m["reason"] for m in doc["moves"]] + list(doc["kept"].values())
    assert doc["hot"] and reasons, doc  # a hot node whose pods were weighed
    assert not any("no controller" in why for why in reasons), reasons
    assert doc["hot"] == served["rebalance"]["hot"] and doc["kept"] == served["rebalance"]["kept"]  # what the demo shows


def test_enforce_plans_the_demo_pods_from_the_plan_serve_wrote(demo, tmp_path, caplog):
    cluster, served = demo
    node = cluster.nodes[0].name
    plan_file = os.path.join(served["recommendations"], "node", f"{node}.yaml")
    annotation = json.loads(yaml.safe_load(open(plan_file))["metadata"]["annotations"]["tidewise.io/reclaim-plan"])
    cg = tmp_path / "cgroup"
    shutil.copytree(os.path.join(TWO_SOCKET, "fs", "cgroup"), cg)
    with caplog.at_level(logging.WARNING):
        r = run_main("enforce", "--once", "--dry-run", "--node", node, "--pods-from", "file", "--pods", served["pods"],
                     "--reclaim-plan", plan_file, "--sysfs-root", TWO_SOCKET, "--cgroup-root", str(cg),
                     "--no-eviction", "--plan-out", str(tmp_path / "plan.json"))
    assert r.returncode == 0, r.stderr
    assert "skipping pod" not in caplog.text and "reclaim plan refused" not in caplog.text, caplog.text
    on_node = {f"{w.namespace}/{pod}" for w in cluster.workloads for pod, at in zip(w.pod_names(), w.nodes)
               if at == node}
    alloc = json.loads((tmp_path / "plan.json").read_text())["allocation"]
    assert {p["pod"] for p in alloc["pods"]} == on_node and len(on_node) >= 2  # every pod of the node, planned
    # how much the plan lends depends on the hour of day the history ends (now: the plan must be valid for
    # enforce's clock), so at the tide's peak it may be nothing: the plan is checked, not its amount
    assert annotation["node"] == node and annotation["reclaimed_millicpu"] >= 0
    assert f"node {node}: 2 socket(s)" in r.stdout and "would write" in r.stdout  # dry-run
