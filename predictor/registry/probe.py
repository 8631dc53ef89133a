"""Load a version's LightGBM models in a child process first: a crash there refuses the version.

`predictor.models.lightgbm_text` checks every model text before LightGBM reads it; the probe is
the guarantee against what that check did not foresee. A child Python (`-I -S`: the standard
library only) opens LightGBM's own library with ctypes, loads each checked text through its C API
and predicts four rows (zeros, NaN, -1e30, 1e30). Only when it exits cleanly does the caller
load the models in its own process. Measured on a trained version (14 models, 1,120 trees): the
child takes ~0.05 s of CPU and 17 MB, where one importing the `lightgbm` package (which imports
scikit-learn and pandas) would take ~2.5 s of CPU and 190 MB.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
from typing import Sequence

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 120.0  # a version's models load in ~0.1 s; a loaded 2-core machine can be 100x slower
_LIBRARIES = ("lib_lightgbm.so", "lib_lightgbm.dylib", "lib_lightgbm.dll")
_LIGHTGBM_FAILED = 3  # the child's exit code when LightGBM returned an error (not a crash)

_CHILD = r"""
import ctypes, json, sys
job = json.loads(sys.stdin.read())
lib = ctypes.CDLL(job["library"])
lib.LGBM_GetLastError.restype = ctypes.c_char_p
def failed(rc):
    if rc:
        sys.stderr.write("lightgbm:" + lib.LGBM_GetLastError().decode("utf-8", "replace").replace("\n", " ") + "\n")
        sys.exit(3)
for i, (text, n) in enumerate(job["models"]):
    sys.stderr.write(f"probe:{i}\n")
    sys.stderr.flush()
    handle, iterations = ctypes.c_void_p(), ctypes.c_int()
    failed(lib.LGBM_BoosterLoadModelFromString(text.encode("ascii"), ctypes.byref(iterations), ctypes.byref(handle)))
    rows = [0.0] * n + [float("nan")] * n + [-1e30] * n + [1e30] * n
    out_len, out = ctypes.c_int64(), (ctypes.c_double * 4)()
    # float64 rows (1), 4 of n columns, row-major (1), plain prediction (0) of iterations 0 to the last (-1)
    failed(lib.LGBM_BoosterPredictForMat(handle, (ctypes.c_double * len(rows))(*rows), 1, 4, n, 1, 0, 0, -1,
                                         b"num_threads=1", ctypes.byref(out_len), out))
    lib.LGBM_BoosterFree(handle)
"""


class ProbeError(ValueError):
    """LightGBM failed or crashed on model `index` of a probe (`index` None: before any model)."""

    def __init__(self, message: str, index: int | None):
        super().__init__(message)
        self.index = index


def lightgbm_library() -> str | None:
    """The path of LightGBM's shared library, found without importing the package (None: not found)."""
    try:
        spec = importlib.util.find_spec("lightgbm")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("lib", ""):
            for name in _LIBRARIES:
                path = os.path.join(folder, sub, name)
                if os.path.isfile(path):
                    return path
    return None


def probe_lightgbm(models: Sequence[tuple[str, int]], timeout: float = PROBE_TIMEOUT_S) -> None:
    """Load and predict with each (checked model text, feature count) in a child process;
    ProbeError when LightGBM fails or crashes there. Skipped (with a warning) where no child can
    run LightGBM's library: the text checks alone then stand between the files and the loader."""
    library = lightgbm_library()
    if not models or library is None or not sys.executable:
        if models:
            log.warning("LightGBM's library or the Python executable was not found: the registry's LightGBM "
                        "models are loaded without a probe in a child process (their text is checked)")
        return
    job = json.dumps({"library": library, "models": [[text, int(n)] for text, n in models]})
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", _CHILD], input=job.encode("ascii"),
                              capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        raise ProbeError(f"LightGBM did not load it within {timeout:g} s in a child process",
                         _model_index(exc.stderr)) from None
    if proc.returncode == 0:
        return
    if proc.returncode < 0:
        why = f"it crashes LightGBM ({_signal_name(-proc.returncode)} in a child process)"
    elif proc.returncode == _LIGHTGBM_FAILED:
        why = f"LightGBM refuses it ({_last_line(proc.stderr, 'lightgbm:')})"
    else:
        why = f"the probe failed (exit {proc.returncode}: {_last_line(proc.stderr)})"
    raise ProbeError(why, _model_index(proc.stderr))


def _last_line(stderr: bytes | None, prefix: str = "") -> str:
    """The child's last line of stderr starting with `prefix`, without it ("" when none)."""
    lines = [ln[len(prefix):] for ln in (stderr or b"").decode("utf-8", "replace").splitlines() if ln.startswith(prefix)]
    return lines[-1][:200] if lines else ""


def _model_index(stderr: bytes | None) -> int | None:
    """The model the child was on (it says `probe:<i>` before each)."""
    index = _last_line(stderr, "probe:")
    return int(index) if index.isdigit() else None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
