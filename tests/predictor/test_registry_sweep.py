"""Issue 22, low item: a `train` killed mid-write leaves a hidden partial version folder; the next
write sweeps it (only our own names, only incomplete, only once untouched for hours)."""
import os
import subprocess
import sys
import time

from predictor.registry import load_version, writing
from tests.conftest import ROOT

QS = (0.5, 0.9)
SERIES = {"ns/Deployment/a/app/cpu": {"model": "seasonal_naive_daily", "shifts": [0.0, 0.1]}}

# a real process, killed with SIGKILL while it writes the manifest (as the OOM killer or `kill -9` would)
KILLED_WRITER = """
import os, signal, sys
from predictor.registry import writing
writing._write_chain = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
writing.write_version(sys.argv[1], quantiles=(0.5, 0.9),
                      series={"a/b/c/d/cpu": {"model": "seasonal_naive_daily", "shifts": [0.0, 0.1]}},
                      data_window=("2024-08-01T00:00:00+00:00", "2024-08-08T00:00:00+00:00"), step_seconds=300)
"""


def _write(reg, **kw):
    return writing.write_version(str(reg), quantiles=QS, series=SERIES, step_seconds=300,
                                 data_window=("2024-08-01T00:00:00+00:00", "2024-08-08T00:00:00+00:00"), **kw)


def _age(path, hours):
    old = time.time() - hours * 3600
    for root, dirs, files in os.walk(path):
        for name in files:
            os.utime(os.path.join(root, name), (old, old))
    os.utime(path, (old, old), follow_symlinks=False)


def test_a_killed_write_leaves_a_partial_folder_that_the_next_write_sweeps(tmp_path):
    reg = tmp_path / "models"
    reg.mkdir()
    r = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(reg)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == -9, r.stderr
    partial = [n for n in os.listdir(reg) if n.startswith(".")]
    assert len(partial) == 1 and (reg / partial[0] / "series.json").exists()  # what the kill left
    _write(reg)  # a fresh partial may be a live writer's: kept
    assert (reg / partial[0]).is_dir()
    _age(reg / partial[0], hours=7)
    version = _write(reg)
    assert not (reg / partial[0]).exists()
    assert load_version(str(reg)).version == version


def test_the_sweep_touches_only_our_incomplete_partials(tmp_path):
    reg = tmp_path / "models"
    first = _write(reg, version="20240801T000000Z-aaaaaa")
    keep = {
        ".backup": "a hidden folder of someone else",
        ".20240801T000000Z-aaaaaa": "a hidden name without mkdtemp's suffix",
        "20240802T000000Z-bbbbbb.abcd1234": "not hidden",
    }
    for name in keep:
        (reg / name).mkdir()
        (reg / name / "x").write_text("x")
    done = reg / ".20240803T000000Z-cccccc.k3j_9xq2"  # every file written, killed before the rename
    done.mkdir()
    (done / "manifest.sha256").write_text("digest\n")
    ours = reg / ".20240804T000000Z-dddddd.ab_c12xy"
    ours.mkdir()
    (ours / "series.json").write_text("{")
    link = reg / ".latest.4242.a1b2c3"
    link.symlink_to(first)
    for p in [*(reg / n for n in keep), done, ours, link]:
        _age(p, hours=24)
    assert sorted(writing.sweep_partial_versions(str(reg))) == [".20240804T000000Z-dddddd.ab_c12xy", ".latest.4242.a1b2c3"]
    assert all((reg / n / "x").exists() for n in keep) and done.is_dir()
    assert not ours.exists() and not os.path.lexists(link)
    assert load_version(str(reg)).version == first
