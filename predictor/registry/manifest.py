"""A version's chain of trust: the manifest, its digest, its optional HMAC signature, and the
checksum of every artifact — checked before any artifact is parsed.

`verify` returns the manifest with a `Seal` (what the verified folder looked like on disk), so
that a version loaded once can be re-checked cheaply before each use (`check_sealed`): the
manifest digest and each file's identity are compared, nothing is re-hashed or re-parsed.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from contracts.errors import InputError, TidewiseError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # bump when the manifest or artifact layout changes incompatibly (2: no pickles)
MANIFEST = "manifest.json"
MANIFEST_DIGEST = "manifest.sha256"  # `sha256sum -c manifest.sha256` checks it by hand
SIGNATURE = "manifest.sig"
SERIES_FILE = "series.json"
PROFILES_FILE = "profiles.json"
GLOBAL_META = "global_gbm.json"
GLOBAL_ARRAYS = "global_gbm.npz"
RECENT_FILE = "recent.parquet"  # the last days of history, for the report (not needed to forecast)
# decision-time models (issue 12): decision_time_<kind>.json + .npz, kind "vpa" or "hpa"
DECISION_PREFIX = "decision_time_"
DECISION_KINDS = ("vpa", "hpa")
LATEST = "latest"  # the symlink to the newest version
MIN_KEY_BYTES = 16  # an HMAC key shorter than 128 bits is a mistake (an empty or truncated Secret)
_CHAIN = (MANIFEST, MANIFEST_DIGEST, SIGNATURE)


class RegistryError(TidewiseError):
    """A registry version is missing, tampered with, or written by an incompatible version; `reason`
    says which, for serve's `tidewise_registry_refused_total{reason}`: missing, digest (a checksum
    or the folder's contents do not match the manifest), signature, schema (a manifest this tidewise
    cannot read) or load (it verifies but its models do not load)."""

    def __init__(self, message: str, reason: str = "load"):
        super().__init__(message)
        self.reason = reason


class UnloadableVersion(RegistryError, InputError):
    """A version that verifies but does not load (a malformed model, manifest field or artifact):
    refused like a tampered one, and to a command a bad input (exit 2): retrain."""

    def __init__(self, message: str, reason: str = "load"):
        super().__init__(message, reason)


@dataclass(frozen=True)
class Seal:
    """A verified version folder as it was on disk: the manifest's sha256 and, for every file in
    the folder, (inode, size, mtime ns, ctime ns) taken before it was read. Any rewrite, rename
    or added file changes one of them (ctime cannot be set back by a writer)."""

    digest: str
    files: dict[str, tuple[int, int, int, int]]


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_key(path: str, what: str = "--registry-key") -> bytes:
    """The HMAC key in file `path` (a mounted Kubernetes Secret), without a trailing newline."""
    try:
        with open(path, "rb") as fh:
            key = fh.read(1 << 16).rstrip(b"\r\n")
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot read the key file ({exc.strerror}); give the file that "
                         "holds the registry signing key") from None
    if len(key) < MIN_KEY_BYTES:
        raise InputError(f"{what} {path}: the key has {len(key)} bytes; use at least {MIN_KEY_BYTES} random "
                         "bytes (e.g. `head -c 32 /dev/urandom > key`)")
    return key


def key_id(key: bytes) -> str:
    """A short fingerprint of a key, to tell keys apart in messages without revealing them."""
    return hashlib.sha256(b"tidewise-key-id:" + key).hexdigest()[:12]


def mac(key: bytes, digest: str) -> str:
    """The HMAC-SHA256 of a manifest digest: what `manifest.sig` holds."""
    return hmac.new(key, digest.encode("ascii"), hashlib.sha256).hexdigest()


def verify(path: str, key: bytes | None = None) -> dict[str, Any]:
    """Check a version before any artifact is parsed; returns the manifest (see `verify_sealed`)."""
    return verify_sealed(path, key)[0]


def verify_sealed(path: str, key: bytes | None = None) -> tuple[dict[str, Any], Seal]:
    """Check a version before any artifact is parsed: the manifest's bytes against
    `manifest.sha256`, its HMAC when `key` is given, the schema version, the sha256 of every
    artifact, and that the folder holds nothing else. Returns the manifest and its Seal.

    Key policy: with a key, a version that is unsigned or whose signature does not verify is
    refused; without one, a signed version is accepted (its signature cannot be checked) and that
    is logged once — the checksums then guard against corruption, not against a writer who
    rewrites them, and no artifact can run code either way."""
    files = _stat_folder(path)
    body, digest = _read_manifest(path)
    _check_digest(path, digest)
    _check_signature(path, digest, key)
    mpath = os.path.join(path, MANIFEST)
    try:
        manifest = json.loads(body.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RegistryError(f"registry manifest {mpath} is not valid JSON ({exc}); refusing it",
                            reason="schema") from None
    schema = manifest.get("schema_version") if isinstance(manifest, dict) else None
    if schema != SCHEMA_VERSION:
        raise RegistryError(f"registry version {path} has schema version {schema!r}; this tidewise reads "
                            f"version {SCHEMA_VERSION} — retrain with `tidewise train`", reason="schema")
    _check_artifacts(path, manifest)
    return manifest, Seal(digest, files)


def check_sealed(path: str, seal: Seal) -> None:
    """RegistryError unless the folder still holds exactly what was verified: the same manifest
    bytes and the same files, untouched. Cheap (a directory listing, a stat per file and the
    manifest's few kilobytes), so a loaded version is re-checked before every use."""
    try:
        _, digest = _read_manifest(path)
        files = _stat_folder(path)
    except RegistryError:
        files, digest = {}, ""
    if digest != seal.digest or files != seal.files:
        raise RegistryError(f"registry version {path} changed on disk since it was loaded; refusing it",
                            reason="digest")


def _stat_folder(path: str) -> dict[str, tuple[int, int, int, int]]:
    out = {}
    try:
        for name in sorted(os.listdir(path)):
            st = os.stat(os.path.join(path, name), follow_symlinks=False)
            out[name] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except OSError as exc:
        raise RegistryError(f"registry version {path} cannot be listed ({exc.strerror}); refusing it",
                            reason="missing") from None
    return out


def _read_manifest(path: str) -> tuple[bytes, str]:
    mpath = os.path.join(path, MANIFEST)
    try:
        with open(mpath, "rb") as fh:
            body = fh.read()
    except FileNotFoundError:
        raise RegistryError(f"registry version {path} has no {MANIFEST}; refusing it", reason="missing") from None
    except OSError as exc:
        raise RegistryError(f"registry manifest {mpath} cannot be read ({exc.strerror}); refusing it",
                            reason="missing") from None
    return body, hashlib.sha256(body).hexdigest()


def _check_digest(path: str, digest: str) -> None:
    try:
        with open(os.path.join(path, MANIFEST_DIGEST), encoding="ascii") as fh:
            recorded = (fh.read(256).split() or [""])[0]
    except FileNotFoundError:
        raise RegistryError(f"registry version {path} has no {MANIFEST_DIGEST} (written by an older tidewise, or "
                            "removed); refusing it — retrain with `tidewise train`", reason="digest") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"registry file {os.path.join(path, MANIFEST_DIGEST)} cannot be read ({exc}); refusing it",
                            reason="digest") from None
    if not hmac.compare_digest(recorded, digest):
        raise RegistryError(f"registry manifest {os.path.join(path, MANIFEST)} does not match {MANIFEST_DIGEST} "
                            f"(sha256 {digest[:12]}…, recorded {recorded[:12]}…): it was edited after training; "
                            "refusing it — retrain or restore it", reason="digest")


