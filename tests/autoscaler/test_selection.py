"""Opt-in: serve writes only objects a user selected (serve.select per kind, or the annotation
tidewise.io/manage: "true"); everything else is named in the report with the reason. Against the API
fake through the REAL kubernetes client and ApiSink, with --apply (settings.loop.apply)."""
from __future__ import annotations

import copy
import json
import os

import pytest
import yaml

from autoscaler.input.cluster import ApiCluster
from autoscaler.output.sinks import WRITTEN, ApiSink, FileSink
from autoscaler.routines.loop import OK, ServingLoop
from autoscaler.settings import MANAGE_ANNOTATION, KindSelection, SelectSettings
from contracts.errors import InputError
from contracts.selector import parse_selector
from tests.autoscaler.conftest import fast_settings, source_of
from tidewise.commands.serve import _select

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("text, labels, want", [
    ("app=web", {"app": "web"}, True),
    ("app==web", {"app": "api"}, False),
    ("app!=web", {}, True),  # as in Kubernetes: an absent key is "not web"
    ("app=web,tier in (a, b),!canary", {"app": "web", "tier": "b"}, True),
    ("app=web,tier in (a,b),!canary", {"app": "web", "tier": "b", "canary": "1"}, False),
    ("tier notin (a,b)", {"tier": "c"}, True),
    ("tier notin (a,b)", {"tier": "a"}, False),
    ("example.com/team", {"example.com/team": ""}, True),
    ("example.com/team", {}, False),
    ("", {"x": "y"}, True),
])
def test_label_selectors_match_as_kubernetes_does(text, labels, want):
    assert parse_selector(text).matches(labels) is want


@pytest.mark.parametrize("text, part", [
    ("app=web,,tier=a", "empty requirement"), ("tier in (a,b", "'(' without ')'"), ("tier in ()", "at least one"),
    ("app=we b", "cannot read"), ("-app=web", "not a label key"), ("app=-web", "not a label value"),
    ("app in a,b", "cannot read"),
])
def test_a_bad_selector_is_one_line_naming_the_part(text, part):
    with pytest.raises(ValueError, match="label selector") as exc:
        parse_selector(text)
    assert part in str(exc.value) and "\n" not in str(exc.value)


def obj(kind, name, ns=None, labels=None, annotations=None):
    md = {"name": name, **({"namespace": ns} if ns else {}), "labels": labels or {}, "annotations": annotations or {}}
    return {"kind": kind, "metadata": md}


def test_rules_hpa_needs_an_opt_in_vpa_opts_in_by_itself_and_false_opts_out():
    sel = SelectSettings()
    hpa = obj("HorizontalPodAutoscaler", "web", "shop")
    assert "no serve.select.hpa and no tidewise.io/manage" in sel.why_not("HorizontalPodAutoscaler", hpa)
    assert sel.why_not("Node", obj("Node", "n1")) is not None
    assert sel.why_not("TideNodePool", obj("TideNodePool", "p")) is not None
    assert sel.why_not("IntelligentHorizontalPodAutoscaler", obj("IntelligentHorizontalPodAutoscaler", "i", "s")) is not None
    assert sel.why_not("VerticalPodAutoscaler", obj("VerticalPodAutoscaler", "web", "shop")) is None
    assert sel.why_not("HorizontalPodAutoscaler", obj("HorizontalPodAutoscaler", "web", "shop",
                                                      annotations={MANAGE_ANNOTATION: "true"})) is None
    sel = SelectSettings(hpa=KindSelection(namespaces=("shop",), selector="app=web"),
                         vpa=KindSelection(namespaces=("shop",)))
    assert sel.why_not("HorizontalPodAutoscaler", obj("HorizontalPodAutoscaler", "web", "shop", {"app": "web"})) is None
    assert sel.why_not("HorizontalPodAutoscaler", obj("HorizontalPodAutoscaler", "web", "bank", {"app": "web"})) == \
        "not selected (namespace bank not in serve.select.hpa.namespaces)"
    assert "labels do not match serve.select.hpa.selector 'app=web'" in \
        sel.why_not("HorizontalPodAutoscaler", obj("HorizontalPodAutoscaler", "api", "shop", {"app": "api"}))
    assert sel.why_not("VerticalPodAutoscaler", obj("VerticalPodAutoscaler", "web", "bank")) is not None
    # an explicit "false" on the object wins over the config
    assert "annotation tidewise.io/manage: 'false'" in sel.why_not("HorizontalPodAutoscaler", obj(
        "HorizontalPodAutoscaler", "web", "shop", {"app": "web"}, {MANAGE_ANNOTATION: "false"}))


def test_the_config_section_is_checked_with_one_line_errors():
    s = _select({"hpa": {"namespaces": ["shop"], "selector": "app in (web,api)"}, "node": {"selector": "pool=a"}})
    assert s.hpa.namespaces == ("shop",) and s.node.parsed_ is not None and s.vpa.all
    for bad, msg in [({"hpa": {"selector": "app in (web"}}, "serve.select.hpa.selector"),
                     ({"node": {"namespaces": ["shop"]}}, "node objects have no namespace"),
                     ({"hpa": {"namespace": ["shop"]}}, "did you mean 'namespaces'"),
                     ({"hpas": {}}, "did you mean 'hpa'"),
                     ({"hpa": "shop"}, "must be a mapping"),
                     ({"hpa": {"namespaces": "shop"}}, "give a list of namespace names")]:
        with pytest.raises(InputError, match="serve.select") as exc:
            _select(bad)
        assert msg in str(exc.value), (bad, exc.value)


