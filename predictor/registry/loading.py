"""Reading a registry version: resolve it, verify it, then parse its artifacts (JSON and NumPy
arrays only, never a pickle); fall back to the newest version that verifies and loads.

A loaded `RegistryVersion` carries the `Seal` of what was verified, so serving re-checks it
before each use (`check_unchanged`) without hashing or parsing anything again: one load per run.
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from predictor.history import History, history_from_frame
from predictor.models import MODELS
from predictor.models.gbm import GlobalGBM
from predictor.models.decision_time import DecisionTimeGBM
from predictor.models.lightgbm_text import ModelTextError
from predictor.models.trees import BoosterText
from predictor.registry.manifest import (DECISION_KINDS, DECISION_PREFIX, GLOBAL_ARRAYS, GLOBAL_META, LATEST,
                                         MANIFEST, PROFILES_FILE, RECENT_FILE, SERIES_FILE, RegistryError, Seal,
                                         UnloadableVersion, check_sealed, verify_sealed)
from predictor.registry.probe import ProbeError, probe_lightgbm
from predictor.types import ENSEMBLE, GLOBAL, Choice

log = logging.getLogger(__name__)

_VERSION_RE = re.compile(r"^\d{8}T\d{6}Z(-[0-9a-f]{6})?$")
MAX_STEP_SECONDS = 7 * 86400  # a step or stored-history step longer than a week is no Tidewise version's


@dataclass
class RegistryVersion:
    """A verified version: manifest, per-series choices, and the loaded global model (or None)."""

    path: str
    version: str
    manifest: dict[str, Any]
    series: dict[str, dict[str, Any]]
    global_model: GlobalGBM | None = None
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    choices: dict[str, Choice] = field(default_factory=dict)  # series -> its stored choice, checked on load
    seal: Seal | None = None  # the folder as verified; None: built in memory, nothing to re-check
    decision_models: dict[str, DecisionTimeGBM] = field(default_factory=dict)  # "vpa"/"hpa" -> decision-time model
    decision_errors: dict[str, str] = field(default_factory=dict)  # kind -> why its model did not load

    @property
    def quantiles(self) -> tuple[float, ...]:
        return tuple(float(q) for q in self.manifest["quantiles"])


def list_versions(registry_dir: str) -> list[str]:
    """Version folders, oldest first (names sort by creation time)."""
    if not os.path.isdir(registry_dir):
        return []
    return sorted(d for d in os.listdir(registry_dir)
                  if _VERSION_RE.match(d) and os.path.isdir(os.path.join(registry_dir, d)))


def resolve(registry_dir: str, version: str | None = None) -> str:
    """The folder of `version`, or of `latest` (a version folder given directly also works)."""
    if not os.path.isdir(registry_dir):
        raise RegistryError(f"registry {registry_dir}: no such folder — run `tidewise train --registry {registry_dir}` first",
                            reason="missing")
    if version is None and os.path.isfile(os.path.join(registry_dir, MANIFEST)):
        return registry_dir
    if version is None:
        link = os.path.join(registry_dir, LATEST)
        if not os.path.lexists(link):
            raise RegistryError(f"registry {registry_dir} has no `{LATEST}` version — run `tidewise train --registry {registry_dir}` first",
                                reason="missing")
        path = os.path.realpath(link)
    else:
        path = os.path.join(registry_dir, version)
    if not os.path.isdir(path):
        raise RegistryError(f"registry version {path} does not exist", reason="missing")
    return path


def load_version(registry_dir: str, version: str | None = None, key: bytes | None = None, *,
                 decision_models: bool = True) -> RegistryVersion:
    """Verify, then load: the manifest chain and every checksum first, the artifacts after, parsed
    as JSON and NumPy arrays only (no pickle); LightGBM's models are checked as text, probed in a
    child process, then loaded. A version that verifies but does not load (a truncated, malformed
    or incompatible artifact or manifest field) is refused like a tampered one (UnloadableVersion),
    so that serving falls back to an older version rather than failing on every run.
    `decision_models=False` (forecast, report, training): the decision-time models are verified
    with the rest but not parsed."""
    path = resolve(registry_dir, version)
    manifest, seal = verify_sealed(path, key)
    arts = manifest["artifacts"]
    try:
        _check_fields(manifest)
        series = _read_json(path, SERIES_FILE)
        profiles = _read_json(path, PROFILES_FILE) if PROFILES_FILE in arts else {}
        gm = _load_global(path, manifest) if GLOBAL_META in arts or GLOBAL_ARRAYS in arts else None
        reg = RegistryVersion(path, manifest.get("version", os.path.basename(path)), manifest, series, gm, profiles,
                              seal=seal)
        reg.choices = {k: _choice_of(k, e, reg) for k, e in series.items()}
        if decision_models:
            reg.decision_models, reg.decision_errors = _load_decision_models(path, arts)
        if RECENT_FILE in arts:
            _check_recent(path)
        _load_lightgbm(reg)
        return reg
    except RegistryError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever verified bytes do when parsed, the version is refused
        raise UnloadableVersion(f"registry version {path} verifies but does not load ({type(exc).__name__}: {exc}); "
                                "refusing it — retrain with `tidewise train`", reason="load") from None


def check_unchanged(reg: RegistryVersion) -> None:
    """RegistryError when the folder of a loaded version changed on disk since it was verified
    (cheap: nothing is re-hashed or re-parsed)."""
    if reg.seal is not None:
        check_sealed(reg.path, reg.seal)


def known_model(name: str) -> bool:
    """Whether this tidewise can run a stored model name (a plain model, the global GBM or the ensemble)."""
    return name in MODELS or name in (GLOBAL, ENSEMBLE)


def _choice_of(key: str, entry: dict[str, Any], reg: RegistryVersion) -> Choice:
    """The stored choice of one series, its model names checked against this tidewise's models."""
    choice = Choice.from_entry(key, entry, reg.quantiles, f"registry {reg.version}")
    for name in choice.runs():
        if not known_model(name):
            raise UnloadableVersion(f"registry version {reg.version} names model {name!r} for {key}, which this "
                                    "tidewise does not have; retrain with `tidewise train`", reason="schema")
    return choice


