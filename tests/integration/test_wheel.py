"""What `pip install .` ships (issue 23 item 7): the wheel built from this checkout holds every package
pyproject's packages.find includes, and none of what the tests stand on — no `testsupport/` (the API
fake, the real-cgroup tree), no `tests/`, no `node_enforcer/testing/` (where the fake used to live).

The wheel is built as `pip install .` builds it (in build isolation: pyproject's setuptools>=77, not
the virtualenv's), from a copy of the checkout's files (tracked or new, not ignored), so a `build/`
left over from an earlier install cannot add stale files. One build (about 20 s): this file is in no
other pass of `make test` (no `data_paths` marker), so it runs once, in the main suite.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration
NEVER_SHIPPED = ("testsupport/", "tests/", "node_enforcer/testing/")


def checkout_copy(dest: str) -> str:
    """The checkout's files as they are now (not git's last commit), without ignored ones."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))
    return dest


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> list[str]:
    tmp = tmp_path_factory.mktemp("wheel")
    src = checkout_copy(str(tmp / "src"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
                        "-w", str(tmp / "dist"), src], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = [f for f in os.listdir(tmp / "dist") if f.endswith(".whl")]
    with zipfile.ZipFile(tmp / "dist" / wheel) as zf:
        return zf.namelist()


def test_the_wheel_holds_no_test_support(wheel_files):
    leaked = sorted(f for f in wheel_files if f.startswith(NEVER_SHIPPED))
    assert not leaked, leaked


def test_the_wheel_holds_every_package_pyproject_includes(wheel_files):
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        find = tomllib.load(fh)["tool"]["setuptools"]["packages"]["find"]
    assert any(p.startswith("testsupport") for p in find.get("exclude", [])), "pyproject excludes testsupport"
    tops = [p.rstrip("*") for p in find["include"]]
    packages = [os.path.relpath(os.path.join(here, "__init__.py"), ROOT).replace(os.sep, "/")
                for top in tops for here, dirs, files in os.walk(os.path.join(ROOT, top))
                if "__init__.py" in files and "__pycache__" not in here]
    assert {p.split("/")[0] for p in packages} == set(tops)  # each included name is a package here
    missing = sorted(set(packages) - set(wheel_files))
    assert not missing, f"packages pyproject includes but the wheel lacks: {missing}"
    assert "tidewise/cli.py" in wheel_files
