"""The serve pod of kustomize/review-rwo run as its two containers would run: the training container's
command line as rendered (`train ... --every 24h`, a process that keeps running) and serve's, over one
models folder, with a real Prometheus behind both.

The pod is played on this machine: each volume of the rendered pod is a folder (one for the claim,
which both containers mount; the ConfigMaps' and the Secret's keys as files, as the kubelet writes
them) and each container's paths are moved onto its mounts. What differs from the cluster, and why:
the Prometheus URL in the ConfigMaps is the local server's; serve runs `--once` (plus `--now` at the end
of the backfilled history, `--kubeconfig` to the API fake and `--report`) instead of forever, to read
the outcome of one run; the image's `tidewise` is `python -m tidewise` of this checkout."""
from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from typing import Any

import pandas as pd
import pytest
import yaml

from studies.demo import cluster_objects
from tests.conftest import ROOT, write_kubeconfig
from tests.test_kustomize import by_key, rendered

pytestmark = pytest.mark.integration

Obj = dict[str, Any]


class PlayedPod:
    """The volumes of a rendered pod as folders under `root`; the containers' command lines mapped onto them."""

    def __init__(self, objs: tuple[Obj, ...], workload: Obj, root: str, prometheus_url: str):
        self.spec = workload["spec"]["template"]["spec"]
        self.root = root
        kinds = by_key(objs)
        self.volumes: dict[str, str] = {}
        for v in self.spec["volumes"]:
            if "persistentVolumeClaim" in v:
                folder = self._folder("claim-" + v["persistentVolumeClaim"]["claimName"])
            elif "configMap" in v:
                data = kinds[("ConfigMap", v["configMap"]["name"])]["data"]
                folder = self._files("configmap-" + v["configMap"]["name"],
                                     {k: self._with_prometheus(t, prometheus_url) if k == "config.yaml" else t
                                      for k, t in data.items()})
            elif "secret" in v:  # the registry key, made as README.md says: 32 random bytes in base64
                folder = self._files("secret-" + v["secret"]["secretName"],
                                     {"key": base64.b64encode(secrets.token_bytes(32)).decode()})
            else:  # emptyDir, and the projected API token (the API fake is reached by --kubeconfig)
                folder = self._folder(v["name"])
            self.volumes[v["name"]] = folder

    def _folder(self, name: str) -> str:
        path = os.path.join(self.root, name)
        os.makedirs(path, exist_ok=True)
        return path

    def _files(self, name: str, files: dict[str, str]) -> str:
        path = self._folder(name)
        for key, text in files.items():
            with open(os.path.join(path, key), "w", encoding="utf-8") as fh:
                fh.write(text)
        return path

    @staticmethod
    def _with_prometheus(text: str, url: str) -> str:
        doc = yaml.safe_load(text)
        doc["prometheus"]["url"] = url
        return yaml.safe_dump(doc)

    def container(self, name: str) -> Obj:
        [c] = [c for c in self.spec["containers"] if c["name"] == name]
        return c

    def host_path(self, name: str, path: str) -> str:
        """Where `path` of container `name` is on this machine: under the folder of its mount."""
        mounts = sorted(self.container(name).get("volumeMounts", []), key=lambda m: -len(m["mountPath"]))
        for m in mounts:
            if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/"):
                return os.path.join(self.volumes[m["name"]], os.path.relpath(path, m["mountPath"]))
        return path

    def argv(self, name: str) -> list[str]:
        args = [self.host_path(name, a) if a.startswith("/") else a for a in self.container(name)["args"]]
        return [sys.executable, "-m", "tidewise", *args]  # the image's ENTRYPOINT ["tidewise"]

    def env(self, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = ROOT
        env["TMPDIR"] = self.host_path(name, "/tmp")
        for e in self.container(name).get("env", []):
            env[e["name"]] = e.get("value", f"{name}-pod")  # valueFrom: the pod's name
        return env


def test_training_writes_a_version_serve_verifies_and_serves_over_one_folder(prometheus_server, tmp_path):
    server, cluster = prometheus_server
    objs = rendered("kustomize/review-rwo")
    pod = PlayedPod(objs, by_key(objs)[("Deployment", "tidewise-serve")], str(tmp_path / "pod"), server.url)
    models = pod.host_path("train", "/models")
    assert models == pod.host_path("serve", "/models") and os.listdir(models) == []  # one empty folder

    with open(tmp_path / "train.log", "w") as log:
        train = subprocess.Popen(pod.argv("train"), env=pod.env("train"), cwd=str(tmp_path), stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 1200
        while not os.path.exists(os.path.join(models, "latest")) and train.poll() is None:
            assert time.monotonic() < deadline, "no registry version within 20 min"
            time.sleep(2)
        assert train.poll() is None, f"the training container ended: {(tmp_path / 'train.log').read_text()[-3000:]}"
        version = os.path.basename(os.path.realpath(os.path.join(models, "latest")))
        assert os.path.isfile(os.path.join(models, version, "manifest.sha256"))

        fake_objects = cluster_objects(cluster)
        from testsupport.kube_fake import FakeApiServer

        fake = FakeApiServer(fake_objects).start()
        try:
            now = (cluster.end - pd.Timedelta("5min")).strftime("%Y-%m-%dT%H:%M:%SZ")
            report = tmp_path / "report.json"
            serve = subprocess.run(
                [*pod.argv("serve"), "--once", "--now", now, "--report", str(report),
                 "--kubeconfig", write_kubeconfig(tmp_path / "kubeconfig", fake.url)],
                env=pod.env("serve"), cwd=str(tmp_path), capture_output=True, text=True, timeout=900)
        finally:
            fake.stop()
        assert serve.returncode == 0, serve.stderr[-3000:]
        rep = json.loads(report.read_text())
        assert rep["outcome"] == "ok" and rep["registry"] == version, (rep["outcome"], rep["reason"], rep["registry"])
        assert not fake.writes(), "review mode writes nothing"
        assert train.poll() is None, "training keeps its schedule (--every) while serve reads"
    finally:
        train.send_signal(signal.SIGTERM)  # what the kubelet sends when the pod stops
        train.wait(timeout=60)
    assert "next training run in 24.0 h" in (tmp_path / "train.log").read_text()
