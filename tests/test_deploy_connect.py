"""deploy/*.yaml as one system: the manifests point at each other correctly.

Each file is also validated on its own (tests/autoscaler/test_deploy.py, tests/node_enforcer/
test_deploy.py, tests/training/test_cronjob.py); here: every container's arguments parse with the
real `tidewise` parser, every path a flag names lies on a mounted volume (a ConfigMap key that
exists, a claim that exists), every ServiceAccount, ConfigMap, claim and role referenced exists, the
serving loop reads the models the training job writes, and the reclaim plan has a writer and a
reader with the grants they need.
"""
from __future__ import annotations

import glob
import os
import re
from typing import Any, Iterator

import pytest
import yaml

from tidewise.cli import build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = ("Deployment", "DaemonSet", "CronJob", "Job", "StatefulSet")
# argparse dest -> how the command uses the path (a file read, a folder, or one it writes)
PATH_FLAGS = ("config", "kill_switch", "registry", "registry_key", "checkpoint", "reclaim_plan", "sysfs_root", "cgroup_root",
              "proc_root", "input", "out", "pods")


def _docs() -> list[dict[str, Any]]:
    """Every object of deploy/*.yaml and of the kustomize components' folders (deploy/apply/*.yaml,
    deploy/tide/*.yaml), each with its `_file` relative to deploy/ ("serve.yaml", "apply/...")."""
    out = []
    paths = glob.glob(os.path.join(ROOT, "deploy", "*.yaml")) + glob.glob(os.path.join(ROOT, "deploy", "*", "*.yaml"))
    for path in sorted(paths):
        with open(path, encoding="utf-8") as fh:
            # objects only: not a kustomization.yaml (kind Kustomization or Component) nor a file without kinds
            out += [dict(d, _file=os.path.relpath(path, os.path.join(ROOT, "deploy"))) for d in yaml.safe_load_all(fh)
                    if d and d.get("kind") not in (None, "Kustomization", "Component")]
    return out


DOCS = _docs()


