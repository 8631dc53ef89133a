"""deploy/serve*.yaml, deploy/apply/ and deploy/tide/: valid against Kubernetes' schemas, least privilege, runnable arguments (the
Dockerfile's stages: tests/integration/test_image.py)."""
from __future__ import annotations

import os

import pytest
import yaml

from tests.autoscaler.conftest import ROOT, validate_object

FILES = ["deploy/serve.yaml", "deploy/serve-katalyst-rbac.yaml", "deploy/serve-moves-rbac.yaml",
         "deploy/apply/serve-write-rbac.yaml", "deploy/tide/serve-tide-policy.yaml"]


def docs(path):
    with open(os.path.join(ROOT, path)) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


@pytest.mark.parametrize("path", FILES)
def test_every_manifest_validates(path):
    objs = docs(path)
    assert objs
    for o in objs:
        validate_object(o)


def rules():
    out = set()
    for f in FILES:
        for o in docs(f):
            if o["kind"] in ("ClusterRole", "Role"):
                for r in o["rules"]:
                    for g in r["apiGroups"]:
                        for res in r["resources"]:
                            for v in r["verbs"]:
                                out.add((o["kind"], g, res, v, tuple(r.get("resourceNames", ()))))
    return out


def test_rbac_is_exactly_what_the_loop_uses():
    got = {(g, res, v) for _, g, res, v, _ in rules()}
    assert not any("*" in x for t in got for x in t)
    assert not any(res in ("secrets", "configmaps", "pods/exec") for _, res, _ in got)
    # writes are limited to these (subresource status where there is one)
    writes = {(g, res, v) for g, res, v in got if v not in ("get", "list", "watch")}
    assert writes == {
        ("autoscaling.k8s.io", "verticalpodautoscalers/status", "patch"),
        ("autoscaling", "horizontalpodautoscalers", "patch"),
        ("", "nodes/status", "patch"),
        ("", "nodes", "patch"),  # the reclaim-plan annotation only (metadata; see the yaml's comment)
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
        ("node.katalyst.kubewharf.io", "customnoderesources/status", "patch"),
        ("recommendation.katalyst.kubewharf.io", "resourcerecommends/status", "patch"),
        ("", "pods/eviction", "create"),  # tide drains and rebalancing (serve-moves-rbac.yaml): budgets are honoured
        ("tide.katalyst.kubewharf.io", "tidenodepools/status", "patch"),
        # Katalyst SPDs of opted-in workloads (created when missing) and IHPA status (docs/katalyst-objects.md)
        ("workload.katalyst.kubewharf.io", "serviceprofiledescriptors", "create"),
        ("workload.katalyst.kubewharf.io", "serviceprofiledescriptors", "patch"),
        ("workload.katalyst.kubewharf.io", "serviceprofiledescriptors/status", "patch"),
        ("autoscaling.katalyst.kubewharf.io", "intelligenthorizontalpodautoscalers/status", "patch"),
    }
    lease_rules = [r for r in rules() if r[2] == "leases" and r[3] in ("get", "update")]
    assert lease_rules and all(r[0] == "Role" and r[4] == ("tidewise-serve",) for r in lease_rules)


def test_deployment_runs_serve_as_non_root_with_probes_and_valid_arguments():
    dep = next(o for o in docs("deploy/serve.yaml") if o["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    from tidewise.cli import build_parser

    args = build_parser().parse_args(c["args"])
    assert args.command == "serve" and not args.apply and args.source == "prometheus"  # review mode first
    from tidewise.commands.serve import _metrics_address

    assert _metrics_address(args) == ("0.0.0.0", c["ports"][0]["containerPort"])  # Prometheus scrapes the pod IP
    cm = next(o for o in docs("deploy/serve.yaml") if o["kind"] == "ConfigMap")
    assert args.kill_switch == "/etc/tidewise/kill-switch" and "kill-switch" in cm["data"]
    # the shipped config file is accepted by the serve command's settings loader
    from tidewise.commands.serve import _settings

    args.settings = yaml.safe_load(cm["data"]["config.yaml"])
    s = _settings(args)
    assert s.loop.lease_name == next(r[4][0] for r in rules() if r[2] == "leases" and r[4])
