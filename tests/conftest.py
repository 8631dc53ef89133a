"""Shared test helpers: paths to the real traces and a way to run the command in-process."""
from __future__ import annotations

import json
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


def run_cli(*args: str, timeout: float = 300, env: dict[str, str] | None = None,
            fsize: int | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run `python -m tidewise ARGS` as a real process (as a user would), capturing output; `env` replaces
    the environment as subprocess's does; `fsize`: RLIMIT_FSIZE in bytes (a full disk as the writer sees
    it: every write past it fails with EFBIG; Python ignores SIGXFSZ); `cwd`: its working folder (default
    the checkout). The process is forked from
    tests/forkserver.py, which holds pandas, scikit-learn and scipy imported (~2.5 s of CPU a command
    otherwise); TIDEWISE_TEST_SPAWN=1 starts a fresh interpreter for each instead."""
    argv = ["-m", "tidewise", *args]
    if os.environ.get("TIDEWISE_TEST_SPAWN") == "1" or not hasattr(os, "fork"):
        def limit() -> None:
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout,
                              cwd=cwd or ROOT, env=env, preexec_fn=limit if fsize is not None else None)
    return _forkserver().run(list(args), dict(os.environ if env is None else env), cwd or ROOT, timeout, fsize)


class _ForkServer:
    """The client side of tests/forkserver.py: one server per test process, started on first use."""

    def __init__(self) -> None:
        import atexit
        import threading

        self._lock = threading.Lock()  # one command at a time on the pipe
        self.proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "forkserver.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        first = self._read()
        if not first.get("ready"):
            raise RuntimeError(f"tests/forkserver.py did not start: {first}")
        atexit.register(self.close)

    def _read(self) -> dict:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"tests/forkserver.py exited ({self.proc.poll()})")
        return json.loads(line)

    def run(self, argv: list[str], env: dict[str, str], cwd: str, timeout: float,
            fsize: int | None) -> subprocess.CompletedProcess:
        with self._lock:
            return self._run(argv, env, cwd, timeout, fsize)

    def _run(self, argv: list[str], env: dict[str, str], cwd: str, timeout: float,
             fsize: int | None) -> subprocess.CompletedProcess:
        import signal
        import threading

        self.proc.stdin.write(json.dumps(  # type: ignore[union-attr]
            {"argv": argv, "env": env, "cwd": cwd, "fsize": fsize}) + "\n")
        self.proc.stdin.flush()  # type: ignore[union-attr]
        pid = self._read()["pid"]
        timer = threading.Timer(timeout, os.kill, (pid, signal.SIGKILL))
        timer.start()
        try:
            end = self._read()
        finally:
            timed_out = not timer.is_alive()
            timer.cancel()
        code, stdout, stderr = end["code"], end["stdout"], end["stderr"]
        cmd = [sys.executable, "-m", "tidewise", *argv]
        if timed_out and code == -signal.SIGKILL:
            raise subprocess.TimeoutExpired(cmd, timeout, stdout, stderr)
        return subprocess.CompletedProcess(cmd, code, stdout, stderr)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_SERVER: list[_ForkServer] = []


def _forkserver() -> _ForkServer:
    """This test process's fork server, started again if it died (a broken server fails one test, not all)."""
    if not _SERVER or _SERVER[0].proc.poll() is not None:
        _SERVER[:] = [_ForkServer()]
    return _SERVER[0]


def run_main(*args: str) -> subprocess.CompletedProcess:
    """`tidewise ARGS` in this process (tidewise.cli.main), for tests about what a command computes, not
    about the process boundary: even forked from the server, a command's process imports Tidewise's
    own modules again (~0.3-0.5 s of CPU). Same result shape as run_cli; an unexpected exception fails the test with its
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


# the studies replay a week after 5 days of training: 14 days leave a day for a gap
DEMO_SIZE = ("--workloads", "6", "--days", "14")


@pytest.fixture(scope="session")
def demo_clone(tmp_path_factory) -> tuple[str, subprocess.CompletedProcess]:
    """A fresh clone's folder after `make demo`, smaller (once a session): `tidewise demo --out demo-out`
    run in it with `DEMO_SIZE` (make demo's 12 workloads over 21 days make the README's study commands
    take four minutes of CPU; the image test runs the demo at its defaults), the checkout's docs/ beside
    it (the README's commands name docs/prices.example.yaml) and no ../shared. (folder, the demo's process)."""
    work = tmp_path_factory.mktemp("clone")
    os.symlink(os.path.join(ROOT, "docs"), work / "docs")
    assert not os.path.exists(work / ".." / "shared")
    r = run_cli("demo", "--out", "demo-out", *DEMO_SIZE, cwd=str(work))
    assert r.returncode == 0, r.stderr
    return str(work), r


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