def _find(kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    for d in DOCS:
        md = d["metadata"]
        if d["kind"] == kind and md["name"] == name and (namespace is None or md.get("namespace") == namespace):
            return d
    return None


def _pod_spec(w: dict[str, Any]) -> dict[str, Any]:
    if w["kind"] == "CronJob":
        return w["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return w["spec"]["template"]["spec"]


def _containers() -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    for w in DOCS:
        if w["kind"] in WORKLOADS:
            spec = _pod_spec(w)
            for c in spec.get("initContainers", []) + spec["containers"]:
                yield w, spec, c


def _args(c: dict[str, Any]):
    """The container's args through the real parser, with $(VAR) from the container's env."""
    env = {e["name"]: f"<{e['name']}>" for e in c.get("env", [])}
    argv = []
    for a in c.get("args", []):
        for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
            assert var in env, f"{c['name']}: argument {a!r} uses $({var}), which the container's env does not set"
            a = a.replace(f"$({var})", env[var])
        argv.append(a)
    try:
        return build_parser().parse_args(argv)
    except SystemExit:
        raise AssertionError(f"container {c['name']}: `tidewise {' '.join(argv)}` is refused by the real parser")


def _mount_of(spec: dict[str, Any], c: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The (volumeMount, volume) whose mountPath holds `path`, the deepest one."""
    best = None
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"].rstrip("/")):
                best = m
    if best is None:
        return None
    vol = next(v for v in spec.get("volumes", []) if v["name"] == best["name"])
    return best, vol


def _ids(items):
    return [f"{w['metadata']['name']}/{c['name']}" for w, _, c in items]


CONTAINERS = list(_containers())
# containers that run the `tidewise` command (the second scheduler runs the upstream kube-scheduler image)
TIDEWISE = [(w, spec, c) for w, spec, c in CONTAINERS if "/tidewise/" in c.get("image", "")]
# roles every cluster has (RBAC bootstrap policy): bound, not shipped
BUILTIN_ROLES = {("ClusterRole", "system:kube-scheduler"), ("ClusterRole", "system:volume-scheduler"),
                 ("Role", "extension-apiserver-authentication-reader")}


def test_the_manifests_hold_the_parts():
    kinds = {(d["kind"], d["metadata"]["name"]) for d in DOCS}
    assert {("Deployment", "tidewise-serve"), ("DaemonSet", "tidewise-enforcer"), ("CronJob", "tidewise-train"),
            ("PersistentVolumeClaim", "tidewise-models")} <= kinds


def test_only_the_upstream_scheduler_runs_another_image():
    others = {c.get("image", "").rsplit(":", 1)[0] for _, _, c in CONTAINERS} - {c["image"].rsplit(":", 1)[0]
                                                                               for _, _, c in TIDEWISE}
    assert others == {"registry.k8s.io/kube-scheduler"}


@pytest.mark.parametrize("w,spec,c", TIDEWISE, ids=_ids(TIDEWISE))
def test_every_container_argument_parses_with_the_real_command(w, spec, c):
    args = _args(c)
    assert args.command, f"{c['name']}: no tidewise command in {c.get('args')}"


@pytest.mark.parametrize("w,spec,c", CONTAINERS, ids=_ids(CONTAINERS))
def test_references_exist(w, spec, c):
    ns = w["metadata"].get("namespace")
    sa = spec.get("serviceAccountName", "default")
    assert _find("ServiceAccount", sa, ns), f"{w['metadata']['name']}: ServiceAccount {ns}/{sa} is not shipped"
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        assert m["name"] in volumes, f"{c['name']}: mount {m['name']} has no volume"
    for v in volumes.values():
        if "configMap" in v:
            assert _find("ConfigMap", v["configMap"]["name"], ns), f"ConfigMap {v['configMap']['name']} is not shipped"
        if "persistentVolumeClaim" in v:
            claim = v["persistentVolumeClaim"]["claimName"]
            assert _find("PersistentVolumeClaim", claim, ns), f"claim {claim} is not shipped"


@pytest.mark.parametrize("w,spec,c", TIDEWISE, ids=_ids(TIDEWISE))
def test_every_path_flag_lies_on_a_mounted_volume(w, spec, c):
    args = _args(c)
    ns = w["metadata"].get("namespace")
    for flag in PATH_FLAGS:
        path = getattr(args, flag, None)
        if not path or (flag == "proc_root" and path == "/proc" and spec.get("hostPID")):
            continue
        found = _mount_of(spec, c, path)
        assert found, f"{c['name']}: --{flag.replace('_', '-')} {path} is on no mounted volume"
        mount, vol = found
        if "configMap" in vol:
            cm = _find("ConfigMap", vol["configMap"]["name"], ns)
            key = os.path.relpath(path, mount["mountPath"])
            assert cm and key in (cm.get("data") or {}), \
                f"{c['name']}: --{flag.replace('_', '-')} {path} needs key {key!r} in ConfigMap {vol['configMap']['name']}"


def _container(kind: str, name: str) -> tuple[dict[str, Any], dict[str, Any], Any]:
    w = _find(kind, name)
    assert w, f"{kind} {name} is not shipped"
    spec = _pod_spec(w)
    c = spec["containers"][0]
    return spec, c, _args(c)


def test_serve_reads_the_models_the_training_job_writes():
    t_spec, t_c, t_args = _container("CronJob", "tidewise-train")
    assert t_args.command == "train" and t_args.registry
    t_mount, t_vol = _mount_of(t_spec, t_c, t_args.registry)
    assert "persistentVolumeClaim" in t_vol and not t_mount.get("readOnly")
    claim = t_vol["persistentVolumeClaim"]["claimName"]
    s_spec, s_c, s_args = _container("Deployment", "tidewise-serve")
    assert s_args.command == "serve"
    assert s_args.registry, "serve is not given --registry: the trained models are never used"
    found = _mount_of(s_spec, s_c, s_args.registry)
    assert found, f"serve --registry {s_args.registry} is on no mounted volume"
    s_mount, s_vol = found
    assert s_vol.get("persistentVolumeClaim", {}).get("claimName") == claim, \
        f"serve's --registry is not on the training job's claim {claim}"
    # the same folder of the claim: registry paths relative to their mounts agree
    assert os.path.relpath(s_args.registry, s_mount["mountPath"]) == os.path.relpath(t_args.registry, t_mount["mountPath"])
    assert s_mount.get("readOnly") is True and s_vol["persistentVolumeClaim"].get("readOnly") is True, \
        "serve must mount the models read-only"
    pvc = _find("PersistentVolumeClaim", claim)
    assert "ReadWriteMany" in pvc["spec"]["accessModes"] or "ReadOnlyMany" in pvc["spec"]["accessModes"]


def test_serve_verifies_with_the_key_the_training_job_signs_with():
    """The same Secret key on both sides: a registry signed by one and verified by the other."""
    secrets = []
    for kind, name in (("CronJob", "tidewise-train"), ("Deployment", "tidewise-serve")):
        spec, c, args = _container(kind, name)
        assert args.registry_key, f"{name} is not given --registry-key: registry versions go unsigned"
        found = _mount_of(spec, c, args.registry_key)
        assert found and "secret" in found[1], f"{name}: --registry-key {args.registry_key} is not on a Secret"
        mount, vol = found
        assert mount.get("readOnly") is True
        secrets.append((vol["secret"]["secretName"], os.path.relpath(args.registry_key, mount["mountPath"])))
        mode = vol["secret"].get("defaultMode", 0o644)
        ctx = spec.get("securityContext", {})
        readable = mode & 0o004 or (mode & 0o040 and ctx.get("fsGroup") is not None)
        assert readable, f"{name}: the key file (mode {mode:o}) is unreadable for the non-root user"
    assert secrets[0] == secrets[1], f"training signs with {secrets[0]}, serve verifies with {secrets[1]}"


def _grants(sa: str, namespace: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the ServiceAccount holds through the shipped bindings."""
    out = set()
    for b in DOCS:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s["name"] == sa and s.get("namespace", b["metadata"].get(
                "namespace")) == namespace for s in b.get("subjects", [])):
            continue
        role = _find(b["roleRef"]["kind"], b["roleRef"]["name"])
        assert role, f"{b['kind']} {b['metadata']['name']}: role {b['roleRef']['name']} is not shipped"
        for r in role["rules"]:
            out |= {(g, res, v) for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}
    return out


def test_every_binding_names_a_shipped_role_and_account():
    for b in DOCS:
        if b["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            ref = (b["roleRef"]["kind"], b["roleRef"]["name"])
            assert ref in BUILTIN_ROLES or _find(*ref), b["metadata"]["name"]
            for s in b["subjects"]:
                assert _find("ServiceAccount", s["name"], s.get("namespace")), f"{b['metadata']['name']}: {s}"


def test_the_reclaim_plan_has_a_writer_and_a_reader_with_their_grants():
    e_spec, e_c, e_args = _container("DaemonSet", "tidewise-enforcer")
    s_spec, s_c, s_args = _container("Deployment", "tidewise-serve")
    assert e_args.reclaim_plan_from == "api", "the agent must read the plan serve publishes (its Node)"
    ns = "tidewise"
    assert ("", "nodes", "get") in _grants(e_spec["serviceAccountName"], ns)
    serve = _grants(s_spec["serviceAccountName"], ns)
    assert ("", "nodes", "patch") in serve and ("", "nodes/status", "patch") in serve
    # shipped in review mode (no --apply): the agents lend nothing until an operator adds --apply and
    # selects nodes (serve.select.node, docs/serve-vpa.md "From review to apply"); that is fail closed
    assert not s_args.apply, "serve starts in review mode"
    # serve publishes the plan with the node write: its shipped config must not turn that off
    cfg_mount, cfg_vol = _mount_of(s_spec, s_c, s_args.config)
    cm = _find("ConfigMap", cfg_vol["configMap"]["name"], ns)
    settings = yaml.safe_load(cm["data"][os.path.relpath(s_args.config, cfg_mount["mountPath"])])
    reclaim = (settings.get("serve") or {}).get("reclaim") or {}
    assert reclaim.get("enabled", True) and reclaim.get("write_node_status", True)
    env = {e["name"]: e for e in e_c.get("env", [])}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert e_args.node == "<NODE_NAME>"
