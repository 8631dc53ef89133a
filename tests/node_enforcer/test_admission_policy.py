"""The ValidatingAdmissionPolicies of deploy/enforcer-daemonset.yaml, evaluated: the exact CEL
expressions shipped, run by a real CEL implementation (`cel-python`), in the order and with the
variables the API server uses (matchConstraints, then matchConditions, then one evaluation per
param, `variables` composed, every validation true, an error or a missing param denied as
`failurePolicy: Fail` / `parameterNotFoundAction: Deny` say). Not a kube-apiserver (none can be
installed here): what this does not check is the API server's own type-checking of the policy."""
from __future__ import annotations

import os
from typing import Any

import celpy
import pytest
import yaml

from tests.node_enforcer.conftest import ROOT, make_pod_obj

MANIFEST = os.path.join(ROOT, "deploy", "enforcer-daemonset.yaml")
AGENT = "system:serviceaccount:tidewise:tidewise-enforcer"
SERVE = "system:serviceaccount:tidewise:tidewise-serve"
NODE_KEY = "authentication.kubernetes.io/node-name"
CEL = celpy.Environment()


def _docs() -> dict[tuple[str, str], dict[str, Any]]:
    with open(MANIFEST, encoding="utf-8") as fh:
        return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(fh) if d}


def _eval(expression: str, activation: dict[str, Any]) -> Any:
    return CEL.program(CEL.compile(expression)).evaluate(activation)


def _matches(policy: dict[str, Any], req: dict[str, Any]) -> bool:
    res = req["resource"]
    name = res["resource"] + (f"/{req['subResource']}" if req.get("subResource") else "")
    return any(res["group"] in rule["apiGroups"] and name in rule["resources"] and req["operation"] in rule["operations"]
               for rule in policy["spec"]["matchConstraints"]["resourceRules"])


def admit(policy_name: str, req: dict[str, Any], obj: Any, pods: list[dict[str, Any]] = ()) -> str:
    """'allowed', 'not applicable' or 'denied: <message>', as the API server would answer."""
    docs = _docs()
    policy = docs[("ValidatingAdmissionPolicy", policy_name)]
    binding = next(d for (k, _), d in docs.items() if k == "ValidatingAdmissionPolicyBinding"
                   and d["spec"]["policyName"] == policy_name)
    assert policy["spec"]["failurePolicy"] == "Fail" and binding["spec"]["validationActions"] == ["Deny"]
    base = {"request": celpy.json_to_cel(req), "object": celpy.json_to_cel(obj)}
    if not _matches(policy, req) or not all(bool(_eval(c["expression"], base))
                                            for c in policy["spec"].get("matchConditions", [])):
        return "not applicable"
    params: list[Any] = [None]
    if policy["spec"].get("paramKind"):
        ref = binding["spec"]["paramRef"]
        assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "Pod"} and ref["selector"] == {}
        ns = ref.get("namespace") or req["namespace"]
        params = [p for p in pods if p["metadata"]["namespace"] == ns]
        if not params:
            return "denied: no params" if ref["parameterNotFoundAction"] == "Deny" else "allowed"
    for param in params:
        act = dict(base, params=celpy.json_to_cel(param))
        variables: dict[str, Any] = {}
        for v in policy["spec"].get("variables", []):
            variables[v["name"]] = _eval(v["expression"], dict(act, variables=celpy.json_to_cel(variables)))
        act["variables"] = celpy.json_to_cel(variables)
        for check in policy["spec"]["validations"]:
            try:
                ok = _eval(check["expression"], act)
            except celpy.CELEvalError as exc:  # failurePolicy Fail
                return f"denied: error {exc}"
            if isinstance(ok, celpy.CELEvalError) or not bool(ok):
                return f"denied: {check['message']}"
    return "allowed"


def _request(user: str, node: str | None, group: str, resource: str, sub: str, op: str, name: str,
             namespace: str = "") -> dict[str, Any]:
    info: dict[str, Any] = {"username": user}
    if node is not None:
        info["extra"] = {NODE_KEY: [node], "authentication.kubernetes.io/pod-name": ["tidewise-enforcer-x"]}
    return {"userInfo": info, "resource": {"group": group, "version": "v1", "resource": resource},
            "subResource": sub, "operation": op, "name": name, "namespace": namespace}


