"""The settings file: one YAML mapping with a section per package, for example

    prometheus:
      url: http://prometheus.monitoring:9090
      bearer_token_file: /var/run/secrets/kubernetes.io/serviceaccount/token
      queries:
        cpu: 'sum by (namespace, pod, container) (rate(container_cpu_usage_seconds_total{container!="",pod!=""}[5m]))'

Sections are returned as plain dicts and turned into each package's settings dataclass by
`settings_from`, which rejects unknown keys so that a typo is an error, not a silent default.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, TypeVar

import yaml

from predictor.errors import InputError

T = TypeVar("T")


def load_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    if not os.path.exists(path):
        raise InputError(f"config file {path}: no such file")
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except yaml.YAMLError as exc:
        raise InputError(f"config file {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"config file {path} must be a mapping of sections (prometheus:, forecast:, ...)")
    return data


def settings_from(cls: type[T], section: dict[str, Any] | None, name: str, **overrides: Any) -> T:
    """Build dataclass `cls` from a config section plus command-line overrides (None = not given)."""
    section = dict(section or {})
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(section) - known)
    if unknown:
        raise InputError(f"config section {name!r}: unknown key(s) {unknown}; known: {sorted(known)}")
    section.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return cls(**section)
    except TypeError as exc:
        raise InputError(f"config section {name!r}: {exc}") from exc
