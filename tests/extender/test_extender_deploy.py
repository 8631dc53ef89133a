"""deploy/scheduler-extender.yaml: every object valid against Kubernetes' schemas, the extender's
RBAC exactly read-only Nodes and CustomNodeResources, runnable arguments, and the
KubeSchedulerConfiguration (not a Kubernetes object: checked against a small hand schema of
kubescheduler.config.k8s.io/v1) pointing at the Service and at verbs the extender answers."""
from __future__ import annotations

import re

import pytest
import yaml

from tests.autoscaler.test_deploy import docs
from tests.autoscaler.conftest import validate_object

PATH = "deploy/scheduler-extender.yaml"
EXTENDER_KEYS = {  # k8s.io/kube-scheduler/config/v1 Extender: field -> type
    "urlPrefix": str, "filterVerb": str, "preemptVerb": str, "prioritizeVerb": str, "bindVerb": str,
    "weight": int, "enableHTTPS": bool, "tlsConfig": dict, "httpTimeout": str, "nodeCacheCapable": bool,
    "managedResources": list, "ignorable": bool,
}
TOP_KEYS = {"apiVersion", "kind", "parallelism", "leaderElection", "clientConnection", "healthzBindAddress",
            "metricsBindAddress", "enableProfiling", "enableContentionProfiling", "percentageOfNodesToScore",
            "podInitialBackoffSeconds", "podMaxBackoffSeconds", "profiles", "extenders", "delayCacheUntilActive"}
DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|ms|s|m|h))+$")  # Go's time.ParseDuration


def objects():
    return docs(PATH)


def one(kind, name):
    return next(o for o in objects() if o["kind"] == kind and o["metadata"]["name"] == name)


def scheduler_config() -> dict:
    return yaml.safe_load(one("ConfigMap", "tidewise-scheduler-config")["data"]["scheduler-config.yaml"])


def config_problems(cfg) -> list[str]:
    """What kube-scheduler's own validation would refuse in the parts this file uses."""
    out = []
    if cfg.get("apiVersion") != "kubescheduler.config.k8s.io/v1" or cfg.get("kind") != "KubeSchedulerConfiguration":
        out.append("apiVersion/kind")
    out += [f"unknown field {k}" for k in set(cfg) - TOP_KEYS]
    profiles = cfg.get("profiles") or []
    if not profiles or not all(isinstance(p, dict) and p.get("schedulerName") for p in profiles):
        out.append("profiles need a schedulerName")
    binders = 0
    for i, e in enumerate(cfg.get("extenders") or []):
        out += [f"extenders[{i}].{k}: unknown" for k in set(e) - set(EXTENDER_KEYS)]
        out += [f"extenders[{i}].{k}: not {t.__name__}" for k, t in EXTENDER_KEYS.items()
                if k in e and not isinstance(e[k], t)]
        if not str(e.get("urlPrefix", "")).startswith(("http://", "https://")):
            out.append(f"extenders[{i}].urlPrefix")
        if e.get("prioritizeVerb") and not (isinstance(e.get("weight"), int) and e["weight"] > 0):
            out.append(f"extenders[{i}].weight must be positive with a prioritizeVerb")
        if "httpTimeout" in e and not DURATION.match(str(e["httpTimeout"])):
            out.append(f"extenders[{i}].httpTimeout")
        binders += bool(e.get("bindVerb"))
    if binders > 1:
        out.append("only one extender may bind")
    return out


def test_every_object_validates():
    objs = objects()
    assert {o["kind"] for o in objs} >= {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
                                         "ConfigMap", "NetworkPolicy"}
    for o in objs:
        validate_object(o)


