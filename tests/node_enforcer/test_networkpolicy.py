"""deploy/enforcer-networkpolicy.yaml: a valid NetworkPolicy, in the kustomize base, that selects the
node agent's pods, admits only Prometheus, and only to the port the agent listens on
(deploy/enforcer-daemonset.yaml), as deploy/serve-networkpolicy.yaml does for serve."""
from __future__ import annotations

import os

import yaml

from testsupport.k8s_schemas import validate_object
from tests.node_enforcer.conftest import ROOT
from tidewise.cli import build_parser


def docs(path):
    with open(os.path.join(ROOT, path)) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def daemonset():
    return next(o for o in docs("deploy/enforcer-daemonset.yaml") if o["kind"] == "DaemonSet")


def test_the_policy_validates_and_admits_only_the_scraper_to_the_metrics_port():
    (policy,) = docs("deploy/enforcer-networkpolicy.yaml")
    validate_object(policy)
    assert policy["kind"] == "NetworkPolicy"
    ds = daemonset()
    assert policy["metadata"]["namespace"] == ds["metadata"]["namespace"]
    # it selects exactly the agent's pods (not serve's, which share app.kubernetes.io/name)
    labels = ds["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == ds["spec"]["selector"]["matchLabels"] and selector.items() <= labels.items()
    assert selector["app.kubernetes.io/component"] == "enforcer"
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open: the API server
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    # one peer with both selectors: a Prometheus pod in the monitoring namespace
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    (port,) = rule["ports"]
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert port == {"protocol": "TCP", "port": container["ports"][0]["containerPort"]}
    # ... which is the port the agent listens on, on every address of its pod, and the one Prometheus scrapes
    args = build_parser().parse_args(container["args"])
    assert (args.metrics_address, args.metrics_port) == ("0.0.0.0", port["port"])
    assert int(ds["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]) == port["port"]
    assert not ds["spec"]["template"]["spec"].get("hostNetwork")  # on the host's network no policy would hold


def test_the_policy_is_in_the_kustomize_base_and_named_by_the_daemonset():
    with open(os.path.join(ROOT, "deploy", "kustomization.yaml")) as fh:
        assert "enforcer-networkpolicy.yaml" in yaml.safe_load(fh)["resources"]
    with open(os.path.join(ROOT, "deploy", "enforcer-daemonset.yaml")) as fh:
        assert "deploy/enforcer-networkpolicy.yaml" in fh.read()