def _check_artifacts(path: str, manifest: dict[str, Any]) -> None:
    mpath = os.path.join(path, MANIFEST)
    arts = manifest.get("artifacts")
    if not isinstance(arts, dict) or SERIES_FILE not in arts:
        raise RegistryError(f"registry manifest {mpath} lists no artifacts; refusing it", reason="schema")
    for name, meta in arts.items():
        if os.path.basename(name) != name or name.startswith(".") or name in _CHAIN:
            raise RegistryError(f"registry manifest {mpath} names an artifact outside its folder: {name!r}",
                                reason="schema")
        fpath = os.path.join(path, name)
        if not os.path.isfile(fpath):
            raise RegistryError(f"registry artifact {fpath} is missing; refusing version {manifest.get('version')}",
                                reason="missing")
        digest = sha256_file(fpath)
        if not isinstance(meta, dict) or digest != meta.get("sha256"):
            want = str(meta.get("sha256") if isinstance(meta, dict) else None)
            raise RegistryError(f"registry artifact {fpath} fails its checksum (sha256 {digest[:12]}…, manifest says "
                                f"{want[:12]}…): it was modified after training; refusing "
                                f"version {manifest.get('version')} — retrain or restore it", reason="digest")
    # a version is written whole by `write_version`: anything else in it (a pickle dropped beside
    # the artifacts, say) was put there by someone else
    stray = sorted(set(os.listdir(path)) - set(arts) - set(_CHAIN))
    if stray:
        raise RegistryError(f"registry version {path} holds unlisted files {stray}; refusing it", reason="digest")


_warned_unchecked: set[str] = set()


def _check_signature(path: str, digest: str, key: bytes | None) -> None:
    spath = os.path.join(path, SIGNATURE)
    if key is None:
        if os.path.lexists(spath) and path not in _warned_unchecked:
            _warned_unchecked.add(path)
            log.warning("registry version %s is signed but no --registry-key was given: its signature is not "
                        "checked", path)
        return
    if not os.path.lexists(spath):
        raise RegistryError(f"registry version {path} is not signed but --registry-key was given; refusing it — "
                            "retrain with `tidewise train --registry-key FILE`", reason="signature")
    try:
        with open(spath, encoding="ascii") as fh:
            sig = json.loads(fh.read(4096))
        given = str(sig["mac"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RegistryError(f"registry signature {spath} is unreadable ({exc}); refusing it",
                            reason="signature") from None
    if not hmac.compare_digest(given, mac(key, digest)):
        raise RegistryError(f"registry version {path}: the signature does not verify with the given key (key id "
                            f"{key_id(key)}, signed with {str(sig.get('key_id'))[:12]}); refusing it — use the "
                            "training job's key or retrain", reason="signature")
