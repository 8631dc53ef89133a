"""What serve may do to the cluster, by mode. In review (no --apply) `tidewise serve` only reads, and
kustomize/review grants it those reads and nothing more. With --apply its real Node writes, recorded
from `serve --once --apply` against the API fake (the reclaim-plan and node-forecast annotations, the
reclaimed extended resources in status; with --tide a TideNodePool's labels and taints and the
tide-moved-at annotation), pass the ValidatingAdmissionPolicies of deploy/apply and deploy/tide, and
every other change of a Node is refused: taints, unschedulable, other resources, other labels, other
annotations. The policies' CEL runs in cel-python as tests/node_enforcer/test_admission_policy.py runs
the agent's: the API server's own type-checking of the policies is what this does not check."""
from __future__ import annotations

import copy
import os
from typing import Any

import celpy
import pytest
import yaml

from contracts.annotations import FORECAST_ANNOTATION, PLAN_ANNOTATION, TIDE_MOVED_ANNOTATION
from contracts.qos import RECLAIMED_MEMORY, RECLAIMED_MILLICPU
from predictor.history import write_long
from testsupport.kube_fake import FakeApiServer
from testsupport.kube_objects import merge
from tests.autoscaler.conftest import ROOT
from tests.autoscaler.test_tide_serve import EVICT_OFF, EVICT_ON, GPU, OFF, ON, POOL, TIDE, frame, night_objects
from tests.conftest import run_cli, write_kubeconfig
from tests.node_enforcer.test_admission_policy import _eval
from tests.test_kustomize import rendered, serve_rules
from tests.test_rbac import rule_of

SERVE = "system:serviceaccount:tidewise:tidewise-serve"
FILES = ("deploy/apply/serve-write-rbac.yaml", "deploy/tide/serve-tide-policy.yaml")
WRITES, LABELS, TIDE_POLICY = "tidewise-serve-node-writes", "tidewise-serve-node-labels", "tidewise-serve-tide-nodes"
Obj = dict[str, Any]


