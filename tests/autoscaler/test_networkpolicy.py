"""deploy/serve-networkpolicy.yaml: a valid NetworkPolicy that selects the serving pods, admits only
Prometheus, and only to the port the serve container listens on (deploy/serve.yaml)."""
from __future__ import annotations

import os

import yaml

from tests.autoscaler.conftest import ROOT, validate_object
from tidewise.cli import build_parser
from tidewise.commands.serve import _metrics_address


def docs(path):
    with open(os.path.join(ROOT, path)) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def serve_deployment():
    return next(o for o in docs("deploy/serve.yaml") if o["kind"] == "Deployment")


def test_the_policy_validates_and_admits_only_the_scraper_to_the_metrics_port():
    (policy,) = docs("deploy/serve-networkpolicy.yaml")
    validate_object(policy)
    assert policy["kind"] == "NetworkPolicy"
    dep = serve_deployment()
    assert policy["metadata"]["namespace"] == dep["metadata"]["namespace"]
    # it selects exactly the serving pods
    labels = dep["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector and selector.items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open: API server and Prometheus
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    # one peer with both selectors: a Prometheus pod in the monitoring namespace (two peers would
    # admit every pod of that namespace, or every Prometheus of any namespace)
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    (port,) = rule["ports"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert port == {"protocol": "TCP", "port": container["ports"][0]["containerPort"]}
    # ... which is the port the command listens on, on every address of the pod (the CLI's default is
    # loopback, which Prometheus could not scrape), and the one Prometheus is told to scrape
    assert _metrics_address(build_parser().parse_args(container["args"])) == ("0.0.0.0", port["port"])
    assert int(dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]) == port["port"]


def test_serve_yaml_points_to_the_policy():
    with open(os.path.join(ROOT, "deploy/serve.yaml")) as fh:
        assert "deploy/serve-networkpolicy.yaml" in fh.read()