def _cnr(name: str) -> dict[str, Any]:
    return {"apiVersion": "node.katalyst.kubewharf.io/v1alpha1", "kind": "CustomNodeResource",
            "metadata": {"name": name}, "status": {}}


def cnr_write(user: str, node: str | None, target: str, op: str = "UPDATE", sub: str = "status") -> str:
    req = _request(user, node, "node.katalyst.kubewharf.io", "customnoderesources", sub, op, target)
    return admit("tidewise-enforcer-own-cnr", req, None if op == "DELETE" else _cnr(target))


def test_the_agent_writes_only_its_own_nodes_customnoderesource():
    assert cnr_write(AGENT, "n1", "n1") == "allowed"
    assert cnr_write(AGENT, "n1", "n1", op="CREATE", sub="") == "allowed"
    assert cnr_write(AGENT, "n1", "n2") == "denied: a node agent may create and patch only its own node's CustomNodeResource"
    assert cnr_write(AGENT, "n1", "n2", op="CREATE", sub="").startswith("denied: a node agent may")
    assert cnr_write(AGENT, "n1", "n1", op="DELETE", sub="").startswith("denied: ")
    # a token that names no node (a legacy Secret token, an old cluster): fail closed
    assert cnr_write(AGENT, None, "n1").startswith("denied: the node agent's token names no node")
    # other accounts are not this policy's business (serve writes CNR status with serve.reclaim.write_cnr)
    assert cnr_write(SERVE, None, "n2") == "not applicable"


PODS = [make_pod_obj("mine", ns="batch", node="n1"), make_pod_obj("theirs", ns="batch", node="n2"),
        make_pod_obj("web", ns="shop", node="n2")]
PENDING = make_pod_obj("pending", ns="batch")
del PENDING["spec"]["nodeName"]


def evict(user: str, node: str | None, namespace: str, name: str, pods=PODS + [PENDING]) -> str:
    req = _request(user, node, "", "pods", "eviction", "CREATE", name, namespace)
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    return admit("tidewise-enforcer-own-evictions", req, body, pods)


def test_the_agent_evicts_only_pods_on_its_own_node():
    assert evict(AGENT, "n1", "batch", "mine") == "allowed"
    assert evict(AGENT, "n1", "batch", "theirs") == "denied: a node agent may evict only pods on its own node"
    assert evict(AGENT, "n2", "batch", "theirs") == "allowed"  # that pod's own agent
    assert evict(AGENT, "n1", "shop", "web").startswith("denied: a node agent may evict only")
    assert evict(AGENT, "n1", "batch", "pending").startswith("denied: a node agent may evict only")  # on no node
    assert evict(AGENT, None, "batch", "mine").startswith("denied: the node agent's token names no node")
    assert evict(AGENT, "n1", "empty", "ghost") == "denied: no params"
    # a pod that does not exist: nothing to compare, the Eviction API answers 404 itself
    assert evict(AGENT, "n1", "batch", "ghost") == "allowed"
    assert evict(SERVE, None, "batch", "theirs") == "not applicable"  # serve's tide drains and rebalancing


@pytest.mark.parametrize("name", ["tidewise-enforcer-own-cnr", "tidewise-enforcer-own-evictions"])
def test_the_policy_matches_the_agents_service_account_and_its_rbac(name):
    """The username in matchConditions is the DaemonSet's account, and the policy covers every write the
    agent's ClusterRole grants on that resource."""
    docs = _docs()
    ds = docs[("DaemonSet", "tidewise-enforcer")]
    sa = docs[("ServiceAccount", ds["spec"]["template"]["spec"]["serviceAccountName"])]
    user = f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"
    policy = docs[("ValidatingAdmissionPolicy", name)]
    assert all(c["expression"] == f"request.userInfo.username == '{user}'" for c in policy["spec"]["matchConditions"])
    covered = {(g, r) for rule in policy["spec"]["matchConstraints"]["resourceRules"]
               for g in rule["apiGroups"] for r in rule["resources"]}
    writes = {(g, r) for rule in docs[("ClusterRole", "tidewise-enforcer")]["rules"]
              for g in rule["apiGroups"] for r in rule["resources"] if set(rule["verbs"]) - {"get", "list", "watch"}}
    group = {"tidewise-enforcer-own-cnr": "node.katalyst.kubewharf.io", "tidewise-enforcer-own-evictions": ""}[name]
    assert {w for w in writes if w[0] == group} <= covered
