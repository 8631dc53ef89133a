"""The DaemonSet and its RBAC validate against the published Kubernetes schemas, and grant no more
than the agent uses."""
import os

import kubernetes_validate
import pytest
import yaml

from tests.node_enforcer.conftest import ROOT

MANIFEST = os.path.join(ROOT, "deploy", "enforcer-daemonset.yaml")
VERSION = "1.30"


def _docs():
    with open(MANIFEST, encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def test_every_object_validates_strictly():
    docs = _docs()
    assert {d["kind"] for d in docs} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet",
                                         "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for d in docs:
        kubernetes_validate.validate(d, VERSION, strict=True)


def test_validation_is_real():
    ds = next(d for d in _docs() if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privilegd"] = True  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, VERSION, strict=True)


def test_least_privilege():
    docs = {d["kind"]: d for d in _docs()}
    rules = sorted((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r["verbs"])) for r in docs["ClusterRole"]["rules"])
    # list then watch (the informer), get for --no-watch
    assert rules == [(("",), ("nodes",), ("get", "list", "watch")), (("",), ("pods",), ("list", "watch")),
                     (("",), ("pods/eviction",), ("create",)),
                     (("node.katalyst.kubewharf.io",), ("customnoderesources",), ("get", "create")),
                     (("node.katalyst.kubewharf.io",), ("customnoderesources/status",), ("patch",))]
    # own node only: the admission policies (evaluated in test_admission_policy.py), each bound
    policies = [d for d in _docs() if d["kind"] == "ValidatingAdmissionPolicy"]
    bound = {d["spec"]["policyName"] for d in _docs() if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert {p["metadata"]["name"] for p in policies} == bound == {"tidewise-enforcer-own-cnr",
                                                                  "tidewise-enforcer-own-evictions"}
    binding = docs["ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tidewise-enforcer", "namespace": "tidewise"}]
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "tidewise-enforcer"
    sc = pod["containers"][0]["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["DAC_OVERRIDE", "SYS_RESOURCE"]}
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/host/sys"] is True and mounts["/host/sys/fs/cgroup"] is False


def test_daemonset_args_parse_with_the_real_command():
    from tidewise.cli import build_parser

    c = next(d for d in _docs() if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args([a.replace("$(NODE_NAME)", "node-1") for a in c["args"]])
    assert args.command == "enforce" and args.node == "node-1" and args.pods_from == "api"
    assert args.cgroup_root == "/host/sys/fs/cgroup" and not args.dry_run and not args.once
    assert args.reclaim_plan_from == "api" and args.reclaim_plan is None  # the plan comes from its Node
    assert args.report_topology and args.io_limits and args.net_device is None  # shaping needs NET_ADMIN: opt-in
