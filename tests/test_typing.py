"""STYLE.md: type hints everywhere, `mypy` clean on every package (config: pyproject [tool.mypy])."""
import os
import subprocess
import sys

from tests.conftest import ROOT

# every shipped package; `studies` once it exists (another change creates it)
PACKAGES = ["contracts", "predictor", "training", "autoscaler", "extender", "node_enforcer", "tidewise", "studies", "reports"]


def test_mypy_clean_on_every_package(tmp_path):
    present = [p for p in PACKAGES if os.path.isdir(os.path.join(ROOT, p))]
    assert {"contracts", "predictor", "autoscaler", "extender", "node_enforcer", "tidewise"} <= set(present)
    r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), *present],
                       capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:]
