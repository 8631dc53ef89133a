"""Shared test helpers: paths to the real traces and a way to run the command in-process."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared"))
SHARED_DATA = os.environ.get("SHARED_DATA", os.path.join(SHARED, "data"))
SHARED_EVAL = os.environ.get("SHARED_EVAL", os.path.join(SHARED, "eval"))

# The real traces and the reference scorers live beside the checkout (../shared), not in it (their
# licences forbid copying them in). CI has them; a plain clone does not, and then the tests that
# need them are skipped with this reason rather than failing.
needs_shared_data = pytest.mark.skipif(not os.path.isdir(SHARED_DATA),
                                       reason=f"needs the real traces in {SHARED_DATA} (../shared/data beside the checkout)")
needs_shared_eval = pytest.mark.skipif(not os.path.isdir(SHARED_EVAL),
                                       reason=f"needs the reference scorers in {SHARED_EVAL} (../shared/eval beside the checkout)")


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python -m tidewise ARGS` as a real process (as a user would), capturing output."""
    return subprocess.run([sys.executable, "-m", "tidewise", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def run_main(*args: str) -> subprocess.CompletedProcess:
    """`tidewise ARGS` in this process (tidewise.cli.main), for tests about what a command computes, not
    about the process boundary: a `python -m tidewise` costs ~1 s of CPU in imports alone (pandas), and
    the suite runs ~100. Same result shape as run_cli; an unexpected exception fails the test with its
    traceback (a process would exit 1 with it on stderr). Log lines are pytest's (caplog), not stderr."""
    import contextlib
    import io
    import logging

    from tidewise.cli import main

    out, err = io.StringIO(), io.StringIO()
    urllib3 = logging.getLogger("urllib3")
    level = urllib3.level  # main() quiets urllib3 for the process; a test must not change it for the next
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse: --help, --version, usage errors
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        urllib3.setLevel(level)
    return subprocess.CompletedProcess(["tidewise", *args], code, out.getvalue(), err.getvalue())


def write_kubeconfig(path, url: str) -> str:
    """A kubeconfig at `path` whose one context points the real client at `url` (a local fake)."""
    import yaml

    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}]}))
    return str(path)


@pytest.fixture
def shared_data() -> str:
    if not os.path.isdir(SHARED_DATA):
        pytest.skip(f"needs the real traces in {SHARED_DATA} (../shared/data beside the checkout)")
    return SHARED_DATA


def wait_until(predicate, timeout: float = 15.0) -> bool:
    """Poll until `predicate()` holds (watch threads deliver asynchronously); no timing asserted."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# The tests that touch a data path: parsing files and timestamps, the history sources, forecast
# output, the replay's and the cost report's inputs, and the loop's timestamps. `make test` runs the
# whole suite under today's releases and these again under the previous pandas major (pandas 2),
# whose parsing and timestamp units differ (`make test-pandas2`: pytest -m data_paths).
# tests/test_layout.py checks that every module named here exists.
DATA_PATH_MODULES = (
    "tests.predictor.test_history", "tests.predictor.test_timestamps", "tests.predictor.test_columnar_io",
    "tests.predictor.test_durations", "tests.predictor.test_history_needs", "tests.predictor.test_synthetic",
    "tests.predictor.test_features", "tests.predictor.test_batched", "tests.predictor.test_registry",
    "tests.predictor.test_decision_forecast", "tests.predictor.test_decision_origin",
    "tests.integration.test_prometheus_fetch", "tests.integration.test_incremental_prometheus",
    "tests.autoscaler.test_incremental", "tests.autoscaler.test_loop_timestamps",
    "tests.tidewise.test_forecast_cli", "tests.tidewise.test_bad_inputs", "tests.tidewise.test_replay_cli",
    "tests.studies.test_replay", "tests.studies.test_cost", "tests.training.test_history_needs",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module is not None and item.module.__name__ in DATA_PATH_MODULES:
            item.add_marker(pytest.mark.data_paths)
