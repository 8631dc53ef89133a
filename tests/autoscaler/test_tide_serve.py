"""The tide step of the serving loop through the real `kubernetes` client against the API fake: a
night forecast lends tide nodes (labels, taints with the node's other taints kept, online pods
evicted through the Eviction API with a PodDisruptionBudget refusing one), a morning forecast hands
them back a lead time before the ramp (batch pods evicted, fewest first, rate-limited), the pool's
status validates against the TideNodePool schema, a dry run writes nothing, and a pool whose online
demand has no forecast moves nothing."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from autoscaler.input.cluster import ApiCluster
from autoscaler.output.sinks import ApiSink, DryRunSink
from autoscaler.routines.loop import FROZEN, ServingLoop
from predictor.history import history_from_frame, write_long
from tests.autoscaler.conftest import fast_settings, source_of
from testsupport.kube_fake import FakeApiServer
from tests.conftest import run_cli, write_kubeconfig

STEP = pd.Timedelta("5min")
ON, OFF, TIDE = "tide.example.com/online", "tide.example.com/offline", "tide.example.com/tide"
EVICT_ON = {"key": "tide.example.com/evict-online", "value": "true", "effect": "NoSchedule"}
EVICT_OFF = {"key": "tide.example.com/evict-offline", "value": "true", "effect": "NoSchedule"}
GPU = {"key": "gpu", "value": "true", "effect": "NoSchedule"}  # someone else's taint: kept
POOL = {"apiVersion": "tide.katalyst.kubewharf.io/v1alpha1", "kind": "TideNodePool",
        "metadata": {"name": "pool-a", "annotations": {"tidewise.io/manage": "true"}},  # opted in (serve.select)
        "spec": {"nodeConfigs": {"nodeSelector": {"pool": "a"}, "reserve": {"online": 1, "offline": 0},
                                 "onlineLabel": {"key": ON, "value": "true"},
                                 "offlineLabel": {"key": OFF, "value": "true"},
                                 "tideLabel": {"key": TIDE, "value": "true"}},
                 "evictStrategy": {"type": "Watermark", "watermark": {"evictOnlinePodTaint": EVICT_ON,
                                                                      "evictOfflinePodTaint": EVICT_OFF}}}}


def node(name, labels=(), taints=(), moved=None):
    md = {"name": name, "labels": {"pool": "a", **dict(labels)}}
    if moved:
        md["annotations"] = {"tidewise.io/tide-moved-at": moved}
    return {"apiVersion": "v1", "kind": "Node", "metadata": md, "spec": {"taints": list(taints)},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


def deployment(name, cpu, replicas):
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "shop"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}}]}}}}


def pod(name, app, on, cpu, qos="shared_cores", owner="ReplicaSet"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "labels": {"app": app},
                         "annotations": {"katalyst.kubewharf.io/qos_level": qos},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": app, "uid": app,
                                              "controller": True}]},
            "spec": {"nodeName": on, "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running"}}


HPA = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web", "namespace": "shop"},
       "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 1,
                "maxReplicas": 20, "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                    "type": "Utilization", "averageUtilization": 80}}}]}}
PDB = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "shop"},
       "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}


def history(end, with_web=True):
    """Three days of web's CPU: 8 cores 07:00-22:00 UTC (10 replicas at 800m: 4 nodes with the
    headroom), 1 core at night (2 replicas: the reserved node alone)."""
    return history_from_frame(frame(end, with_web), STEP, "test")


def frame(end, with_web=True):
    idx = pd.date_range(end - pd.Timedelta(days=3), end, freq=STEP, inclusive="left")
    hours = idx.hour + idx.minute / 60
    cpu = np.where((hours >= 7) & (hours < 22), 8.0, 1.0)
    rows = [("shop/Deployment/api/app/cpu", pd.Series(0.3, index=idx))]
    if with_web:
        rows += [("shop/Deployment/web/app/cpu", pd.Series(cpu, index=idx)),
                 ("shop/Deployment/web/app/memory", pd.Series(2.0**30, index=idx))]
    return pd.concat([pd.DataFrame({"series": sid, "timestamp": s.index, "value": s.to_numpy()}) for sid, s in rows])


def night_objects():
    return [POOL, PDB, HPA, deployment("web", "1000m", 2), deployment("api", "500m", 1),
            node("n0"), node("n1", taints=[GPU]), node("n2"), node("n3"),
            pod("web-0", "web", "n1", "1000m"), pod("web-1", "web", "n2", "1000m"),
            pod("api-0", "api", "n2", "500m"), pod("ds-0", "logs", "n1", "100m", owner="DaemonSet")]


def morning_objects():
    lent = dict(labels={OFF: "true", TIDE: "true"}, taints=[EVICT_ON], moved="2026-11-01T23:00:00Z")
    return [POOL, PDB, HPA, deployment("web", "1000m", 2), deployment("api", "500m", 1),
            node("n0", labels={ON: "true"}), node("n1", **lent), node("n2", **lent), node("n3", **lent),
            pod("web-0", "web", "n0", "1000m"), pod("web-1", "web", "n0", "1000m"), pod("api-0", "api", "n0", "500m"),
            pod("job-a", "batch", "n1", "2", qos="reclaimed_cores", owner="Job"),
            pod("job-b", "batch", "n1", "2", qos="reclaimed_cores", owner="Job"),
            pod("job-c", "batch", "n2", "2", qos="reclaimed_cores", owner="Job")]


@pytest.fixture
def api(api_factory):
    return api_factory


def run(kube, now, hist, apply=True, max_moves=3):
    s = fast_settings()
    s.reclaim.enabled = False
    s.tide.enabled = True
    s.tide.max_moves = max_moves
    s.loop.apply = apply
    loop = ServingLoop(s, source_of(hist), ApiCluster(kube, ("TideNodePool", "PodDisruptionBudget")),
                       ApiSink(kube) if apply else DryRunSink(), clock=lambda: now)
    return loop.run_once()


def labels(fake, name):
    return fake.get("Node", name)["metadata"].get("labels") or {}


def taints(fake, name):
    return fake.get("Node", name).get("spec", {}).get("taints") or []


def test_a_night_forecast_lends_tide_nodes_and_drains_their_online_pods(api):
    fake, kube = api(night_objects())
    now = pd.Timestamp("2026-11-01T23:00:00Z")
    rep = run(kube, now, history(now))
    assert rep.outcome == "ok", rep.reason
    (entry,) = rep.sections["tide"].pools
    assert sorted(m["node"] for m in entry["moves"]) == ["n1", "n2", "n3"]
    assert all(m["action"] == "lend" for m in entry["moves"])
    for n in ("n1", "n2", "n3"):
        assert labels(fake, n)[OFF] == "true" and labels(fake, n)[TIDE] == "true" and ON not in labels(fake, n)
        assert EVICT_ON in taints(fake, n) and EVICT_OFF not in taints(fake, n)
        assert fake.get("Node", n)["metadata"]["annotations"]["tidewise.io/tide-moved-at"] == "2026-11-01T23:00:00Z"
    assert GPU in taints(fake, "n1")  # the merge patch replaced the list: the other taint was carried over
    assert labels(fake, "n0")[ON] == "true" and OFF not in labels(fake, "n0") and not taints(fake, "n0")
    results = {e["pod"]: e["result"] for e in entry["evictions"]}
    # web-0 leaves; web-1 would break web's budget (minAvailable 1): the API server refuses it
    assert results == {"web-0": "evicted", "web-1": "refused", "api-0": "evicted"}
    assert len(fake.evictions()) == 3
    assert {o["metadata"]["name"] for o in fake.objects.values() if o["kind"] == "Pod"} == {"web-1", "ds-0"}
    status = fake.get("TideNodePool", "pool-a")["status"]  # the fake validated it against the CRD schema
    assert status == {"reserveNodes": {"onlineNodes": ["n0"], "offlineNodes": []},
                      "tideNodes": {"nodes": ["n1", "n2", "n3"]}}
    assert not rep.problems()


def test_no_node_is_lent_within_the_hold_after_a_hand_back(api):
    # n3 came back online 20 minutes ago: the night forecast would lend n1-n3, serve holds for 1h
    objects = [o if o["metadata"]["name"] != "n3" else node("n3", labels={ON: "true"}, moved="2026-11-01T22:40:00Z")
               for o in night_objects()]
    fake, kube = api(objects)
    now = pd.Timestamp("2026-11-01T23:00:00Z")
    (entry,) = run(kube, now, history(now)).sections["tide"].pools
    assert entry["moves"] == [] and "holding" in entry["summary"]
    assert not fake.evictions()
    (entry,) = run(kube, now + pd.Timedelta("41min"), history(now + pd.Timedelta("41min"))).sections["tide"].pools
    assert sorted(m["node"] for m in entry["moves"]) == ["n1", "n2"]  # the hold is over; n3 is inside its dwell


def test_a_dry_run_reports_the_same_plan_and_writes_nothing(api):
    fake, kube = api(night_objects())
    now = pd.Timestamp("2026-11-01T23:00:00Z")
    rep = run(kube, now, history(now), apply=False)
    (entry,) = rep.sections["tide"].pools
    assert sorted(m["node"] for m in entry["moves"]) == ["n1", "n2", "n3"]
    assert {e["result"] for e in entry["evictions"]} == {"dry-run"}
    assert any(p["node"] == "n1" and EVICT_ON in p["patch"]["spec"]["taints"] for p in entry["patches"])
    assert entry["status"]["tideNodes"]["nodes"] == ["n1", "n2", "n3"]
    assert fake.writes() == [] and fake.evictions() == []


def test_the_morning_forecast_hands_nodes_back_a_lead_time_early_batch_pods_first(api):
    fake, kube = api(morning_objects())
    early = pd.Timestamp("2026-11-02T05:30:00Z")  # the 07:00 ramp is 1.5 h away: more than the 1 h lead
    rep = run(kube, early, history(early), max_moves=2)
    assert rep.sections["tide"].pools[0]["moves"] == [] and not fake.evictions()
    assert all(labels(fake, n)[OFF] == "true" for n in ("n1", "n2", "n3"))
    now = pd.Timestamp("2026-11-02T06:05:00Z")  # 55 min before the ramp: inside the lead time
    rep = run(kube, now, history(now), max_moves=2)
    (entry,) = rep.sections["tide"].pools
    # the ramp needs 4 nodes: 3 tide nodes back, 2 this run (the rate limit), fewest batch pods first
    assert [(m["node"], m["action"]) for m in entry["moves"]] == [("n3", "return"), ("n2", "return")]
    assert entry["held"]["n1"].startswith("return: rate limit")
    for n in ("n2", "n3"):
        assert labels(fake, n)[ON] == "true" and OFF not in labels(fake, n)
        assert EVICT_OFF in taints(fake, n) and EVICT_ON not in taints(fake, n)
    assert labels(fake, "n1")[OFF] == "true" and EVICT_ON in taints(fake, "n1")
    assert [e["pod"] for e in entry["evictions"]] == ["job-c"]
    assert [r.path.rsplit("/", 2)[-2] for r in fake.evictions()] == ["job-c"]


def test_a_pool_without_a_forecast_of_its_online_demand_moves_nothing(api):
    fake, kube = api(night_objects())
    now = pd.Timestamp("2026-11-01T23:00:00Z")
    rep = run(kube, now, history(now, with_web=False))  # web is under an HPA but has no history
    assert rep.sections["tide"].pools == [] and "no cpu forecast" in rep.skipped["TideNodePool/pool-a"]
    assert not [r for r in fake.writes() if "/nodes/" in r.path or "tidenodepools" in r.path]
    assert fake.evictions() == []


def test_stale_history_freezes_the_run_before_any_move(api):
    fake, kube = api(night_objects())
    now = pd.Timestamp("2026-11-01T23:00:00Z")
    rep = run(kube, now, history(now - pd.Timedelta("2h")))
    assert rep.outcome == FROZEN and "tide" not in rep.sections
    assert fake.writes() == [] and fake.evictions() == []


def test_a_node_patch_that_conflicts_leaves_that_node_undrained(api):
    fake, kube = api(night_objects())
    fake.fail("PATCH", r"/api/v1/nodes/n1$", 409, times=5)  # someone changed n1 since it was read
    now = pd.Timestamp("2026-11-01T23:00:00Z")
    rep = run(kube, now, history(now))
    (entry,) = rep.sections["tide"].pools
    assert entry["failed_moves"] == ["n1"] and OFF not in labels(fake, "n1")
    assert "web-0" not in {e["pod"] for e in entry["evictions"]}  # no eviction before its node is tainted
    assert not [r for r in fake.evictions() if r.path.endswith("/pods/web-0/eviction")]
    assert [r.path.rsplit("/", 2)[-2] for r in fake.evictions()] == ["api-0", "web-1"]  # n2's drain went on
    assert any(p.startswith("Node/n1#tide: failed") for p in rep.problems())


def test_serve_tide_is_dry_run_unless_applied_and_refuses_a_bad_setting(tmp_path):
    fake = FakeApiServer(night_objects()).start()
    try:
        hist = tmp_path / "history.parquet"
        write_long(frame(pd.Timestamp("2026-11-01T23:00:00Z")), str(hist))
        cmd = ["serve", "--once", "--tide", "--kubeconfig", write_kubeconfig(tmp_path / "kubeconfig", fake.url),
               "--source", "file", "--input", str(hist), "--model", "seasonal_naive_daily",
               "--report", str(tmp_path / "report.json")]
        proc = run_cli(*cmd)
        assert proc.returncode == 0, proc.stderr
        report = yaml.safe_load((tmp_path / "report.json").read_text())
        # the default rate limit: 2 nodes a run, the fewest online pods first (n3: none, n1: one)
        assert [m["node"] for m in report["tide"][0]["moves"]] == ["n3", "n1"]
        assert fake.writes() == [] and fake.evictions() == []
        assert fake.lists("tidenodepools") and fake.lists("poddisruptionbudgets")
        proc = run_cli(*cmd, "--apply", "--no-leader-election")
        assert proc.returncode == 0, proc.stderr
        assert labels(fake, "n3")[OFF] == "true" and fake.evictions()
        bad = tmp_path / "bad.yaml"
        bad.write_text("serve:\n  tide:\n    lead: soon\n")
        proc = run_cli("--config", str(bad), *cmd)
        assert proc.returncode == 2 and "serve.tide.lead" in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    finally:
        fake.stop()


def test_every_move_and_its_reason_is_in_the_review_folders_decisions(api, tmp_path):
    import json

    from autoscaler.output.sinks import FileSink

    fake, kube = api(night_objects())
    now = pd.Timestamp("2026-11-01T23:00:00Z")
    s = fast_settings()
    s.reclaim.enabled, s.tide.enabled = False, True
    loop = ServingLoop(s, source_of(history(now)), ApiCluster(kube, ("TideNodePool", "PodDisruptionBudget")),
                       FileSink(str(tmp_path)), clock=lambda: now)
    assert loop.run_once().outcome == "ok"
    entry = json.loads((tmp_path / "decisions.json").read_text())["TideNodePool/pool-a"]
    assert [(m["node"], m["action"]) for m in entry["moves"]] == [("n3", "lend"), ("n1", "lend")]
    assert all("forecast needs 0 tide node(s) online over lead + min_dwell" in m["reason"] for m in entry["moves"])
    assert entry["held"]["n2"].startswith("lend: rate limit")
    assert fake.writes() == [] and fake.evictions() == []  # a review folder is not the cluster


def test_pods_pending_on_no_node_count_as_demand_on_the_pool(api):
    objs = night_objects()
    for i in range(1, 7):  # six more api pods waiting for room: 3.5 cores of api in all
        p = pod(f"api-{i}", "api", None, "500m")
        del p["spec"]["nodeName"]
        p["status"]["phase"] = "Pending"
        objs.append(p)
    fake, kube = api(objs)
    now = pd.Timestamp("2026-11-01T23:00:00Z")
    (entry,) = run(kube, now, history(now)).sections["tide"].pools
    # 2 x 1000m web + 7 x 500m api + 100m daemon = 5.6 cores x 1.25 headroom: 2 nodes, so one tide node stays
    assert entry["needed_nodes"][0] == 2
    assert [m["node"] for m in entry["moves"]] == ["n3", "n1"]


def test_a_node_two_pools_select_is_moved_by_one_only(api):
    other = {**POOL, "metadata": {**POOL["metadata"], "name": "pool-b"},
             "spec": {**POOL["spec"], "nodeConfigs": {**POOL["spec"]["nodeConfigs"], "nodeSelector": {"pool": "a"},
                                                      "reserve": {"online": 0}}}}
    fake, kube = api(night_objects() + [other])
    now = pd.Timestamp("2026-11-01T23:00:00Z")
    rep = run(kube, now, history(now), apply=False)
    assert [e["pool"] for e in rep.sections["tide"].pools] == ["pool-a"]  # pool-b: every node it selects is pool-a's
    assert "no reserved-online or tide node" in rep.skipped["TideNodePool/pool-b"]


def test_the_kill_switch_stops_every_tide_move(api, tmp_path):
    fake, kube = api(night_objects())
    switch = tmp_path / "switch"
    switch.write_text("stop\n")
    now = pd.Timestamp("2026-11-01T23:00:00Z")
    s = fast_settings()
    s.reclaim.enabled, s.tide.enabled, s.loop.apply = False, True, True
    s.guardrails.kill_switch_file = str(switch)
    loop = ServingLoop(s, source_of(history(now)), ApiCluster(kube, ("TideNodePool", "PodDisruptionBudget")),
                       ApiSink(kube), clock=lambda: now)
    rep = loop.run_once()
    assert rep.outcome == "killed" and rep.sections["tide"].pools == []
    assert fake.writes() == [] and fake.evictions() == []
