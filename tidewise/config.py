"""The settings file: one YAML mapping with a section per package, for example

    prometheus:
      url: http://prometheus.monitoring:9090
      bearer_token_file: /var/run/secrets/kubernetes.io/serviceaccount/token
      queries:
        cpu: 'sum by (namespace, pod, container) (rate(container_cpu_usage_seconds_total{container!="",pod!=""}[5m]))'

Sections are returned as plain dicts and turned into each package's settings dataclass by
`settings_from`, which rejects unknown keys so that a typo is an error, not a silent default.
An unknown section (`prometeus:`) or key, in any section, is refused when the file is loaded,
whatever the command (the keys: `tidewise.config_keys`).
"""
from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Any, TypeVar

import yaml

from contracts.errors import InputError

T = TypeVar("T")

# The sections the commands read: fetch/train/serve read `prometheus`, serve `serve`, enforce `enforcer`.
SECTIONS = ("enforcer", "prometheus", "serve")


def unknown_key_message(where: str, unknown: list[str], known: list[str], what: str = "key") -> str:
    """One line: `<where>: unknown key(s) [...] (did you mean ...?); valid: ...`, the nearest match suggested."""
    hints = []
    for key in unknown:
        near = difflib.get_close_matches(str(key), known, n=1)
        if near:
            hints.append(f"{near[0]!r}" + (f" for {key!r}" if len(unknown) > 1 else ""))
    hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
    return f"{where}: unknown {what}(s) {unknown}{hint}; valid: {', '.join(sorted(known))}"


def load_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    if not os.path.isfile(path):
        raise InputError(f"config file {path}: no such file" if not os.path.exists(path) else
                         f"config file {path} is not a file; give the YAML settings file")
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except yaml.YAMLError as exc:
        raise InputError(f"config file {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"config file {path} must be a mapping of sections ({', '.join(f'{k}:' for k in SECTIONS)})")
    unknown = sorted((str(k) for k in data if k not in SECTIONS), key=str)
    if unknown:
        raise InputError(unknown_key_message(f"config file {path}", unknown, list(SECTIONS), what="section"))
    for name, section in data.items():
        if section is not None and not isinstance(section, dict):
            raise InputError(f"config file {path}: section {name!r} must be a mapping of keys, not {type(section).__name__}")
        check_keys(path, name, section)
    return data


def check_keys(path: str, name: str, section: dict[str, Any] | None) -> None:
    """Refuse a key that no command would read, in every section and sub-section of the file,
    whatever the command: `prometheus: {urll: x}` is an error for `forecast` as for `fetch`."""
    from tidewise.config_keys import Keys, section_keys

    def walk(where: str, values: dict[str, Any], keys: Keys) -> None:
        known = keys.known(where)
        unknown = sorted(str(k) for k in values if k not in known)
        if unknown:
            raise InputError(unknown_key_message(f"config file {path}, section {where!r}", unknown, list(known)))
        for key, value in values.items():
            nested = known[key]
            if nested is None or value is None:
                continue
            if not isinstance(value, dict):
                raise InputError(f"config file {path}, section {where!r}: {key} must be a mapping of keys, "
                                 f"not {type(value).__name__}")
            walk(f"{where}.{key}", value, nested)

    keys = section_keys(name)
    if keys is not None and section:  # None: the settings' source is not installed; the command checks its own
        walk(name, section, keys)


def settings_from(cls: type[T], section: dict[str, Any] | None, name: str, **overrides: Any) -> T:
    """Build dataclass `cls` from a config section plus command-line overrides (None = not given)."""
    section = dict(section or {})
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(section) - known)
    if unknown:
        raise InputError(unknown_key_message(f"config section {name!r}", unknown, sorted(known)))
    section.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return cls(**section)
    except TypeError as exc:
        raise InputError(f"config section {name!r}: {exc}") from exc
