"""Every rule of every Role and ClusterRole in deploy/ against what the code calls (issue 22, least
privilege): every granted (apiGroup, resource, verb) is used by the component its ServiceAccount
runs, and every call the component makes is granted.

What a component calls: its source is scanned for the Kubernetes wrapper's methods it calls
(`autoscaler/kube.py` + `kube_cluster.py` for serve and the extender, `node_enforcer/kube.py` for the
agent) and the kinds it reads; each such method is then called against the API fake, and the
request the fake records is turned into the rule it needs (the URL's group, resource and
subresource; the HTTP method and `?watch` into the verb). Kinds read through an informer
(`watched`) need `watch` on the same path as their `list`. No table of grants is written by hand.
serve's rights to move pods (evictions, PodDisruptionBudget reads) are in
deploy/serve-moves-rbac.yaml, and only `--tide` / `--rebalance` reach the code that uses them; its
rights to write (and the Lease) are in deploy/apply/serve-write-rbac.yaml, and only `--apply` reaches
the code that writes: deploy/serve.yaml, the review install, grants reads only.
"""
from __future__ import annotations

import ast
import glob
import inspect
import os
from types import SimpleNamespace
from typing import Any, Iterable

import pytest
import yaml

from tests.test_deploy_connect import _docs  # every object in deploy/*.yaml, with its _file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Rule = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)
SERVE_BASE = {"serve.yaml"}
SERVE_OPT_IN = {"serve-katalyst-rbac.yaml", "serve-moves-rbac.yaml"}
SERVE_APPLY = {"apply/serve-write-rbac.yaml"}  # kustomize/apply's component deploy/apply
READS = {"get", "list", "watch"}
# granted and unused: none (every rule of every role is called by the code)
KNOWN_UNUSED: set[tuple[str, Rule]] = set()


def grants(account: str, files: Iterable[str] | None = None) -> set[Rule]:
    """What `tidewise/<account>` holds through the shipped bindings (of `files` only, when given)."""
    docs = _docs()
    out: set[Rule] = set()
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding") or (files is not None and b["_file"] not in files):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s["name"] == account for s in b["subjects"]):
            continue
        role = next((r for r in docs if r["kind"] == b["roleRef"]["kind"] and r["metadata"]["name"] == b["roleRef"]["name"]),
                    None)
        for rule in (role or {}).get("rules", []):
            assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"], f"{role['metadata']['name']}: a wildcard"
            out |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return out


def rule_of(method: str, path: str, query: Any) -> Rule:
    """The RBAC rule one recorded request needs."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    watch = "watch=true" in str(query).replace("'", "").replace(": [", "=").replace("]", "").lower()
    verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(method)
    verb = verb or ("watch" if watch else "get" if len(rest) > 1 else "list")
    return group, resource, verb


def called_names(paths: Iterable[str]) -> set[str]:
    """Every attribute name called (`x.name(...)`) in the source files."""
    out: set[str] = set()
    for path in paths:
        with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        out |= {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    return out


def sources(*patterns: str, exclude: str = "\0") -> list[str]:
    found = [os.path.relpath(p, ROOT) for pat in patterns for p in glob.glob(os.path.join(ROOT, pat), recursive=True)]
    return sorted(p for p in found if not p.startswith(exclude))


def public_methods(cls: type, skip: set[str]) -> dict[str, Any]:
    return {n: f for n, f in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_") and n not in skip}


def _sample(fn: Any) -> tuple[list[Any], dict[str, Any]]:
    """Arguments for one call against the fake: names and bodies that only need to reach the server."""
    args, kw = [], {}
    for p in list(inspect.signature(fn).parameters.values())[1:]:
        value = {"body": {"metadata": {"name": "x", "namespace": "ns"}}, "status": {}}.get(p.name, "n1")
        if p.name == "dry_run":
            value = True
        if p.kind == p.KEYWORD_ONLY or p.default is not p.empty:
            if p.name in ("dry_run", "node"):
                kw[p.name] = value
        else:
            args.append(value)
    return args, kw


def record_serving_side(calls: set[str], kinds: set[str]) -> set[Rule]:
    """The rules the serving side's `Kube` needs for `calls` (its methods) and `kinds` (read)."""
    from kubernetes import client

    from autoscaler.kube import Kube
    from contracts.kube_errors import KubeError
    from testsupport.kube_fake import FakeApiServer

    fake = FakeApiServer([]).start()
    cfg = client.Configuration()
    cfg.host = fake.url
    kube = Kube(client.ApiClient(cfg), sleep=lambda s: None, max_retries=0)
    rules: set[Rule] = set()
    try:
        methods = public_methods(Kube, {"call", "from_config", "list_kind", "watched"})
        for name in sorted(calls & set(methods)):
            args, kw = _sample(methods[name])
            try:
                getattr(kube, name)(*args, **kw)
            except KubeError:
                pass  # a 404 from the empty fake: the request was made, which is what counts
        watched = "watched" in calls
        for kind in sorted(kinds):
            list_fn, _ = kube.watched(kind)
            list_fn()  # the informer's list; its watch is the same client call with watch=true
            if watched:
                rules.add(rule_of("GET", fake.requests[-1].path, "watch=true"))
        rules |= {rule_of(r.method, r.path, r.query) for r in fake.requests}
    finally:
        kube.api_client.close()
        fake.stop()
    return rules


