"""The install without ReadWriteMany storage (kustomize/review-rwo, kustomize/apply-rwo: the
kustomize/rwo-models component over the review and apply installs), rendered by the real `kubectl
kustomize`: no ReadWriteMany anywhere, one pod on the models claim with a writer and a reader of the
same folder, the training container's command line the CronJob's plus `--every`, no API token in the
training container, and every other object as the base renders it.
tests/integration/test_rwo_models.py runs the two containers of that pod over one folder."""
from __future__ import annotations

import copy
import os
import shutil
from typing import Any

import pytest
import yaml

from testsupport.k8s_schemas import validate_object
from tests.test_kustomize import base, by_key, containers, render, rendered
from tidewise.cli import build_parser

RWO = {"kustomize/review-rwo": "kustomize/review", "kustomize/apply-rwo": "kustomize/apply"}
CLAIM = "tidewise-models"
SERVE = ("Deployment", "tidewise-serve")
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# what the component changes; every other object renders as in the install it builds on
CHANGED = {("PersistentVolumeClaim", CLAIM), SERVE}
REMOVED = {("CronJob", "tidewise-train"), ("ServiceAccount", "tidewise-train")}

Obj = dict[str, Any]


def pod(o: Obj) -> Obj:
    return o["spec"]["template"]["spec"]


def container(o: Obj, name: str) -> Obj:
    [c] = [c for c in containers(o) if c["name"] == name]
    return c


def mount_of(spec: Obj, c: Obj, path: str) -> tuple[Obj, Obj]:
    """The volumeMount holding `path` in container `c` (the longest mount path that contains it) and its volume."""
    found = [m for m in c.get("volumeMounts", []) if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert found, f"{c['name']}: {path} is on no mounted volume"
    m = max(found, key=lambda m: len(m["mountPath"]))
    [vol] = [v for v in spec["volumes"] if v["name"] == m["name"]]
    return m, vol


@pytest.mark.parametrize("target", RWO)
def test_no_read_write_many_anywhere_and_every_object_valid(target):
    objs = rendered(target)
    assert "ReadWriteMany" not in yaml.safe_dump_all(objs) and "ReadOnlyMany" not in yaml.safe_dump_all(objs)
    claims = [o for o in objs if o["kind"] == "PersistentVolumeClaim"]
    assert [c["metadata"]["name"] for c in claims] == [CLAIM]
    assert claims[0]["spec"]["accessModes"] == ["ReadWriteOnce"]
    for o in objs:
        validate_object(o)


@pytest.mark.parametrize("target", RWO)
def test_one_pod_mounts_the_claim_one_replica_recreated(target):
    objs = by_key(rendered(target))
    on_claim = [key for key, o in objs.items() if "template" in o.get("spec", {}) or "jobTemplate" in o.get("spec", {})
                for v in (o["spec"].get("jobTemplate", {}).get("spec", o["spec"])["template"]["spec"].get("volumes", []))
                if v.get("persistentVolumeClaim", {}).get("claimName") == CLAIM]
    assert on_claim == [SERVE], on_claim
    serve = objs[SERVE]
    # two replicas on two nodes cannot both attach a ReadWriteOnce claim; a rolling update would wait forever
    assert serve["spec"]["replicas"] == 1 and serve["spec"]["strategy"] == {"type": "Recreate"}
    assert REMOVED.isdisjoint(objs), "the training CronJob (and its ServiceAccount) would need the claim too"


@pytest.mark.parametrize("target", RWO)
def test_training_writes_the_folder_serve_reads_verified_with_the_same_key(target):
    serve = by_key(rendered(target))[SERVE]
    spec = pod(serve)
    parser = build_parser()
    s_c, t_c = container(serve, "serve"), container(serve, "train")
    s_args, t_args = parser.parse_args(s_c["args"]), parser.parse_args(t_c["args"])
    assert (s_args.command, t_args.command) == ("serve", "train") and t_args.every == "24h"
    (s_mount, s_vol), (t_mount, t_vol) = mount_of(spec, s_c, s_args.registry), mount_of(spec, t_c, t_args.registry)
    assert s_vol is t_vol and s_vol["persistentVolumeClaim"]["claimName"] == CLAIM
    assert os.path.relpath(s_args.registry, s_mount["mountPath"]) == os.path.relpath(t_args.registry, t_mount["mountPath"])
    assert s_mount.get("readOnly") is True and not t_mount.get("readOnly"), "serve reads, training writes"
    assert not s_vol["persistentVolumeClaim"].get("readOnly"), "a read-only volume would refuse training's writes"
    keys = [mount_of(spec, c, a.registry_key)[1]["secret"]["secretName"] for c, a in ((s_c, s_args), (t_c, t_args))]
    assert keys == ["tidewise-registry-key"] * 2
    assert t_c["image"] == s_c["image"]


@pytest.mark.parametrize("target", RWO)
def test_the_training_container_runs_the_cronjob_s_command_every_day(target):
    """The same command line, settings, limits and locks as deploy/training-cronjob.yaml, plus --every."""
    job = by_key(rendered(RWO[target]))[("CronJob", "tidewise-train")]
    [job_c] = containers(job)
    job_spec = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    serve = by_key(rendered(target))[SERVE]
    t_c = container(serve, "train")
    assert t_c["args"] == job_c["args"] + ["--every", "24h"]
    for field in ("env", "securityContext"):
        assert t_c[field] == job_c[field], field
    assert t_c["resources"]["limits"] == job_c["resources"]["limits"]
    assert t_c["resources"]["requests"]["memory"] == job_c["resources"]["requests"]["memory"]
    for m in job_c["volumeMounts"]:  # each path on a volume of the same source
        here, vol = mount_of(pod(serve), t_c, m["mountPath"])
        [was] = [v for v in job_spec["volumes"] if v["name"] == m["name"]]
        assert (here["mountPath"], bool(here.get("readOnly"))) == (m["mountPath"], bool(m.get("readOnly")))
        assert {k: v for k, v in vol.items() if k != "name"} == {k: v for k, v in was.items() if k != "name"}, m


@pytest.mark.parametrize("target", RWO)
def test_only_serve_holds_an_api_token(target):
    """Training reads Prometheus only: as the CronJob's pod, its container gets no service-account token."""
    serve = by_key(rendered(target))[SERVE]
    spec = pod(serve)
    assert spec["automountServiceAccountToken"] is False
    tokens = {v["name"] for v in spec["volumes"]
              if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))}
    assert tokens == {"api-token"}
    s_c, t_c = container(serve, "serve"), container(serve, "train")
    assert mount_of(spec, s_c, TOKEN_PATH + "/token")[0] == {"name": "api-token", "mountPath": TOKEN_PATH, "readOnly": True}
    assert not any(m["name"] in tokens or m["mountPath"].startswith("/var/run/secrets") for m in t_c["volumeMounts"])


