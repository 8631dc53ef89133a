"""deploy/training-cronjob.yaml: valid against Kubernetes' schema, and its arguments parse."""
import os
import shlex

import kubernetes_validate
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATH = os.path.join(ROOT, "deploy", "training-cronjob.yaml")
K8S_VERSION = "1.33.0"


def _docs():
    with open(PATH) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


@pytest.mark.parametrize("index", range(4))
def test_every_object_validates(index):
    docs = _docs()
    assert len(docs) == 4
    kubernetes_validate.validate(docs[index], K8S_VERSION, strict=True)


def test_invalid_field_is_caught():
    """The validator really checks: a typo in the CronJob is an error."""
    cj = next(d for d in _docs() if d["kind"] == "CronJob")
    cj["spec"]["concurrencyPolcy"] = "Forbid"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(cj, K8S_VERSION, strict=True)


def test_cronjob_runs_a_valid_train_command():
    from tidewise.cli import build_parser

    cj = next(d for d in _docs() if d["kind"] == "CronJob")
    spec = cj["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    args = build_parser().parse_args(c["args"])
    assert args.command == "train" and args.source == "prometheus" and args.registry == "/models"
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    claims = {v["name"]: v for v in pod["volumes"]}
    assert claims[mounts["/models"]]["persistentVolumeClaim"]["claimName"] == "tidewise-models"
    assert c["securityContext"]["readOnlyRootFilesystem"] and pod["securityContext"]["runAsNonRoot"]
    assert shlex.split(" ".join(c["args"]))  # plain arguments, no shell