def _objects() -> dict[tuple[str, str], Obj]:
    out = {}
    for path in FILES:
        with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
            out.update({(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(fh) if d})
    return out


def admit(policy_name: str, old: Obj, new: Obj, sub: str = "", params: list[Obj] | None = None,
          user: str = SERVE) -> str:
    """'allowed', 'not applicable' or 'denied: <message>' for an UPDATE of a Node from `old` to `new`
    (`sub`: "" or "status"), as the API server answers with this policy, its binding and `params`
    (the TideNodePools)."""
    docs = _objects()
    policy = docs[("ValidatingAdmissionPolicy", policy_name)]
    binding = next(d for (k, _), d in docs.items() if k == "ValidatingAdmissionPolicyBinding"
                   and d["spec"]["policyName"] == policy_name)
    assert policy["spec"]["failurePolicy"] == "Fail" and binding["spec"]["validationActions"] == ["Deny"]
    req = {"userInfo": {"username": user}, "resource": {"group": "", "version": "v1", "resource": "nodes"},
           "subResource": sub, "operation": "UPDATE", "name": new["metadata"]["name"], "namespace": ""}
    resource = "nodes" + (f"/{sub}" if sub else "")
    if not any("" in r["apiGroups"] and resource in r["resources"] and "UPDATE" in r["operations"]
               for r in policy["spec"]["matchConstraints"]["resourceRules"]):
        return "not applicable"
    # an API server's Node always has metadata, spec and status, if empty
    objs = [dict({"spec": {}, "status": {}}, **o) for o in (new, old)]
    base = {"request": celpy.json_to_cel(req), "object": celpy.json_to_cel(objs[0]),
            "oldObject": celpy.json_to_cel(objs[1])}
    if not all(bool(_eval(c["expression"], base)) for c in policy["spec"]["matchConditions"]):
        return "not applicable"
    found: list[Any] = [None]
    if policy["spec"].get("paramKind"):
        assert policy["spec"]["paramKind"] == {"apiVersion": POOL["apiVersion"], "kind": "TideNodePool"}
        ref = binding["spec"]["paramRef"]
        assert ref["selector"] == {}  # every pool
        found = list(params or [])
        if not found:
            return "denied: no params" if ref["parameterNotFoundAction"] == "Deny" else "allowed"
    for param in found:
        act = dict(base, params=celpy.json_to_cel(param))
        # the variables as CEL values: json_to_cel would read a CEL bool back as an int
        variables = celpy.celtypes.MapType()
        for v in policy["spec"].get("variables", []):
            variables[celpy.celtypes.StringType(v["name"])] = _eval(v["expression"], dict(act, variables=variables))
        act["variables"] = variables
        for check in policy["spec"]["validations"]:
            try:
                ok = _eval(check["expression"], act)
            except celpy.CELEvalError as exc:  # failurePolicy Fail
                return f"denied: error {exc}"
            if isinstance(ok, celpy.CELEvalError) or not bool(ok):
                return f"denied: {check['message']}"
    return "allowed"


def node_writes(fake: FakeApiServer, before: dict[str, Obj]) -> list[tuple[Obj, Obj, str]]:
    """(old, new, subresource) of every Node patch the fake received, replayed in order from `before`
    as the API server applies a merge patch (the fake's own rules: status patches touch status only)."""
    state = copy.deepcopy(before)
    out = []
    for r in fake.requests:
        if r.method != "PATCH" or not r.path.startswith("/api/v1/nodes/"):
            continue
        name, sub = r.path.split("/")[4], "status" if r.path.endswith("/status") else ""
        body = copy.deepcopy(r.body)
        (body.get("metadata") or {}).pop("resourceVersion", None)
        old = state[name]
        new = dict(old, status=merge(old.get("status"), body.get("status") or {})) if sub else \
            merge(old, {k: v for k, v in body.items() if k != "status"})
        out.append((old, new, sub))
        state[name] = new
    return out


@pytest.fixture
def cluster(small, objects, tmp_path):
    history = tmp_path / "history.parquet"
    write_long(small[1], str(history))
    fake = FakeApiServer(objects).start()
    try:
        cmd = ["serve", "--once", "--kubeconfig", write_kubeconfig(tmp_path / "kubeconfig", fake.url),
               "--source", "file", "--input", str(history), "--model", "seasonal_naive_daily"]
        yield fake, cmd
    finally:
        fake.stop()


def test_review_mode_only_reads_and_the_review_install_grants_only_that(cluster):
    fake, cmd = cluster
    for flags in ((), ("--tide", "--rebalance")):
        fake.requests.clear()
        proc = run_cli(*cmd, *flags)
        assert proc.returncode == 0, proc.stderr
        assert fake.requests and {r.method for r in fake.requests} == {"GET"}, flags
    granted = serve_rules(rendered("kustomize/review"))
    assert {v for _, _, v in granted} <= {"get", "list", "watch"}
    fake.requests.clear()
    assert run_cli(*cmd).returncode == 0
    assert {rule_of(r.method, r.path, r.query) for r in fake.requests} <= granted


def test_serves_real_node_writes_pass_the_policies(cluster):
    fake, cmd = cluster
    before = copy.deepcopy(fake.objects_of("Node"))
    proc = run_cli(*cmd, "--apply")
    assert proc.returncode == 0, proc.stderr
    writes = node_writes(fake, before)
    annotations = {k for old, new, sub in writes if not sub for k in new["metadata"]["annotations"]
                   if old["metadata"].get("annotations", {}).get(k) != new["metadata"]["annotations"][k]}
    resources = {k for old, new, sub in writes if sub for k in new["status"]["allocatable"]
                 if old["status"].get("allocatable", {}).get(k) != new["status"]["allocatable"][k]}
    # what serve writes on a Node: its two annotations and the two extended resources, nothing else
    assert annotations == {PLAN_ANNOTATION, FORECAST_ANNOTATION}
    assert resources == {RECLAIMED_MILLICPU, RECLAIMED_MEMORY}
    for old, new, sub in writes:
        for policy in (WRITES, LABELS):
            assert admit(policy, old, new, sub) == "allowed", (policy, new["metadata"]["name"], sub)


def _node(**extra: Any) -> Obj:
    n = {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": "n1", "labels": {"pool": "a", "zone": "z1"},
                      "annotations": {"team": "infra", PLAN_ANNOTATION: "{}"}},
         "spec": {"taints": [GPU], "podCIDR": "10.0.1.0/24"},
         "status": {"allocatable": {"cpu": "4", "memory": "16Gi", RECLAIMED_MILLICPU: "0"},
                    "capacity": {"cpu": "4", "memory": "16Gi", RECLAIMED_MILLICPU: "0"},
                    "conditions": [{"type": "Ready", "status": "True"}]}}
    return merge(n, extra)