def test_only_the_scheduler_pods_may_reach_the_extender_port():
    policy = one("NetworkPolicy", "tidewise-extender")
    extender = one("Deployment", "tidewise-extender")["spec"]["template"]
    scheduler = one("Deployment", "tidewise-scheduler")["spec"]["template"]
    labels = extender["metadata"]["labels"]
    assert policy["metadata"]["namespace"] == "tidewise" and policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    [rule] = policy["spec"]["ingress"]
    [source] = rule["from"]
    assert set(source) == {"podSelector"}  # this namespace's pods only, and among them:
    selector = source["podSelector"]["matchLabels"]
    assert selector.items() <= scheduler["metadata"]["labels"].items() and not selector.items() <= labels.items()
    port = next(p["containerPort"] for p in extender["spec"]["containers"][0]["ports"] if p["name"] == "http")
    assert rule["ports"] == [{"protocol": "TCP", "port": port}]


def test_the_extender_may_only_read_nodes_and_custom_node_resources():
    roles = [o for o in objects() if o["kind"] in ("ClusterRole", "Role")]
    assert [r["metadata"]["name"] for r in roles] == ["tidewise-extender"]
    got = {(g, res, v) for r in roles[0]["rules"] for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}
    assert got == {(g, res, v) for g, res in (("", "nodes"), ("node.katalyst.kubewharf.io", "customnoderesources"))
                   for v in ("list", "watch")}
    binding = one("ClusterRoleBinding", "tidewise-extender")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tidewise-extender", "namespace": "tidewise"}]


def test_the_extender_deployment_runs_the_command_behind_its_service():
    dep = one("Deployment", "tidewise-extender")
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["serviceAccountName"] == "tidewise-extender"
    from tidewise.cli import build_parser
    from tidewise.commands.extender import _listen

    args = build_parser().parse_args(c["args"])
    assert args.command == "extender" and not args.cluster_state and not args.no_node_cache
    host, port = _listen(args.listen)
    assert host == "0.0.0.0"  # the scheduler reaches the pod IP; the CLI's default is loopback
    assert c["ports"][0]["containerPort"] == port and c["readinessProbe"]["httpGet"]["path"] == "/healthz"
    svc = one("Service", "tidewise-extender")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"][0]["targetPort"] == c["ports"][0]["name"]


def test_the_scheduler_configuration_is_valid_and_calls_the_service():
    cfg = scheduler_config()
    assert config_problems(cfg) == []
    [ext] = cfg["extenders"]
    svc = one("Service", "tidewise-extender")
    host = f"http://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc:{svc['spec']['ports'][0]['port']}/"
    assert ext["urlPrefix"].startswith(host)
    assert (ext["filterVerb"], ext["prioritizeVerb"]) == ("filter", "prioritize")
    assert ext["nodeCacheCapable"] is True and ext["ignorable"] is True and "bindVerb" not in ext
    # with managedResources kube-scheduler would send only pods requesting them: no online pod scored
    assert "managedResources" not in ext
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["tidewise-scheduler"]
    dep = one("Deployment", "tidewise-scheduler")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    path = next(a.split("=", 1)[1] for a in c["command"] if a.startswith("--config="))
    mount = c["volumeMounts"][0]
    assert path == f"{mount['mountPath']}/scheduler-config.yaml"
    assert dep["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] == "tidewise-scheduler-config"


@pytest.mark.parametrize("bad, needle", [
    ({"apiVersion": "kubescheduler.config.k8s.io/v1beta3"}, "apiVersion"),
    ({"extenders": [{"urlPrefix": "http://x", "prioritizeVerb": "p", "weight": 0}]}, "weight"),
    ({"extenders": [{"urlPrefix": "http://x", "filterVerb": "f", "httpTimeout": "5 seconds"}]}, "httpTimeout"),
    ({"extenders": [{"urlPrefix": "http://x", "nodeCacheCapable": "yes"}]}, "not bool"),
    ({"extenders": [{"urlPrefix": "http://x", "filterverb": "f"}]}, "unknown"),
    ({"extenders": [{"urlPrefix": "x", "bindVerb": "b"}, {"urlPrefix": "http://y", "bindVerb": "b"}]}, "bind"),
])
def test_the_hand_schema_catches_what_kube_scheduler_would_refuse(bad, needle):
    cfg = dict(scheduler_config(), **bad)
    assert any(needle in p for p in config_problems(cfg)), config_problems(cfg)