def serve_kinds() -> set[str]:
    """What serve reads: the core kinds and the optional kinds of every feature turned on."""
    from autoscaler.model.cluster import KINDS
    from autoscaler.settings import ServeSettings
    from tidewise.commands.serve import _extra_kinds

    s = ServeSettings()
    s.rebalance.enabled = s.tide.enabled = True
    return set(KINDS) | set(_extra_kinds(s))


def used_by_serve() -> set[Rule]:
    files = sources("autoscaler/**/*.py", "tidewise/commands/serve.py")
    return record_serving_side(called_names(files), serve_kinds())


def used_by_extender() -> set[Rule]:
    from extender.nodes import WatchedSource

    kinds: list[str] = []
    stub = SimpleNamespace(watched=lambda kind: (kinds.append(kind), (lambda: ([], ""), lambda v, *a: iter(())))[1])
    WatchedSource(stub)  # the kinds its informers follow
    files = sources("extender/**/*.py", "tidewise/commands/extender*.py")
    return record_serving_side(called_names(files), set(kinds))


def used_by_agent() -> set[Rule]:
    from contracts.kube_errors import KubeError
    from node_enforcer.kube import KubeApi
    from testsupport.kube_fake import FakeApiServer

    calls = called_names(sources("node_enforcer/**/*.py", "tidewise/commands/enforce.py", exclude="testsupport"))
    rules: set[Rule] = set()
    with FakeApiServer() as fake:
        api = KubeApi(fake.api_client(), node="n1")
        methods = public_methods(KubeApi, {"eviction_body", "pods_informer", "node_informer"})
        for name in sorted(calls & set(methods)):
            if name.startswith("watched_"):
                w = getattr(api, name)("n1")
                w.informer.list_fn()  # list; the informer then watches the same call
                rules.add(rule_of("GET", fake.requests[-1].path, "watch=true"))
                continue
            args, kw = _sample(getattr(KubeApi, name))
            try:
                getattr(api, name)(*args, **kw)
            except KubeError:
                pass
        rules |= {rule_of(r.method, r.path, r.query) for r in fake.requests}
    return rules


USED = {"tidewise-serve": used_by_serve, "tidewise-extender": used_by_extender, "tidewise-enforcer": used_by_agent}