@pytest.mark.parametrize("change,sub,policy,says", [
    ({"spec": {"taints": [GPU, {"key": "x", "effect": "NoExecute"}]}}, "", LABELS, "may not change a Node's taints"),
    ({"spec": {"taints": None}}, "", LABELS, "may not change a Node's taints"),
    ({"spec": {"unschedulable": True}}, "", WRITES, "may not change a Node's spec"),
    ({"spec": {"podCIDR": "10.9.0.0/24"}}, "", WRITES, "may not change a Node's spec"),
    ({"status": {"allocatable": {"cpu": "64"}}}, "status", WRITES, "only the reclaimed extended resources"),
    ({"status": {"capacity": {"nvidia.com/gpu": "8"}}}, "status", WRITES, "only the reclaimed extended resources"),
    ({"status": {"allocatable": {"memory": None}}}, "status", WRITES, "only the reclaimed extended resources"),
    ({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, "status", WRITES, "conditions"),
    ({"metadata": {"labels": {"zone": "z2"}}}, "", LABELS, "may not change a Node's labels"),
    ({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}, "", LABELS, "labels"),
    ({"metadata": {"annotations": {"team": "ours"}}}, "", WRITES, "only its own annotations"),
    ({"metadata": {"annotations": {"team": None}}}, "", WRITES, "only its own annotations"),
    ({"metadata": {"annotations": {"node.alpha.kubernetes.io/ttl": "0"}}}, "", WRITES, "only its own annotations"),
    ({"metadata": {"finalizers": ["example.com/hold"]}}, "", WRITES, "finalizers or owners"),
])
def test_every_other_change_of_a_node_is_refused(change, sub, policy, says):
    old = _node()
    got = admit(policy, old, merge(old, change), sub)
    assert got.startswith("denied: ") and says in got, got
    # the same change by another account is not these policies' business
    assert admit(policy, old, merge(old, change), sub, user="system:node:n1") == "not applicable"


def test_serves_own_changes_are_admitted():
    old = _node()
    for change, sub in (({"metadata": {"annotations": {PLAN_ANNOTATION: '{"v": 2}', FORECAST_ANNOTATION: "{}",
                                                       TIDE_MOVED_ANNOTATION: "2026-11-01T23:00:00Z"}}}, ""),
                        ({"metadata": {"annotations": {PLAN_ANNOTATION: None}}}, ""),
                        ({"status": {"allocatable": {RECLAIMED_MILLICPU: "1500", RECLAIMED_MEMORY: "2147483648"},
                                     "capacity": {RECLAIMED_MILLICPU: "1500", RECLAIMED_MEMORY: "2147483648"}}},
                         "status")):
        for policy in (WRITES, LABELS):
            assert admit(policy, old, merge(old, change), sub) == "allowed", (policy, change)


@pytest.fixture
def tide_writes(tmp_path):
    """serve --once --tide --apply on a night: the real patches of the pool's nodes."""
    import pandas as pd

    fake = FakeApiServer(night_objects()).start()
    try:
        hist = tmp_path / "history.parquet"
        write_long(frame(pd.Timestamp("2026-11-01T23:00:00Z")), str(hist))
        before = copy.deepcopy(fake.objects_of("Node"))
        proc = run_cli("serve", "--once", "--tide", "--apply", "--kubeconfig",
                       write_kubeconfig(tmp_path / "kubeconfig", fake.url), "--source", "file", "--input", str(hist),
                       "--model", "seasonal_naive_daily")
        assert proc.returncode == 0, proc.stderr
        yield node_writes(fake, before)
    finally:
        fake.stop()


def _pool(name: str, selector: dict[str, str]) -> Obj:
    return merge(POOL, {"metadata": {"name": name}, "spec": {"nodeConfigs": {"nodeSelector": selector}}})


def test_serve_tide_writes_pass_the_tide_policy_and_only_it(tide_writes):
    assert tide_writes
    moved = [new for old, new, _ in tide_writes if new["metadata"].get("annotations", {}).get(TIDE_MOVED_ANNOTATION)]
    taints = {t["key"] for _, new, _ in tide_writes for t in new["spec"].get("taints", [])}
    assert moved and {EVICT_ON["key"], EVICT_OFF["key"], GPU["key"]} <= taints  # lent and online tide nodes
    assert {ON, OFF, TIDE} <= {k for _, new, _ in tide_writes for k in new["metadata"]["labels"]}
    for old, new, sub in tide_writes:
        name = new["metadata"]["name"]
        assert admit(WRITES, old, new, sub) == "allowed", name
        assert admit(TIDE_POLICY, old, new, sub, [POOL]) == "allowed", name
        # a pool that selects the node too (another pool over the same nodes, same labels) admits it
        assert admit(TIDE_POLICY, old, new, sub, [POOL, _pool("pool-z", {"pool": "a"})]) == "allowed", name
        # without deploy/tide, serve may change no label and no taint
        assert admit(LABELS, old, new, sub).startswith("denied: serve may not change a Node's"), name


def test_the_tide_policy_refuses_what_no_pool_owns(tide_writes):
    old, new, sub = next((o, n, s) for o, n, s in tide_writes if n["metadata"]["name"] == "n1")
    assert admit(TIDE_POLICY, old, new, sub, [POOL]) == "allowed"
    outside = merge(old, {"metadata": {"labels": {"pool": "b"}}})  # a node the pool does not select
    got = admit(TIDE_POLICY, outside, merge(new, {"metadata": {"labels": {"pool": "b"}}}), sub, [POOL])
    assert got.startswith("denied: serve may change labels and taints only on the nodes"), got
    cases = [
        ({"metadata": {"labels": {OFF: "yes"}}}, "to the pool's value"),  # the pool's label, another value
        ({"metadata": {"labels": {"zone": "z9"}}}, "onlineLabel, offlineLabel and tideLabel"),
        ({"metadata": {"labels": {"pool": None}}}, "onlineLabel, offlineLabel and tideLabel"),
        ({"spec": {"taints": [t for t in new["spec"]["taints"] if t["key"] != GPU["key"]]}}, "every other taint"),
        ({"spec": {"taints": new["spec"]["taints"] + [{"key": "x", "effect": "NoExecute"}]}}, "every other taint"),
        ({"spec": {"taints": [dict(t, value="no") if t["key"] == EVICT_ON["key"] else t for t in new["spec"]["taints"]]}},
         "with the pool's value"),
    ]
    for change, says in cases:
        got = admit(TIDE_POLICY, old, merge(new, change), sub, [POOL])
        assert got.startswith("denied: ") and says in got, (change, got)
    # fail closed: no pool at all, and pools over other nodes, refuse a tide write
    assert admit(TIDE_POLICY, old, new, sub, []) == "denied: no params"
    got = admit(TIDE_POLICY, old, new, sub, [POOL, _pool("pool-b", {"pool": "b"})])
    assert got.startswith("denied: serve may change labels and taints only on the nodes every TideNodePool selects")
    # an annotation-only write needs no pool's word
    plan = merge(old, {"metadata": {"annotations": {PLAN_ANNOTATION: "{}"}}})
    assert admit(TIDE_POLICY, old, plan, "", [POOL, _pool("pool-b", {"pool": "b"})]) == "allowed"


def test_the_policies_cover_every_node_write_serve_is_granted():
    """Every Node write of the write ClusterRole is matched by each policy, for serve's account as the
    Deployment runs it."""
    docs = _objects()
    role = docs[("ClusterRole", "tidewise-serve-write")]
    node_writes_granted = {r for rule in role["rules"] if rule["apiGroups"] == [""] for r in rule["resources"]}
    assert node_writes_granted == {"nodes", "nodes/status"}
    for name in (WRITES, LABELS, TIDE_POLICY):
        policy = docs[("ValidatingAdmissionPolicy", name)]
        covered = {r for rule in policy["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]}
        assert node_writes_granted <= covered, name
        assert [c["expression"] for c in policy["spec"]["matchConditions"]] == \
            [f"request.userInfo.username == '{SERVE}'"], name
