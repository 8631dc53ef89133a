"""The model registry: `models/<version>/manifest.json` + artifacts, `models/latest` -> newest good.

A version folder holds `manifest.json` (schema version, created, data window, per-series model,
parameters and backtest scores in `series.json`, library versions, and the sha256 of every
artifact) and the artifacts themselves (joblib for fitted models). Loading reads the manifest,
checks the schema version and every checksum, and only then unpickles anything: a registry that
fails is refused with a clear `RegistryError`, and the serving loop keeps its last good version
(`load_last_good`). `training` writes versions (`write_version`); serving only reads them, which is
why this module lives in `predictor` (the `autoscaler` may not import `training`).

Writes are atomic: the version is assembled in a hidden temporary folder and renamed into place,
and `latest` is a symlink replaced with `os.replace`, so a reader sees the old or the new version,
never half of one.
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
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from predictor.errors import TidewiseError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1  # bump when the manifest or artifact layout changes incompatibly
MANIFEST = "manifest.json"
SERIES_FILE = "series.json"
GLOBAL_FILE = "global_gbm.joblib"
RECENT_FILE = "recent.parquet"  # the last days of history, for the report (not needed to forecast)
LATEST = "latest"
_VERSION_RE = re.compile(r"^\d{8}T\d{6}Z(-[0-9a-f]{6})?$")


class RegistryError(TidewiseError):
    """A registry version is missing, tampered with, or written by an incompatible version."""


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def library_versions() -> dict[str, str]:
    import joblib
    import sklearn
    import statsmodels

    from predictor import __version__ as tidewise_version

    return {"python": platform.python_version(), "numpy": np.__version__, "pandas": pd.__version__,
            "scikit-learn": sklearn.__version__, "statsmodels": statsmodels.__version__,
            "joblib": joblib.__version__, "tidewise": tidewise_version}


@dataclass
class RegistryVersion:
    """A verified version: manifest, per-series choices, and the loaded global model (or None)."""

    path: str
    version: str
    manifest: dict[str, Any]
    series: dict[str, dict[str, Any]]
    global_model: Any = None
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)

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
) -> str:
    """Write one version (atomically) and switch `latest` to it; returns the version name."""
    import joblib

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
            joblib.dump(global_model, os.path.join(tmp, GLOBAL_FILE), compress=3)
            artifacts[GLOBAL_FILE] = sha256_file(os.path.join(tmp, GLOBAL_FILE))
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
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=1, allow_nan=False, default=_json_default)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a version is read by the serving loop
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    switch_latest(registry_dir, version)
    log.info("registry: wrote %s (%d series)", final, len(series))
    return version


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


def verify(path: str) -> dict[str, Any]:
    """Read and check a version's manifest and the sha256 of every artifact; returns the manifest.
    Nothing is unpickled here."""
    mpath = os.path.join(path, MANIFEST)
    try:
        with open(mpath, encoding="utf-8") as fh:
            manifest = json.load(fh)
    except FileNotFoundError:
        raise RegistryError(f"registry version {path} has no {MANIFEST}; refusing it") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RegistryError(f"registry manifest {mpath} is not valid JSON ({exc}); refusing it") from None
    schema = manifest.get("schema_version") if isinstance(manifest, dict) else None
    if schema != SCHEMA_VERSION:
        raise RegistryError(f"registry version {path} has schema version {schema!r}; this tidewise reads "
                            f"version {SCHEMA_VERSION} — retrain with `tidewise train`")
    arts = manifest.get("artifacts")
    if not isinstance(arts, dict) or SERIES_FILE not in arts:
        raise RegistryError(f"registry manifest {mpath} lists no artifacts; refusing it")
    listed = set(arts)
    for name, meta in arts.items():
        if os.path.basename(name) != name:
            raise RegistryError(f"registry manifest {mpath} names an artifact outside its folder: {name!r}")
        fpath = os.path.join(path, name)
        if not os.path.isfile(fpath):
            raise RegistryError(f"registry artifact {fpath} is missing; refusing version {manifest.get('version')}")
        digest = sha256_file(fpath)
        if digest != meta.get("sha256"):
            raise RegistryError(f"registry artifact {fpath} fails its checksum (sha256 {digest[:12]}…, manifest says "
                                f"{str(meta.get('sha256'))[:12]}…): it was modified after training; refusing "
                                f"version {manifest.get('version')} — retrain or restore it")
    stray = [f for f in os.listdir(path) if f.endswith((".joblib", ".pkl", ".pickle")) and f not in listed]
    if stray:
        raise RegistryError(f"registry version {path} holds unlisted model files {stray}; refusing it")
    return manifest


def load_version(registry_dir: str, version: str | None = None) -> RegistryVersion:
    """Verify, then load: the manifest and every checksum first, the joblib artifacts after."""
    import joblib

    path = resolve(registry_dir, version)
    manifest = verify(path)
    with open(os.path.join(path, SERIES_FILE), encoding="utf-8") as fh:
        series = json.load(fh)
    profiles = {}
    if "profiles.json" in manifest["artifacts"]:
        with open(os.path.join(path, "profiles.json"), encoding="utf-8") as fh:
            profiles = json.load(fh)
    gm = None
    if GLOBAL_FILE in manifest["artifacts"]:
        gm = joblib.load(os.path.join(path, GLOBAL_FILE))  # checksum verified above
    return RegistryVersion(path, manifest.get("version", os.path.basename(path)), manifest, series, gm, profiles)


def load_last_good(registry_dir: str, on_refused: Callable[[str, RegistryError], None] | None = None) -> RegistryVersion:
    """`latest` if it verifies, else the newest version that does (the serving loop's rule)."""
    tried = []
    candidates = []
    try:
        candidates.append(os.path.basename(resolve(registry_dir)))
    except RegistryError as exc:
        tried.append(str(exc))
    candidates += [v for v in reversed(list_versions(registry_dir)) if v not in candidates]
    for v in candidates:
        try:
            return load_version(registry_dir, v)
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

    choice = Choice(key, entry["model"], reg.quantiles, list(entry.get("shifts") or [0.0] * len(reg.quantiles)),
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


def forecast_with_registry(registry_dir: str, history, req, jobs: int | None = None) -> list:
    """`tidewise forecast --registry DIR`: forecast every series of `history` with the stored
    choices (model, calibration) and the stored global GBM — no backtest, no global refit. The
    global model predicts all series in batches; the cheap per-series models fan out over `jobs`
    processes (default: all cores when there are over 1,000 series). A series the registry does
    not know gets the no-backtest default, and its note says so."""
    from dataclasses import replace

    from predictor.errors import InputError
    from predictor.forecasting import series_requests
    from predictor.selection import GLOBAL

    reg = load_version(registry_dir)
    if tuple(float(q) for q in req.quantiles) != reg.quantiles:
        raise InputError(f"--quantiles {','.join(f'{q:g}' for q in req.quantiles)}: registry version {reg.version} "
                         f"was trained for {','.join(f'{q:g}' for q in reg.quantiles)}; ask for those or retrain")
    if int(req.step.total_seconds()) != int(reg.manifest.get("step_seconds", req.step.total_seconds())):
        raise InputError(f"--step {req.step}: registry version {reg.version} was trained at "
                         f"{reg.manifest.get('step_seconds')} s steps; use that step or retrain")
    if req.origin is None:
        req = replace(req, origin=history.end + req.step)
    reqs = series_requests(history, req)
    choices = {k: choice_of(k, reg.series[k], reg) for k in history.series if k in reg.series}
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