def test_apply_only_in_the_apply_overlay_and_never_for_training():
    parser = build_parser()
    for target, applies in (("kustomize/review-rwo", False), ("kustomize/apply-rwo", True)):
        serve = by_key(rendered(target))[SERVE]
        assert parser.parse_args(container(serve, "serve")["args"]).apply is applies
        assert "--apply" not in container(serve, "train")["args"]


@pytest.mark.parametrize("target", RWO)
def test_everything_else_renders_as_the_install_it_builds_on(target):
    got, want = by_key(copy.deepcopy(rendered(target))), by_key(copy.deepcopy(rendered(RWO[target])))
    assert got.keys() == want.keys() - REMOVED
    for key in got.keys() - CHANGED:
        assert got[key] == want[key], key
    # serve's own container changes by the token mount only
    s_got, s_want = container(got[SERVE], "serve"), container(want[SERVE], "serve")
    s_got["volumeMounts"] = [m for m in s_got["volumeMounts"] if m["name"] != "api-token"]
    assert s_got == s_want


def test_the_image_set_once_in_the_base_reaches_the_training_container(tmp_path):
    for folder in ("deploy", "kustomize"):
        shutil.copytree(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), folder),
                        tmp_path / folder)
    k = base()
    k["images"] = [{"name": i["name"], "newName": "registry.example/tw", "digest": "sha256:" + "a" * 64}
                   if i["name"].endswith("/tidewise") else i for i in k["images"]]
    (tmp_path / "deploy" / "kustomization.yaml").write_text(yaml.safe_dump(k))
    serve = by_key(render(str(tmp_path / "kustomize" / "review-rwo")))[SERVE]
    assert {c["name"]: c["image"] for c in containers(serve)} == {
        "serve": "registry.example/tw@sha256:" + "a" * 64, "train": "registry.example/tw@sha256:" + "a" * 64}
