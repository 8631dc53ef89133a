"""Rebalancing as a user runs it (real processes, the real `kubernetes` client, the API fake):
`tidewise rebalance` evicts only with --apply; a pod whose budget the API server refuses is
reported `refused` and stays; a budget whose status allows nothing is never asked; `serve --once
--rebalance` reads the budgets and puts the moves in its report and in decisions.json."""
from __future__ import annotations

import json

import pytest

from predictor.history import write_long
from testsupport.kube_fake import FakeApiServer
from tests.conftest import run_cli, write_kubeconfig


def pdb(name: str, app: str, min_available: int, allowed: int) -> dict:
    """A budget whose status (as its controller last wrote it) may be older than its spec."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "search"},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 4, "desiredHealthy": min_available,
                       "expectedPods": 4}}


def hot_cluster(objects: list[dict]) -> list[dict]:
    """node-0 squeezed to 12 cores (its forecast median peaks ~1.4x allocatable), an empty node-2 to move to,
    pods owned by their ReplicaSet / StatefulSet; `ads` guarded by a budget the server will enforce,
    `checkout` by one whose status already allows nothing."""
    out = []
    for o in objects:
        o = json.loads(json.dumps(o))
        if o["kind"] == "Node" and o["metadata"]["name"] == "node-0":
            o["status"]["allocatable"]["cpu"] = "12"
        if o["kind"] == "Pod":
            name = o["metadata"]["name"]
            kind = "StatefulSet" if name.startswith("catalog") else "ReplicaSet"
            o["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "uid": "u", "controller": True,
                                                 "name": name.rsplit("-", 1)[0]}]
        out.append(o)
    out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-2"},
                "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}})
    return out + [pdb("ads", "ads", 4, 1), pdb("checkout", "checkout", 1, 0)]


@pytest.fixture
def cluster(small, objects, tmp_path):
    history = tmp_path / "history.parquet"
    write_long(small[1], str(history))
    fake = FakeApiServer(hot_cluster(objects)).start()
    try:
        yield fake, ["--kubeconfig", write_kubeconfig(tmp_path / "kubeconfig", fake.url), "--source", "file",
                     "--input", str(history), "--model", "seasonal_naive_daily"]
    finally:
        fake.stop()


def pods(fake) -> set[str]:
    return {o["metadata"]["name"] for o in fake.objects.values() if o["kind"] == "Pod"}


def test_rebalance_plans_without_evicting_then_evicts_with_apply(cluster, tmp_path):
    fake, flags = cluster
    before = pods(fake)
    dry = run_cli("rebalance", *flags, "--out", str(tmp_path / "dry.json"))
    assert dry.returncode == 0, dry.stderr
    plan = json.loads((tmp_path / "dry.json").read_text())
    assert list(plan["hot"]) == ["node-0"] and plan["dry_run"] is True
    assert plan["moves"] and {m["result"] for m in plan["moves"]} == {"dry-run"}
    assert {m["destination"] for m in plan["moves"]} == {"node-2"}
    assert fake.evictions() == [] and pods(fake) == before
    assert fake.lists("poddisruptionbudgets")  # budgets were read for the pre-check
    assert plan["kept"]["node-0 search/checkout-7d9f8c6b5-a0x0q"] == \
        "disruption budget search/checkout allows no more disruptions"
    assert "hot node-0" in dry.stdout and "(dry-run)" in dry.stdout
    assert "rebalance, once: steps: 1/" in dry.stderr and "rebalance, once: steps: done in" in dry.stderr

    applied = run_cli("rebalance", *flags, "--apply", "--out", str(tmp_path / "applied.json"))
    assert applied.returncode == 0, applied.stderr
    done = {m["pod"]: m for m in json.loads((tmp_path / "applied.json").read_text())["moves"]}
    refused = done.pop("ads-7d9f8c6b5-a0x0q")
    assert refused["result"] == "refused" and "disruption budget (ads)" in refused["detail"]
    assert "ads-7d9f8c6b5-a0x0q" in pods(fake)  # the budget held
    assert done and {m["result"] for m in done.values()} == {"evicted"}
    assert set(done) == before - pods(fake)
    sent = {r.path.split("/")[-2] for r in fake.evictions()}
    assert sent == set(done) | {"ads-7d9f8c6b5-a0x0q"}  # the checkout pod was never asked for


def test_rebalance_refuses_apply_on_a_file_snapshot(cluster, tmp_path):
    _, flags = cluster
    state = tmp_path / "state.yaml"
    state.write_text("items: []\n")
    proc = run_cli("rebalance", *flags, "--cluster-state", str(state), "--apply", "--out", str(tmp_path / "p.json"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--cluster-state" in proc.stderr
    assert not (tmp_path / "p.json").exists()


def test_serve_once_with_rebalance_reports_moves_and_lists_them_in_decisions(cluster, tmp_path):
    fake, flags = cluster
    out = tmp_path / "recs"
    proc = run_cli("serve", "--once", "--rebalance", *flags, "--sink", "file", "--out", str(out),
                   "--report", str(tmp_path / "report.json"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    moves = report["rebalance"]["moves"]
    assert moves and {m["result"] for m in moves} == {"dry-run"}
    assert any(s["name"] == "rebalance" for s in report["steps"])
    decisions = json.loads((out / "decisions.json").read_text())
    assert {f"Eviction/{m['namespace']}/{m['pod']}" for m in moves} <= set(decisions)
    assert fake.evictions() == []


def test_serve_without_rebalance_reads_no_budgets(cluster, tmp_path):
    fake, flags = cluster
    proc = run_cli("serve", "--once", *flags, "--report", str(tmp_path / "report.json"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "report.json").read_text())["rebalance"] is None
    assert not fake.lists("poddisruptionbudgets") and fake.evictions() == []
