"""STYLE.md: type hints everywhere, `mypy` clean on `predictor/` (and on the node agent)."""
import subprocess
import sys

from tests.conftest import ROOT


def test_mypy_clean_on_predictor_and_node_enforcer(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "predictor", "node_enforcer"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:]
