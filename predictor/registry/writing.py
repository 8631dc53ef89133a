"""Writing a registry version: artifacts, manifest, digest and signature, atomically.

The version is assembled in a hidden temporary folder and renamed into place, and `latest` is a
symlink replaced with `os.replace`, so a reader sees the old or the new version, never half of one.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import tempfile
import time
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from contracts.atomic import write_failed
from predictor.models.gbm import GlobalGBM
from predictor.registry.manifest import (DECISION_KINDS, DECISION_PREFIX, GLOBAL_ARRAYS, GLOBAL_META, LATEST,
                                         MANIFEST, MANIFEST_DIGEST,
                                         PROFILES_FILE, RECENT_FILE, SCHEMA_VERSION, SERIES_FILE, SIGNATURE,
                                         RegistryError, key_id, mac, sha256_file)

log = logging.getLogger(__name__)


def library_versions() -> dict[str, str]:
    import sklearn
    import statsmodels

    from predictor import __version__ as tidewise_version

    return {"python": platform.python_version(), "numpy": np.__version__, "pandas": pd.__version__,
            "scikit-learn": sklearn.__version__, "statsmodels": statsmodels.__version__,
            "tidewise": tidewise_version}


def new_version_name(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(3).hex()


def write_version(
    registry_dir: str,
    *,
    quantiles: tuple[float, ...],
    series: Mapping[str, dict[str, Any]],
    data_window: tuple[str, str],
    step_seconds: int,
    global_model: GlobalGBM | None = None,
    profiles: Mapping[str, dict[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
    recent: pd.DataFrame | None = None,
    version: str | None = None,
    now: dt.datetime | None = None,
    key: bytes | None = None,
    decision_models: Mapping[str, Any] | None = None,
) -> str:
    """Write one version (atomically) and switch `latest` to it; returns the version name.
    `global_model`: a fitted GlobalGBM (stored as plain arrays); `key`: sign the manifest;
    `decision_models`: kind ("vpa"/"hpa") -> fitted DecisionTimeGBM (JSON + plain arrays)."""
    os.makedirs(registry_dir, exist_ok=True)
    sweep_partial_versions(registry_dir)
    version = version or new_version_name(now)
    final = os.path.join(registry_dir, version)
    if os.path.exists(final):
        raise RegistryError(f"registry version {final} already exists")
    try:
        tmp = tempfile.mkdtemp(prefix=f".{version}.", dir=registry_dir)
    except OSError as exc:
        raise write_failed(exc, registry_dir, "--registry") from None
    try:
        artifacts = _write_artifacts(tmp, series, profiles, recent, global_model)
        artifacts.update(_write_decision_models(tmp, decision_models or {}))
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "version": version,
            "created": (now or dt.datetime.now(dt.timezone.utc)).isoformat(),
            "data_window": {"start": data_window[0], "end": data_window[1]},
            "step_seconds": int(step_seconds),
            "quantiles": [float(q) for q in quantiles],
            "n_series": len(series),
            "models": _count(m.get("model", "?") for m in series.values()),
            "libraries": library_versions(),
            "artifacts": {name: {"sha256": digest, "bytes": os.path.getsize(os.path.join(tmp, name))}
                          for name, digest in sorted(artifacts.items())},
            **dict(extra or {}),
        }
        _write_chain(tmp, manifest, key)
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a version is read by the serving loop
        os.rename(tmp, final)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):  # disk full, quota, read-only: one line naming the registry
            raise write_failed(exc, registry_dir, "--registry") from None
        raise
    switch_latest(registry_dir, version)
    log.info("registry: wrote %s (%d series)", final, len(series))
    return version


# A partial version is `.<version>.<mkdtemp suffix>`: what `write_version` assembles before the
# rename, left behind only when the process was killed mid-write. Writing one takes seconds to a few
# minutes (10,000 series); one untouched for 6 h is no live writer's, so it is removed on the next write.
_PARTIAL = re.compile(r"^\.(\d{8}T\d{6}Z-[0-9a-f]{6})\.[A-Za-z0-9_]{8}$")
_PARTIAL_LINK = re.compile(r"^\." + re.escape(LATEST) + r"\.\d+\.[0-9a-f]{6}$")
STALE_PARTIAL_S = 6 * 3600.0


def sweep_partial_versions(registry_dir: str, *, now: float | None = None,
                           stale_s: float = STALE_PARTIAL_S) -> list[str]:
    """Remove what killed writes left: hidden `.<version>.XXXXXXXX` folders (never a finished
    version: no signature check is needed to tell, the name and the missing digest say it) and
    `.latest.<pid>.<hex>` links, once untouched for `stale_s`. Returns the names removed."""
    now = time.time() if now is None else now
    removed: list[str] = []
    for entry in os.scandir(registry_dir):
        folder = _PARTIAL.match(entry.name) and entry.is_dir(follow_symlinks=False)
        link = _PARTIAL_LINK.match(entry.name) and entry.is_symlink()
        age = now - _last_touched(entry.path) if folder or link else 0.0
        if age < stale_s:
            continue
        if folder and os.path.exists(os.path.join(entry.path, MANIFEST_DIGEST)):
            continue  # complete but never renamed: left for a person to look at, not ours to judge
        if folder:
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)
        log.warning("registry: removed %s, left by a write that was killed (untouched for %.1f h)",
                    entry.path, age / 3600)
        removed.append(entry.name)
    return removed


def _last_touched(path: str) -> float:
    """The latest mtime of `path` (not followed) and the files directly in it."""
    latest = os.lstat(path).st_mtime
    if os.path.isdir(path) and not os.path.islink(path):
        for entry in os.scandir(path):
            latest = max(latest, entry.stat(follow_symlinks=False).st_mtime)
    return latest


def _write_artifacts(folder: str, series: Mapping[str, dict[str, Any]], profiles: Mapping[str, dict[str, Any]] | None,
                     recent: pd.DataFrame | None, global_model: GlobalGBM | None) -> dict[str, str]:
    """Write the artifacts into `folder`; returns name -> sha256."""
    artifacts: dict[str, str] = {}

    def put_json(name: str, obj: Any) -> None:
        with open(os.path.join(folder, name), "w", encoding="utf-8") as fh:
            json.dump(obj, fh, separators=(",", ":"), allow_nan=False, default=_json_default)
        artifacts[name] = sha256_file(os.path.join(folder, name))

    put_json(SERIES_FILE, dict(series))
    if profiles is not None:
        put_json(PROFILES_FILE, dict(profiles))
    if recent is not None:
        recent.to_parquet(os.path.join(folder, RECENT_FILE), index=False)
        artifacts[RECENT_FILE] = sha256_file(os.path.join(folder, RECENT_FILE))
    if global_model is not None:
        meta, arrays = global_model.to_arrays()
        put_json(GLOBAL_META, meta)
        np.savez_compressed(os.path.join(folder, GLOBAL_ARRAYS), allow_pickle=False, **arrays)
        artifacts[GLOBAL_ARRAYS] = sha256_file(os.path.join(folder, GLOBAL_ARRAYS))
    return artifacts


def _write_decision_models(folder: str, models: Mapping[str, Any]) -> dict[str, str]:
    """decision_time_<kind>.json (the model's description) + .npz (its tree arrays); name -> sha256."""
    artifacts: dict[str, str] = {}
    for kind, model in sorted(models.items()):
        if kind not in DECISION_KINDS:
            raise ValueError(f"decision-time model kind {kind!r}: use one of {DECISION_KINDS}")
        meta, arrays = model.to_arrays()
        base = os.path.join(folder, DECISION_PREFIX + kind)
        with open(base + ".json", "w", encoding="utf-8") as fh:
            json.dump(meta, fh, separators=(",", ":"), allow_nan=False, default=_json_default)
        np.savez_compressed(base + ".npz", allow_pickle=False, **arrays)
        for ext in (".json", ".npz"):
            artifacts[DECISION_PREFIX + kind + ext] = sha256_file(base + ext)
    return artifacts


def _write_chain(folder: str, manifest: dict[str, Any], key: bytes | None) -> None:
    """The manifest, its digest and (with a key) its signature."""
    if key is not None:
        manifest["signed"] = {"algorithm": "hmac-sha256", "key_id": key_id(key)}
    body = json.dumps(manifest, indent=1, allow_nan=False, default=_json_default).encode("utf-8")
    digest = hashlib.sha256(body).hexdigest()
    _write_synced(os.path.join(folder, MANIFEST), body)
    _write_synced(os.path.join(folder, MANIFEST_DIGEST), f"{digest}  {MANIFEST}\n".encode("ascii"))
    if key is not None:
        sig = {"algorithm": "hmac-sha256", "key_id": key_id(key), "manifest_sha256": digest,
               "mac": mac(key, digest)}
        _write_synced(os.path.join(folder, SIGNATURE), json.dumps(sig, indent=1).encode("ascii"))


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def switch_latest(registry_dir: str, version: str) -> None:
    """Point `latest` at `version` atomically (a new symlink renamed over the old one)."""
    link = os.path.join(registry_dir, LATEST)
    tmp = os.path.join(registry_dir, f".{LATEST}.{os.getpid()}.{os.urandom(3).hex()}")
    os.symlink(version, tmp)
    os.replace(tmp, link)


def _count(items: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items()))


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating,)):
        return float(o) if np.isfinite(o) else None
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (pd.Timestamp, dt.datetime)):
        return o.isoformat()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