def test_the_request_to_rule_mapping():
    assert rule_of("GET", "/api/v1/pods", {}) == ("", "pods", "list")
    assert rule_of("GET", "/api/v1/nodes", {"watch": ["true"]}) == ("", "nodes", "watch")
    assert rule_of("GET", "/api/v1/nodes/n1", {}) == ("", "nodes", "get")
    assert rule_of("POST", "/api/v1/namespaces/a/pods/b/eviction", {}) == ("", "pods/eviction", "create")
    assert rule_of("PATCH", "/apis/autoscaling.k8s.io/v1/namespaces/a/verticalpodautoscalers/b/status", "") == \
        ("autoscaling.k8s.io", "verticalpodautoscalers/status", "patch")
    assert rule_of("PUT", "/apis/coordination.k8s.io/v1/namespaces/t/leases/l", "") == ("coordination.k8s.io", "leases", "update")


def test_every_account_with_roles_is_a_component_here():
    docs = _docs()
    bound = {s["name"] for b in docs if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
             and any(r["kind"] == b["roleRef"]["kind"] and r["metadata"]["name"] == b["roleRef"]["name"] for r in docs)
             for s in b["subjects"] if s.get("kind") == "ServiceAccount"}
    assert bound == set(USED)


@pytest.mark.parametrize("account", sorted(USED))
def test_every_grant_is_used_and_every_call_is_granted(account):
    used, held = USED[account](), grants(account)
    assert used - held == set(), f"{account} calls what it is not granted"
    unused = {(account, r) for r in held - used}
    assert unused == {k for k in KNOWN_UNUSED if k[0] == account}, f"{account} is granted what it never calls"


def test_serve_as_shipped_is_granted_no_moves_and_needs_none():
    """deploy/serve.yaml's args run neither tide nor rebalance: no evictor is made and no budget read,
    and the base file grants neither; deploy/serve-moves-rbac.yaml holds exactly those two rights."""
    from tidewise.cli import build_parser
    from tidewise.commands.serve import _evictor, _extra_kinds, _settings

    dep = next(d for d in _docs() if d["kind"] == "Deployment" and d["metadata"]["name"] == "tidewise-serve")
    cm = next(d for d in _docs() if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "tidewise-serve")
    args = build_parser().parse_args(dep["spec"]["template"]["spec"]["containers"][0]["args"])
    args.settings = yaml.safe_load(cm["data"]["config.yaml"])
    s = _settings(args)
    assert _evictor(args, s, kube=object()) is None
    assert "PodDisruptionBudget" not in _extra_kinds(s)
    moves = {("", "pods/eviction", "create"), ("policy", "poddisruptionbudgets", "list"),
             ("policy", "poddisruptionbudgets", "watch")}
    assert grants("tidewise-serve", SERVE_BASE) & moves == set()
    assert grants("tidewise-serve", {"serve-moves-rbac.yaml"}) == moves
    args.tide = True  # with --tide (or --rebalance) both are reached
    s = _settings(args)
    assert _evictor(args, s, kube=object()) is not None and "PodDisruptionBudget" in _extra_kinds(s)
    assert grants("tidewise-serve", SERVE_BASE | SERVE_OPT_IN | SERVE_APPLY) == grants("tidewise-serve")


def test_review_is_granted_the_reads_serve_makes_and_apply_the_writes():
    """deploy/serve.yaml (review: no --apply) grants exactly the list/watch serve's informers make of
    the kinds it always reads; deploy/apply/serve-write-rbac.yaml exactly the other calls (patches,
    creates, the HPA re-read on a conflict, the Lease), which only --apply reaches: review's sink
    writes nothing and only --apply elects a leader (tests/autoscaler/test_serve_rights.py runs it)."""
    used, opt_in = used_by_serve(), grants("tidewise-serve", SERVE_OPT_IN)
    review, apply = grants("tidewise-serve", SERVE_BASE), grants("tidewise-serve", SERVE_APPLY)
    assert review == {r for r in used if r[2] in ("list", "watch")} - opt_in
    assert apply == {r for r in used if r[2] not in ("list", "watch")} - opt_in
    assert {v for _, _, v in review} <= READS and not review & apply
    # the two writes the brief names: HPA patch and SPD create/patch, only in apply
    assert ("autoscaling", "horizontalpodautoscalers", "patch") in apply - review
    assert {("workload.katalyst.kubewharf.io", "serviceprofiledescriptors", v) for v in ("create", "patch")} <= apply