def _read_json(path: str, name: str) -> dict[str, Any]:
    with open(os.path.join(path, name), encoding="utf-8") as fh:
        obj = json.load(fh)
    if not isinstance(obj, dict):
        raise ValueError(f"{name} holds a {type(obj).__name__}, not an object")
    return obj


def _check_fields(manifest: dict[str, Any]) -> None:
    """ValueError naming a manifest field the readers use that is malformed (the digest only says
    that the manifest is the one written, not that its writer wrote sense)."""
    for name in ("step_seconds", "recent_step_seconds"):
        value = manifest.get(name)
        if (name == "step_seconds" or RECENT_FILE in manifest["artifacts"]) and \
                not (isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_STEP_SECONDS):
            raise ValueError(f"{MANIFEST}: {name} is {value!r}, not a whole number of seconds in 1..{MAX_STEP_SECONDS}")
    qs = manifest.get("quantiles")
    if not isinstance(qs, list) or not qs or not all(isinstance(q, (int, float)) and 0 < q < 1 for q in qs) \
            or sorted(set(qs)) != qs:
        raise ValueError(f"{MANIFEST}: quantiles {str(qs)[:80]} are not increasing numbers strictly between 0 and 1")
    window = manifest.get("data_window")
    if not isinstance(window, dict) or not all(isinstance(window.get(k), str) for k in ("start", "end")):
        raise ValueError(f"{MANIFEST}: data_window is not a start and an end")
    pd.Timestamp(window["start"]), pd.Timestamp(window["end"])  # ValueError when they do not parse


def _check_recent(path: str) -> None:
    """ValueError unless the stored recent history is Parquet with the long table's columns (its
    footer only: the rows are read by `load_recent`, for the report)."""
    import pyarrow.parquet as pq

    try:
        names = set(pq.read_schema(os.path.join(path, RECENT_FILE)).names)
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors for a file that is not Parquet vary by version
        raise ValueError(f"{RECENT_FILE} is not a Parquet file ({str(exc).splitlines()[0][:120]})") from None
    if not {"series", "timestamp", "value"} <= names:
        raise ValueError(f"{RECENT_FILE} lacks the columns series, timestamp, value (it has {sorted(names)[:6]})")


