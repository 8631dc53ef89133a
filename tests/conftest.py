"""Shared test helpers: paths to the real traces and a way to run the command in-process."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.environ.get("SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python -m tidewise ARGS` as a real process (as a user would), capturing output."""
    return subprocess.run([sys.executable, "-m", "tidewise", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.fixture
def shared_data() -> str:
    if not os.path.isdir(SHARED_DATA):
        raise RuntimeError(f"the real traces are expected at {SHARED_DATA} (../shared/data next to the checkout)")
    return SHARED_DATA
