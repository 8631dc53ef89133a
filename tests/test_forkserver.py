"""The tests' `run_cli` forks its commands from tests/forkserver.py: what a test sees of a command must be
what a fresh `python -m tidewise` gives (exit code, stdout, stderr, environment, limits, timeout)."""
import json
import os
import subprocess

import pytest

from tests.conftest import run_cli


def both(monkeypatch, *args, **kw):
    """`run_cli(*args)` forked, then in a fresh interpreter (TIDEWISE_TEST_SPAWN=1)."""
    monkeypatch.delenv("TIDEWISE_TEST_SPAWN", raising=False)
    forked = run_cli(*args, **kw)
    monkeypatch.setenv("TIDEWISE_TEST_SPAWN", "1")
    fresh = run_cli(*args, **kw)
    return forked, fresh


@pytest.mark.parametrize("args", [
    ("--version",),
    ("replay", "vpa", "--input", "/nonexistent/in.csv", "--output", "/nonexistent/out.csv"),
    ("forecast", "--help"),
    ("no-such-command",),
])
def test_a_forked_command_gives_what_a_fresh_interpreter_gives(monkeypatch, args):
    forked, fresh = both(monkeypatch, *args)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.args == fresh.args


def test_the_environment_and_the_file_size_limit_reach_the_command(monkeypatch, tmp_path):
    narrow, wide = (both(monkeypatch, "forecast", "--help", env=dict(os.environ, COLUMNS=c)) for c in ("50", "200"))
    assert narrow[0].stdout == narrow[1].stdout and wide[0].stdout == wide[1].stdout  # argparse reads COLUMNS
    assert narrow[0].stdout != wide[0].stdout
    assert len(narrow[0].stdout.splitlines()) > len(wide[0].stdout.splitlines())  # wrapped to 50 columns
    # a full disk: the forecast's own file stops at 100 bytes, its stderr (a pipe) is whole
    frame = "series,timestamp,value\n" + "".join(f"a,2024-05-01T{h:02d}:{m:02d}:00Z,{1 + h % 3}\n"
                                                 for h in range(24) for m in range(0, 60, 5))
    (tmp_path / "in.csv").write_text(frame)
    out = tmp_path / "out.csv"
    forked, fresh = both(monkeypatch, "forecast", "--input", str(tmp_path / "in.csv"), "--output", str(out),
                         "--horizon", "2h", fsize=100)
    assert forked.returncode == fresh.returncode == 2, forked.stderr
    assert forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]
    assert "File too large" in forked.stderr.splitlines()[-1] and not out.exists()


def test_a_command_past_its_timeout_is_killed_and_the_next_one_runs(tmp_path):
    (tmp_path / "state.json").write_text(json.dumps({"nodes": [], "pods": []}))
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli("extender", "--listen", "127.0.0.1:0", "--cluster-state", str(tmp_path / "state.json"), timeout=3)
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("tidewise ")