def _load_global(path: str, manifest: dict[str, Any]) -> GlobalGBM:
    meta = _read_json(path, GLOBAL_META)
    with np.load(os.path.join(path, GLOBAL_ARRAYS), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    try:
        gm = GlobalGBM.from_arrays(meta, arrays)
    except ModelTextError as exc:
        raise ModelTextError(f"{GLOBAL_ARRAYS}: {exc}") from None
    missing = [q for q in manifest.get("quantiles", []) if float(q) not in gm.fitted_quantiles_]
    if missing:
        raise ValueError(f"the global model lacks the quantile(s) {missing} of the manifest")
    return gm


def _load_decision_models(path: str, arts: dict[str, Any]) -> tuple[dict[str, DecisionTimeGBM], dict[str, str]]:
    """(kind -> the decision-time model a version holds, kind -> why one did not load). A model that
    does not load here (an incompatible format, the lightgbm backend without lightgbm) leaves the
    version usable: its decisions fall back to the day-ahead forecast and say why. A malformed
    model text (ModelTextError) refuses the version: it is corruption or tampering, as a bad digest."""
    out: dict[str, DecisionTimeGBM] = {}
    errors: dict[str, str] = {}
    for kind in DECISION_KINDS:
        base = DECISION_PREFIX + kind
        have = [ext for ext in (".json", ".npz") if base + ext in arts]
        if not have:
            continue
        try:
            if len(have) == 1:
                raise ValueError(f"{base}{have[0]} is listed without its pair")
            with np.load(os.path.join(path, base + ".npz"), allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            out[kind] = DecisionTimeGBM.from_arrays(_read_json(path, base + ".json"), arrays)
        except ModelTextError as exc:
            raise ModelTextError(f"{base}.json: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - verified bytes that do not parse: no model, said why
            errors[kind] = f"{type(exc).__name__}: {exc}"
            log.error("registry version %s: decision-time model %s not loaded (%s)", path, kind, errors[kind])
    return out, errors


def _load_lightgbm(reg: RegistryVersion) -> None:
    """Probe every LightGBM model of a version in a child process (a crash there refuses the
    version, not the caller), then load them here."""
    owners: list[tuple[str, BoosterText]] = []
    if reg.global_model is not None:
        owners += [(GLOBAL_ARRAYS, m) for m in reg.global_model.models_ if isinstance(m, BoosterText)]
    for kind, model in sorted(reg.decision_models.items()):
        owners += [(f"{DECISION_PREFIX}{kind}.json", m) for m in model.models_ if isinstance(m, BoosterText)]
    if not owners:
        return
    try:
        probe_lightgbm([(m.checked_, m.n_features) for _, m in owners])
    except ProbeError as exc:
        where = owners[exc.index][0] if exc.index is not None and exc.index < len(owners) else "a LightGBM model"
        raise UnloadableVersion(f"registry version {reg.path} does not load: {where}: {exc}; refusing it — retrain "
                                "with `tidewise train`", reason="load") from None
    for _, m in owners:
        m.load()


def load_last_good(registry_dir: str, on_refused: Callable[[str, RegistryError], None] | None = None,
                   key: bytes | None = None) -> RegistryVersion:
    """`latest` if it verifies and loads, else the newest version that does (the serving loop's rule)."""
    tried = []
    candidates = []
    try:
        candidates.append(os.path.basename(resolve(registry_dir)))
    except RegistryError as exc:
        tried.append(str(exc))
    candidates += [v for v in reversed(list_versions(registry_dir)) if v not in candidates]
    for v in candidates:
        try:
            return load_version(registry_dir, v, key)
        except RegistryError as exc:
            tried.append(str(exc))
            log.error("registry version %s refused: %s", v, exc)
            if on_refused:
                on_refused(v, exc)
    raise RegistryError(f"registry {registry_dir} has no version that verifies: " + "; ".join(tried[-3:]),
                        reason="missing")


def load_recent(reg: RegistryVersion) -> History | None:
    """The recent history stored with a (verified) version, as a History; None if absent;
    UnloadableVersion when its rows do not read."""
    if RECENT_FILE not in reg.manifest["artifacts"]:
        return None
    step = pd.Timedelta(seconds=int(reg.manifest["recent_step_seconds"]))
    try:
        frame = pd.read_parquet(os.path.join(reg.path, RECENT_FILE))
        return history_from_frame(frame, step, source=RECENT_FILE)
    except Exception as exc:  # noqa: BLE001 - verified bytes that do not read: the version is refused
        raise UnloadableVersion(f"registry version {reg.path}: {RECENT_FILE} does not read ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0][:160] if str(exc) else ''}); refusing it — retrain with "
                                "`tidewise train`, or pass --input PATH", reason="load") from None
