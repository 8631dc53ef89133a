"""The kustomize install (deploy/kustomization.yaml, kustomize/review, kustomize/apply) rendered by
the real `kubectl kustomize`: every object valid for its kind, the namespace and the image set once
and reaching every object, --apply only in the apply overlay, and the rendered objects equal to the
plain deploy/*.yaml files, so that the two ways to install cannot drift apart."""
from __future__ import annotations

import copy
import functools
import os
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from testsupport.k8s_schemas import validate_object
from tests.test_deploy_connect import _docs  # every object of deploy/*.yaml, with its _file
from tests.test_rbac import SERVE_OPT_IN
from tidewise.cli import build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"  # Debian's kubernetes-client (make system-deps)
TARGETS = ("deploy", "kustomize/review", "kustomize/apply")
# deploy/*.yaml not in the base: serve's opt-in grants, and the PrometheusRule (needs the Prometheus Operator)
OPT_IN = SERVE_OPT_IN | {"alerts.yaml"}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
IN_KUBE_SYSTEM = {("RoleBinding", "tidewise-scheduler-extension-apiserver-authentication-reader")}
TIDEWISE_IMAGE = "ghcr.io/tidewise/tidewise"
# where the namespace is written inside config text, out of kustomize's reach (deploy/kustomization.yaml says so)
IN_TEXT = re.compile(r"lease_namespace: (\S+)|tidewise-extender\.(\S+?)\.svc")

Obj = dict[str, Any]


@functools.lru_cache(maxsize=None)
def kustomize_version() -> tuple[int, ...]:
    if not os.path.exists(KUBECTL):
        pytest.fail(f"{KUBECTL} is missing: `make system-deps` installs Debian's kubernetes-client")
    out = subprocess.run([KUBECTL, "version", "--client"], capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"Kustomize Version: v(\d+)\.(\d+)", out)
    return tuple(map(int, found.groups())) if found else (0,)