def _plain(objects):
    """The demo cluster without its opt-in annotations (as a cluster looks before anyone opted in)."""
    out = copy.deepcopy(objects)
    for o in out:
        (o["metadata"].get("annotations") or {}).pop(MANAGE_ANNOTATION, None)
    return out


def _run(api_factory, objects, history, select=None, sink=None):
    fake, kube = api_factory(objects)
    s = fast_settings()
    s.loop.apply = True
    if select is not None:
        s.select = select
    rep = ServingLoop(s, source_of(history), ApiCluster(kube), sink or ApiSink(kube)).run_once()
    assert rep.outcome == OK, rep.reason
    return fake, rep


def _patched(fake, plural):
    return {r.path for r in fake.writes("PATCH") if f"/{plural}/" in r.path}


def test_with_apply_and_no_selection_no_hpa_or_node_is_written_and_each_is_named(api_factory, objects, history):
    fake, rep = _run(api_factory, _plain(objects), history)
    assert _patched(fake, "verticalpodautoscalers")  # VPAs opt in by spec.recommenders
    assert not _patched(fake, "horizontalpodautoscalers") and not _patched(fake, "nodes")
    hpas = [k for k in rep.skipped if k.startswith("HorizontalPodAutoscaler/")]
    nodes = [k for k in rep.skipped if k.startswith("Node/")]
    assert hpas and nodes and rep.hpa and rep.reclaim  # decided (and exported), not written
    assert all("not selected (no serve.select.hpa" in rep.skipped[k] for k in hpas)
    assert not any(r.key.startswith(("HorizontalPodAutoscaler/", "Node/")) for r in rep.results)


def test_a_selected_hpa_namespace_and_node_label_are_written_the_rest_not(api_factory, objects, history):
    plain = _plain(objects)
    hpas = [o for o in plain if o["kind"] == "HorizontalPodAutoscaler"]
    ns = hpas[0]["metadata"]["namespace"]
    node0 = next(o for o in plain if o["kind"] == "Node" and o["metadata"]["name"] == "node-0")
    node0["metadata"]["labels"]["tidewise.io/pool"] = "canary"
    vpa_ns = {o["metadata"]["namespace"] for o in plain if o["kind"] == "VerticalPodAutoscaler"}
    other_ns = sorted(vpa_ns - {ns})[0]
    select = SelectSettings(hpa=KindSelection(namespaces=(ns,)), node=KindSelection(selector="tidewise.io/pool=canary"),
                            vpa=KindSelection(namespaces=(ns,)))
    fake, rep = _run(api_factory, plain, history, select)
    written = {r.key for r in rep.results if r.outcome == WRITTEN}
    in_ns = {f"HorizontalPodAutoscaler/{ns}/{h['metadata']['name']}" for h in hpas if h["metadata"]["namespace"] == ns}
    assert in_ns & written and _patched(fake, "horizontalpodautoscalers")
    assert all(f"/namespaces/{ns}/" in p for p in _patched(fake, "horizontalpodautoscalers"))
    assert _patched(fake, "nodes") == {"/api/v1/nodes/node-0/status", "/api/v1/nodes/node-0"}  # status, plan annotation
    assert rep.skipped["Node/node-1"] == "not selected (labels do not match serve.select.node.selector " \
                                        "'tidewise.io/pool=canary')"
    # VPAs: the recommenders opt-in and the namespace list both hold
    assert _patched(fake, "verticalpodautoscalers") and \
        all(f"/namespaces/{ns}/" in p for p in _patched(fake, "verticalpodautoscalers"))
    vpa_skips = [k for k in rep.skipped if k.startswith(f"VerticalPodAutoscaler/{other_ns}/")]
    assert vpa_skips and all(rep.skipped[k] == f"not selected (namespace {other_ns} not in serve.select.vpa.namespaces)"
                             for k in vpa_skips)


def test_the_review_folder_lists_what_was_skipped_and_why(tmp_path, api_factory, objects, history):
    _, rep = _run(api_factory, _plain(objects), history, sink=FileSink(str(tmp_path)))
    decisions = json.loads((tmp_path / "decisions.json").read_text())
    skipped = {k: v["skipped"] for k, v in decisions.items() if "skipped" in v}
    assert any(k.startswith("HorizontalPodAutoscaler/") for k in skipped)
    assert skipped["Node/node-0"].startswith("not selected (no serve.select.node")
    assert not (tmp_path / "horizontalpodautoscaler").exists() and not (tmp_path / "node").exists()


def _deploy(name):
    with open(os.path.join(ROOT, "deploy", name), encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def test_the_shipped_serve_manifest_starts_in_review_mode():
    docs = _deploy("serve.yaml")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    args = [str(a) for a in dep["spec"]["template"]["spec"]["containers"][0]["args"]]
    assert "serve" in args and "--apply" not in args  # review: decisions logged and exported, nothing written
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    serve = yaml.safe_load(cm["data"]["config.yaml"])["serve"]
    sel = _select(serve.get("select"))  # what is shipped parses, and selects no HPA or node by itself
    assert sel.why_not("HorizontalPodAutoscaler", obj("HorizontalPodAutoscaler", "web", "shop")) is not None
    assert sel.why_not("Node", obj("Node", "n1")) is not None
