"""The model registry: `models/<version>/manifest.json` + artifacts, `models/latest` -> newest good.

A version folder holds `manifest.json` (schema version, created, data window, library versions, and
the sha256 of every artifact), `manifest.sha256` (the digest of the manifest's bytes, in
`sha256sum` format), optionally `manifest.sig` (HMAC-SHA256 of that digest with a key from a file),
and the artifacts: `series.json` (per-series model, parameters, backtest scores), `profiles.json`,
`recent.parquet`, and the global model as `global_gbm.json` + `global_gbm.npz` (plain arrays).
No artifact is a pickle: nothing read from a registry can run code (docs/forecasting.md, "Registry
format and trust"). Loading checks the manifest digest (and the signature when a key is given),
then the schema version and every artifact checksum, refuses any unlisted file, and only then
parses the artifacts; a version that fails — or that verifies but does not load — is refused with
a clear `RegistryError`, and the serving loop keeps its last good version (`load_last_good`).
`training` writes versions (`write_version`); serving only reads them, which is why this module
lives in `predictor` (the `autoscaler` may not import `training`).

Writes are atomic: the version is assembled in a hidden temporary folder and renamed into place,
and `latest` is a symlink replaced with `os.replace`, so a reader sees the old or the new version,
never half of one.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
import os
import platform
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from predictor.errors import InputError, TidewiseError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # bump when the manifest or artifact layout changes incompatibly (2: no pickles)
MANIFEST = "manifest.json"
MANIFEST_DIGEST = "manifest.sha256"  # `sha256sum -c manifest.sha256` checks it by hand
SIGNATURE = "manifest.sig"
SERIES_FILE = "series.json"
GLOBAL_META = "global_gbm.json"
GLOBAL_ARRAYS = "global_gbm.npz"
RECENT_FILE = "recent.parquet"  # the last days of history, for the report (not needed to forecast)
LATEST = "latest"
MIN_KEY_BYTES = 16  # an HMAC key shorter than 128 bits is a mistake (an empty or truncated Secret)
_VERSION_RE = re.compile(r"^\d{8}T\d{6}Z(-[0-9a-f]{6})?$")


class RegistryError(TidewiseError):
    """A registry version is missing, tampered with, or written by an incompatible version."""


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


def _key_id(key: bytes) -> str:
    """A short fingerprint of a key, to tell keys apart in messages without revealing them."""
    return hashlib.sha256(b"tidewise-key-id:" + key).hexdigest()[:12]


def _mac(key: bytes, digest: str) -> str:
    return hmac.new(key, digest.encode("ascii"), hashlib.sha256).hexdigest()


def library_versions() -> dict[str, str]:
    import sklearn
    import statsmodels

    from predictor import __version__ as tidewise_version

    return {"python": platform.python_version(), "numpy": np.__version__, "pandas": pd.__version__,
            "scikit-learn": sklearn.__version__, "statsmodels": statsmodels.__version__,
            "tidewise": tidewise_version}


@dataclass
class RegistryVersion:
    """A verified version: manifest, per-series choices, and the loaded global model (or None)."""

    path: str
    version: str
    manifest: dict[str, Any]
    series: dict[str, dict[str, Any]]
    global_model: Any = None
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    choices: dict[str, Any] = field(default_factory=dict)  # series -> selection.Choice, checked on load

    @property
    def quantiles(self) -> tuple[float, ...]:
        return tuple(float(q) for q in self.manifest["quantiles"])


# ---- writing ------------------------------------------------------------------------------------

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
    global_model: Any = None,
    profiles: Mapping[str, dict[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
    recent: pd.DataFrame | None = None,
    version: str | None = None,
    now: dt.datetime | None = None,
    key: bytes | None = None,
) -> str:
    """Write one version (atomically) and switch `latest` to it; returns the version name.
    `global_model`: a fitted GlobalGBM (stored as plain arrays); `key`: sign the manifest."""
    os.makedirs(registry_dir, exist_ok=True)
    version = version or new_version_name(now)
    final = os.path.join(registry_dir, version)
    if os.path.exists(final):
        raise RegistryError(f"registry version {final} already exists")
    tmp = tempfile.mkdtemp(prefix=f".{version}.", dir=registry_dir)
    try:
        artifacts: dict[str, str] = {}

        def put_json(name: str, obj: Any) -> None:
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as fh:
                json.dump(obj, fh, separators=(",", ":"), allow_nan=False, default=_json_default)
            artifacts[name] = sha256_file(os.path.join(tmp, name))

        put_json(SERIES_FILE, dict(series))
        if profiles is not None:
            put_json("profiles.json", dict(profiles))
        if recent is not None:
            recent.to_parquet(os.path.join(tmp, RECENT_FILE), index=False)
            artifacts[RECENT_FILE] = sha256_file(os.path.join(tmp, RECENT_FILE))
        if global_model is not None:
            meta, arrays = global_model.to_arrays()
            put_json(GLOBAL_META, meta)
            np.savez_compressed(os.path.join(tmp, GLOBAL_ARRAYS), **arrays)
            artifacts[GLOBAL_ARRAYS] = sha256_file(os.path.join(tmp, GLOBAL_ARRAYS))
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
        if key is not None:
            manifest["signed"] = {"algorithm": "hmac-sha256", "key_id": _key_id(key)}
        body = json.dumps(manifest, indent=1, allow_nan=False, default=_json_default).encode("utf-8")
        digest = hashlib.sha256(body).hexdigest()
        _write_synced(os.path.join(tmp, MANIFEST), body)
        _write_synced(os.path.join(tmp, MANIFEST_DIGEST), f"{digest}  {MANIFEST}\n".encode("ascii"))
        if key is not None:
            sig = {"algorithm": "hmac-sha256", "key_id": _key_id(key), "manifest_sha256": digest,
                   "mac": _mac(key, digest)}
            _write_synced(os.path.join(tmp, SIGNATURE), json.dumps(sig, indent=1).encode("ascii"))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a version is read by the serving loop
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    switch_latest(registry_dir, version)
    log.info("registry: wrote %s (%d series)", final, len(series))
    return version


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


def _count(items) -> dict[str, int]:
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


# ---- reading ------------------------------------------------------------------------------------

def list_versions(registry_dir: str) -> list[str]:
    """Version folders, oldest first (names sort by creation time)."""
    if not os.path.isdir(registry_dir):
        return []
    return sorted(d for d in os.listdir(registry_dir)
                  if _VERSION_RE.match(d) and os.path.isdir(os.path.join(registry_dir, d)))


def resolve(registry_dir: str, version: str | None = None) -> str:
    """The folder of `version`, or of `latest` (a version folder given directly also works)."""
    if not os.path.isdir(registry_dir):
        raise RegistryError(f"registry {registry_dir}: no such folder — run `tidewise train --registry {registry_dir}` first")
    if version is None and os.path.isfile(os.path.join(registry_dir, MANIFEST)):
        return registry_dir
    if version is None:
        link = os.path.join(registry_dir, LATEST)
        if not os.path.lexists(link):
            raise RegistryError(f"registry {registry_dir} has no `{LATEST}` version — run `tidewise train --registry {registry_dir}` first")
        path = os.path.realpath(link)
    else:
        path = os.path.join(registry_dir, version)
    if not os.path.isdir(path):
        raise RegistryError(f"registry version {path} does not exist")
    return path


_warned_unchecked: set[str] = set()


def verify(path: str, key: bytes | None = None) -> dict[str, Any]:
    """Check a version before any artifact is parsed: the manifest's bytes against
    `manifest.sha256`, its HMAC when `key` is given, the schema version, the sha256 of every
    artifact, and that the folder holds nothing else. Returns the manifest.

    Key policy: with a key, a version that is unsigned or whose signature does not verify is
    refused; without one, a signed version is accepted (its signature cannot be checked) and that
    is logged once — the checksums then guard against corruption, not against a writer who
    rewrites them, and no artifact can run code either way."""
    mpath = os.path.join(path, MANIFEST)
    try:
        with open(mpath, "rb") as fh:
            body = fh.read()
    except FileNotFoundError:
        raise RegistryError(f"registry version {path} has no {MANIFEST}; refusing it") from None
    except OSError as exc:
        raise RegistryError(f"registry manifest {mpath} cannot be read ({exc.strerror}); refusing it") from None
    digest = hashlib.sha256(body).hexdigest()
    try:
        with open(os.path.join(path, MANIFEST_DIGEST), encoding="ascii") as fh:
            recorded = (fh.read(256).split() or [""])[0]
    except FileNotFoundError:
        raise RegistryError(f"registry version {path} has no {MANIFEST_DIGEST} (written by an older tidewise, or "
                            "removed); refusing it — retrain with `tidewise train`") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"registry file {os.path.join(path, MANIFEST_DIGEST)} cannot be read ({exc}); refusing it") from None
    if not hmac.compare_digest(recorded, digest):
        raise RegistryError(f"registry manifest {mpath} does not match {MANIFEST_DIGEST} (sha256 {digest[:12]}…, "
                            f"recorded {recorded[:12]}…): it was edited after training; refusing it — retrain or restore it")
    _check_signature(path, digest, key)
    try:
        manifest = json.loads(body.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RegistryError(f"registry manifest {mpath} is not valid JSON ({exc}); refusing it") from None
    schema = manifest.get("schema_version") if isinstance(manifest, dict) else None
    if schema != SCHEMA_VERSION:
        raise RegistryError(f"registry version {path} has schema version {schema!r}; this tidewise reads "
                            f"version {SCHEMA_VERSION} — retrain with `tidewise train`")
    arts = manifest.get("artifacts")
    if not isinstance(arts, dict) or SERIES_FILE not in arts:
        raise RegistryError(f"registry manifest {mpath} lists no artifacts; refusing it")
    for name, meta in arts.items():
        if os.path.basename(name) != name or name.startswith(".") or name in (MANIFEST, MANIFEST_DIGEST, SIGNATURE):
            raise RegistryError(f"registry manifest {mpath} names an artifact outside its folder: {name!r}")
        fpath = os.path.join(path, name)
        if not os.path.isfile(fpath):
            raise RegistryError(f"registry artifact {fpath} is missing; refusing version {manifest.get('version')}")
        digest = sha256_file(fpath)
        if not isinstance(meta, dict) or digest != meta.get("sha256"):
            want = str(meta.get("sha256") if isinstance(meta, dict) else None)
            raise RegistryError(f"registry artifact {fpath} fails its checksum (sha256 {digest[:12]}…, manifest says "
                                f"{want[:12]}…): it was modified after training; refusing "
                                f"version {manifest.get('version')} — retrain or restore it")
    # a version is written whole by `write_version`: anything else in it (a pickle dropped beside
    # the artifacts, say) was put there by someone else
    stray = sorted(set(os.listdir(path)) - set(arts) - {MANIFEST, MANIFEST_DIGEST, SIGNATURE})
    if stray:
        raise RegistryError(f"registry version {path} holds unlisted files {stray}; refusing it")
    return manifest


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
                            "retrain with `tidewise train --registry-key FILE`")
    try:
        with open(spath, encoding="ascii") as fh:
            sig = json.loads(fh.read(4096))
        mac = str(sig["mac"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RegistryError(f"registry signature {spath} is unreadable ({exc}); refusing it") from None
    if not hmac.compare_digest(mac, _mac(key, digest)):
        raise RegistryError(f"registry version {path}: the signature does not verify with the given key (key id "
                            f"{_key_id(key)}, signed with {str(sig.get('key_id'))[:12]}); refusing it — use the "
                            "training job's key or retrain")


def load_version(registry_dir: str, version: str | None = None, key: bytes | None = None) -> RegistryVersion:
    """Verify, then load: the manifest chain and every checksum first, the artifacts after, parsed
    as JSON and NumPy arrays only (no pickle). A version that verifies but does not load (a
    truncated or incompatible artifact) is refused like a tampered one, so that serving falls
    back to an older version rather than failing on every run."""
    path = resolve(registry_dir, version)
    manifest = verify(path, key)
    arts = manifest["artifacts"]
    try:
        series = _read_json(path, SERIES_FILE)
        profiles = _read_json(path, "profiles.json") if "profiles.json" in arts else {}
        gm = None
        if GLOBAL_META in arts or GLOBAL_ARRAYS in arts:
            gm = _load_global(path, manifest)
        reg = RegistryVersion(path, manifest.get("version", os.path.basename(path)), manifest, series, gm, profiles)
        reg.choices = {k: choice_of(k, e, reg) for k, e in series.items()}
        return reg
    except RegistryError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever verified bytes do when parsed, the version is refused
        raise RegistryError(f"registry version {path} verifies but does not load ({type(exc).__name__}: {exc}); "
                            "refusing it — retrain with `tidewise train`") from None


def _read_json(path: str, name: str) -> dict[str, Any]:
    with open(os.path.join(path, name), encoding="utf-8") as fh:
        obj = json.load(fh)
    if not isinstance(obj, dict):
        raise ValueError(f"{name} holds a {type(obj).__name__}, not an object")
    return obj


def _load_global(path: str, manifest: dict[str, Any]):
    from predictor.models.gbm import GlobalGBM

    meta = _read_json(path, GLOBAL_META)
    with np.load(os.path.join(path, GLOBAL_ARRAYS), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    gm = GlobalGBM.from_arrays(meta, arrays)
    missing = [q for q in manifest.get("quantiles", []) if float(q) not in gm.fitted_quantiles_]
    if missing:
        raise ValueError(f"the global model lacks the quantile(s) {missing} of the manifest")
    return gm


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
    raise RegistryError(f"registry {registry_dir} has no version that verifies: " + "; ".join(tried[-3:]))


def load_recent(reg: RegistryVersion):
    """The recent history stored with a (verified) version, as a History; None if absent."""
    from predictor.history import history_from_frame

    if RECENT_FILE not in reg.manifest["artifacts"]:
        return None
    frame = pd.read_parquet(os.path.join(reg.path, RECENT_FILE))
    return history_from_frame(frame, pd.Timedelta(seconds=int(reg.manifest["recent_step_seconds"])), source=RECENT_FILE)


# ---- serving ------------------------------------------------------------------------------------

def choice_of(key: str, entry: dict[str, Any], reg: RegistryVersion):
    """The stored choice of one series as a selection.Choice (model names checked)."""
    from predictor.forecasting import make_model
    from predictor.selection import ENSEMBLE, GLOBAL, Choice

    shifts = [float(v) for v in entry.get("shifts") or [0.0] * len(reg.quantiles)]
    if len(shifts) != len(reg.quantiles):
        raise ValueError(f"series {key}: {len(shifts)} quantile shifts for {len(reg.quantiles)} quantiles")
    choice = Choice(key, entry["model"], reg.quantiles, shifts,
                    int(entry.get("folds", 0)), float(entry.get("acf_day") or np.nan),
                    float(entry.get("acf_week") or np.nan), {}, entry.get("skill"), entry.get("coverage"),
                    float(entry.get("scale") or 1.0), f"registry {reg.version}", list(entry.get("members") or []))
    for name in choice.members or [choice.model]:
        if name not in (GLOBAL, ENSEMBLE):
            try:
                make_model(name)
            except ValueError:
                raise RegistryError(f"registry version {reg.version} names model {name!r} for {key}, which this "
                                    "tidewise does not have; retrain with `tidewise train`") from None
    return choice


GLOBAL_BATCH = 2000  # series per batched tree pass: ~580k feature rows, ~130 MB


def _forecast_chunk(items, reqs, choices, gm, version, gvals):
    from predictor.forecasting import forecast_from_choice

    return [forecast_from_choice(k, y, reqs[k], choices.get(k), gm if gvals.get(k) is None else None, version, gvals.get(k))
            for k, y in items]


def forecast_with_registry(registry_dir: str, history, req, jobs: int | None = None, *, key: bytes | None = None,
                           reg: RegistryVersion | None = None) -> list:
    """`tidewise forecast --registry DIR`: forecast every series of `history` with the stored
    choices (model, calibration) and the stored global GBM — no backtest, no global refit. The
    global model predicts all series in batches; the cheap per-series models fan out over `jobs`
    processes (default: all cores when there are over 1,000 series). A series the registry does
    not know gets the no-backtest default, and its note says so.

    `reg`: a version already loaded (the serving loop's); its folder is verified again and must
    still hold the same manifest, so a version changed on disk since it was loaded is refused."""
    from dataclasses import replace

    from predictor.errors import InputError
    from predictor.forecasting import series_requests
    from predictor.selection import GLOBAL

    if reg is None:
        reg = load_version(registry_dir, key=key)
    elif verify(reg.path) != reg.manifest:
        raise RegistryError(f"registry version {reg.path} changed on disk since it was loaded; refusing it")
    if tuple(float(q) for q in req.quantiles) != reg.quantiles:
        raise InputError(f"--quantiles {','.join(f'{q:g}' for q in req.quantiles)}: registry version {reg.version} "
                         f"was trained for {','.join(f'{q:g}' for q in reg.quantiles)}; ask for those or retrain")
    if int(req.step.total_seconds()) != int(reg.manifest.get("step_seconds", req.step.total_seconds())):
        raise InputError(f"--step {req.step}: registry version {reg.version} was trained at "
                         f"{reg.manifest.get('step_seconds')} s steps; use that step or retrain")
    if req.origin is None:
        req = replace(req, origin=history.end + req.step)
    reqs = series_requests(history, req)
    choices = {k: reg.choices[k] for k in history.series if k in reg.choices}
    gm = reg.global_model
    gvals: dict[str, np.ndarray] = {}
    need = [k for k, c in choices.items() if c.model == GLOBAL or GLOBAL in c.members]
    if gm is not None:
        for i in range(0, len(need), GLOBAL_BATCH):
            chunk = need[i:i + GLOBAL_BATCH]
            try:
                vals = gm.predict_many([(history.series[k], reqs[k].origin) for k in chunk], req.steps, req.quantiles)
                gvals.update(zip(chunk, vals))
            except (ValueError, RuntimeError) as exc:  # one bad series: retry these one by one
                log.warning("batched global forecast failed (%s); forecasting %d series one by one", exc, len(chunk))
    items = list(history.series.items())
    if jobs is None:
        jobs = (os.cpu_count() or 1) if len(items) > 1000 else 1
    if jobs == 1 or len(items) < 2:
        out = _forecast_chunk(items, reqs, choices, gm, reg.version, gvals)
    else:
        from joblib import Parallel, delayed

        size = max(1, len(items) // (4 * abs(jobs)))
        parts = [items[i:i + size] for i in range(0, len(items), size)]
        res = Parallel(n_jobs=jobs)(delayed(_forecast_chunk)(p, {k: reqs[k] for k, _ in p},
                                                             {k: choices[k] for k, _ in p if k in choices}, gm,
                                                             reg.version, {k: gvals[k] for k, _ in p if k in gvals})
                                    for p in parts)
        out = [f for part in res for f in part]
    for f in out:
        if f.series not in reg.series:
            f.notes.append(f"not in registry {reg.version}")
    return out
