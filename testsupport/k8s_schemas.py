"""Validation of objects Tidewise writes: the vendored CRD schemas (schemas/k8s/README.md names
their sources and licences) for custom kinds, Kubernetes' own OpenAPI for built-in ones."""
from __future__ import annotations

import functools
import os

import jsonschema
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K8S_SCHEMAS = os.path.join(ROOT, "schemas", "k8s")
CRDS = {
    "VerticalPodAutoscaler": "vpa-v1-crd.yaml",
    "CustomNodeResource": "katalyst-node.katalyst.kubewharf.io_customnoderesources.yaml",
    "ResourceRecommend": "katalyst-recommendation.katalyst.kubewharf.io_resourcerecommends.yaml",
    "ServiceProfileDescriptor": "katalyst-workload.katalyst.kubewharf.io_serviceprofiledescriptors.yaml",
    "IntelligentHorizontalPodAutoscaler":
        "katalyst-autoscaling.katalyst.kubewharf.io_intelligenthorizontalpodautoscalers.yaml",
    "TideNodePool": "katalyst-tide.katalyst.kubewharf.io_tidenodepools.yaml",
}
K8S_VERSION = "1.33.0"


@functools.lru_cache(maxsize=None)
def _crd(kind: str) -> dict:
    with open(os.path.join(K8S_SCHEMAS, CRDS[kind])) as fh:
        return next(d for d in yaml.safe_load_all(fh) if d and d["spec"]["names"]["kind"] == kind)


@functools.lru_cache(maxsize=None)
def crd_validator(kind: str) -> jsonschema.Draft7Validator:
    version = next(v for v in _crd(kind)["spec"]["versions"] if v.get("served") and v.get("storage"))
    return jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"],
                                      format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def schema_errors(obj: dict) -> list[str]:
    """Where a custom-kind `obj` breaks its CRD (schema and group); [] when valid or not a CRD kind."""
    kind = obj.get("kind")
    if kind not in CRDS:
        return []
    errors = [f"{'/'.join(map(str, e.path))}: {e.message}"
              for e in sorted(crd_validator(kind).iter_errors(obj), key=lambda e: list(e.path))]
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    if group != _crd(kind)["spec"]["group"]:
        errors.append(f"apiVersion group {group!r} != {_crd(kind)['spec']['group']!r}")
    return errors


def has_status_subresource(kind: str) -> bool:
    """Whether the custom `kind` has a status subresource (its create then ignores `status`)."""
    return kind in CRDS and any("status" in (v.get("subresources") or {}) for v in _crd(kind)["spec"]["versions"])


def validate_object(obj: dict) -> None:
    """Raise unless `obj` is valid for its kind: the published CRD schema, or Kubernetes' own."""
    if obj.get("kind") in CRDS:
        errors = schema_errors(obj)
        if errors:
            raise AssertionError(f"{obj['kind']} {obj.get('metadata', {}).get('name')}: " + "; ".join(errors[:5]))
        return
    import kubernetes_validate

    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
