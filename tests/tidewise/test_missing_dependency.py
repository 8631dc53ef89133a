"""A command run where a dependency is not installed (the node agent's image has no numpy or pandas:
pyproject's `agent` list) ends with one line naming the package and the full install, not a traceback."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib

from tests.conftest import ROOT
from tidewise.cli import PACKAGES

# `import pandas` (or numpy) raises ModuleNotFoundError as where neither is installed
WITHOUT = ("import sys\n"
           "for name in sys.argv[1].split(','):\n"
           "    sys.modules[name] = None\n"
           "from tidewise.cli import main\n"
           "sys.exit(main(sys.argv[2:]))\n")


def tidewise_without(missing: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT, missing, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_a_command_needing_a_missing_package_says_so_in_one_line(tmp_path):
    history = tmp_path / "history.csv"
    history.write_text("series,timestamp,value\na,2026-01-01T00:00:00Z,1\n")
    r = tidewise_without("numpy,pandas", "forecast", "--input", str(history), "--output", str(tmp_path / "f.csv"))
    assert r.returncode == 1, r.stderr[-2000:]
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("tidewise forecast: error: the Python package ") and "`pip install tidewise`" in line, line
    assert line.split()[6] in ("numpy", "pandas"), line
    assert not (tmp_path / "f.csv").exists()


def test_a_missing_module_of_the_project_itself_is_not_hidden():
    r = tidewise_without("predictor.durations", "train", "--source", "synthetic", "--registry", "/nonexistent/x")
    assert r.returncode == 1 and "Traceback" in r.stderr and "predictor.durations" in r.stderr, r.stderr[-2000:]


def test_the_project_s_packages_are_the_ones_pyproject_ships():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        include = tomllib.load(fh)["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(PACKAGES) == sorted(p.rstrip("*") for p in include)