def render(folder: str) -> list[Obj]:
    # `replacements` need kustomize >= 4.1 (kubectl >= 1.22; Debian bookworm's kubernetes-client is 1.20)
    assert kustomize_version() >= (4, 1), f"{KUBECTL}'s kustomize is {kustomize_version()}: kubectl >= 1.22 is needed"
    out = subprocess.run([KUBECTL, "kustomize", folder], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"kubectl kustomize {folder}: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@functools.lru_cache(maxsize=None)
def rendered(target: str) -> tuple[Obj, ...]:
    return tuple(render(os.path.join(ROOT, target)))


def base() -> Obj:
    with open(os.path.join(ROOT, "deploy", "kustomization.yaml"), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def by_key(objs: Any) -> dict[tuple[str, str], Obj]:
    out = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    assert len(out) == len(list(objs)), "two objects of one kind share a name"
    return out


def plain() -> dict[tuple[str, str], Obj]:
    files = set(base()["resources"])
    return by_key([{k: v for k, v in d.items() if k != "_file"} for d in _docs() if d["_file"] in files])


def containers(o: Obj) -> list[Obj]:
    spec = o.get("spec", {})
    pod = spec.get("jobTemplate", {}).get("spec", spec).get("template", {}).get("spec", {})
    return pod.get("initContainers", []) + pod.get("containers", [])


def serve_args(objs: Any) -> Any:
    [c] = containers(by_key(objs)[("Deployment", "tidewise-serve")])
    return build_parser().parse_args(c["args"])


def test_every_kubernetes_file_of_deploy_is_in_the_base_or_named_opt_in():
    files = {d["_file"] for d in _docs()}
    listed = set(base()["resources"])
    assert listed <= files and files - listed == OPT_IN & files, f"not in the base nor opt-in: {files - listed - OPT_IN}"


@pytest.mark.parametrize("target", TARGETS)
def test_every_rendered_object_validates_against_its_schema(target):
    objs = rendered(target)
    assert len(objs) == len(plain())
    for o in objs:
        validate_object(o)


@pytest.mark.parametrize("target", TARGETS)
def test_the_namespace_is_the_one_set_on_every_object_and_subject(target):
    ns = base()["namespace"]
    for o in rendered(target):
        key = (o["kind"], o["metadata"]["name"])
        want = None if o["kind"] in CLUSTER_SCOPED else "kube-system" if key in IN_KUBE_SYSTEM else ns
        assert o["metadata"].get("namespace") == want, key
        for s in o.get("subjects", []):
            assert s["kind"] != "ServiceAccount" or s["namespace"] == ns, key


@pytest.mark.parametrize("target", TARGETS)
def test_every_tidewise_container_runs_the_image_set(target):
    [image] = [i for i in base()["images"] if i["name"] == TIDEWISE_IMAGE]
    want = image.get("newName", TIDEWISE_IMAGE) + (f"@{image['digest']}" if "digest" in image else f":{image['newTag']}")
    ours = sum(c["image"].startswith(TIDEWISE_IMAGE) for o in plain().values() for c in containers(o))
    used = sorted(c["image"] for o in rendered(target) for c in containers(o))
    assert ours == 4 and used.count(want) == ours  # serve, train, enforce, extender
    assert all(i == want or i.startswith("registry.k8s.io/kube-scheduler:") for i in used)


def test_review_serves_without_apply_and_apply_with_it():
    assert serve_args(rendered("kustomize/review")).apply is False
    assert serve_args(rendered("kustomize/apply")).apply is True
    assert rendered("kustomize/review") == rendered("deploy")  # the review overlay is the base


@pytest.mark.parametrize("target", TARGETS)
def test_the_rendered_objects_are_the_plain_files(target):
    """With the shipped namespace and image the rendering changes nothing but the apply overlay's
    --apply: a field added to one way to install and not the other fails here."""
    got = by_key(copy.deepcopy(rendered(target)))
    if target == "kustomize/apply":
        [c] = containers(got[("Deployment", "tidewise-serve")])
        assert c["args"][-1] == "--apply"
        c["args"].pop()
    want = plain()
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], f"{key}: kustomize renders it differently from its plain file"


def _with(tmp_path, namespace: str, image: str) -> list[Obj]:
    """The base copied with another namespace and image, set only in its kustomization.yaml."""
    copied = shutil.copytree(os.path.join(ROOT, "deploy"), tmp_path / "deploy")
    k = base()
    k["namespace"] = namespace
    k["images"] = [dict(i, newName=image.split(":")[0], newTag=image.split(":")[1]) for i in k["images"]]
    (copied / "kustomization.yaml").write_text(yaml.safe_dump(k))
    return render(str(copied))


def test_another_namespace_and_image_set_once_reach_every_object(tmp_path):
    objs = _with(tmp_path, "autoscaling", "registry.example/tw:9.9")
    back = []
    for o in copy.deepcopy(objs):
        key = (o["kind"], o["metadata"]["name"])
        if o["kind"] not in CLUSTER_SCOPED and key not in IN_KUBE_SYSTEM:
            assert o["metadata"]["namespace"] == "autoscaling", key
            o["metadata"]["namespace"] = "tidewise"
        for s in o.get("subjects", []):
            assert s["namespace"] == "autoscaling", key
            s["namespace"] = "tidewise"
        for m in o.get("spec", {}).get("matchConditions", []):
            assert "'system:serviceaccount:autoscaling:tidewise-enforcer'" in m["expression"], key
            m["expression"] = m["expression"].replace(":autoscaling:", ":tidewise:")
        for c in containers(o):
            if c["image"] == "registry.example/tw:9.9":
                c["image"] = "ghcr.io/tidewise/tidewise:0.1.0"
        back.append(o)
    # nothing else changed: mapped back, it is the shipped rendering
    assert by_key(back) == by_key(rendered("deploy"))
    # the two values kustomize cannot reach, which the kustomization's comment tells to change by hand
    text = [v for o in objs if o["kind"] == "ConfigMap" for v in o["data"].values()]
    left = sorted(m.group(0) for t in text for m in IN_TEXT.finditer(t))
    assert left == ["lease_namespace: tidewise", "tidewise-extender.tidewise.svc"]


def test_the_kube_system_binding_and_the_admission_policies_are_not_moved(tmp_path):
    """The checks above hold because of deploy/kustomization.yaml's replacements and transformers:
    without them kustomize moves the scheduler's RoleBinding and namespaces the admission policies."""
    copied = shutil.copytree(os.path.join(ROOT, "deploy"), tmp_path / "deploy")
    k = {key: v for key, v in base().items() if key not in ("replacements", "transformers")}
    (copied / "kustomization.yaml").write_text(yaml.safe_dump(k))
    objs = by_key(render(str(copied)))
    assert objs[next(iter(IN_KUBE_SYSTEM))]["metadata"]["namespace"] == "tidewise"
    assert objs[("ValidatingAdmissionPolicy", "tidewise-enforcer-own-cnr")]["metadata"]["namespace"] == "tidewise"
