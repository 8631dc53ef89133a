"""Issue 22, low item: outputs of every file command (forecast, replay, profile, report, fetch, train)
that cannot be written are one line with exit 2, never a traceback or a half file; an output that is
the input is refused; `--output newdir/` is never a file named `newdir`."""
import os
import resource
import subprocess

import pytest

from tests.conftest import run_cli
from tests.studies.cost_fixtures import write_inputs
from tests.tidewise.test_bad_inputs import history_csv, one_line_error

# command -> its arguments, {out} the output path, {inp} a 3-day history
COMMANDS = {
    "forecast": ["forecast", "--input", "{inp}", "--output", "{out}", "--horizon", "2h"],
    "replay": ["replay", "vpa", "--input", "{inp}", "--output", "{out}"],
    "profile": ["profile", "--input", "{inp}", "--output", "{out}"],
    "report": ["report", "--cost", "{cost}", "--history", "{history}", "--out", "{out}"],
}


def run(args, fsize=None):
    """The command line as a real process; `fsize`: RLIMIT_FSIZE in bytes, a full disk as the writer
    sees it (every write past it fails with EFBIG; Python ignores SIGXFSZ)."""
    return run_cli(*args, fsize=fsize)


def failed_write(r, *needles):
    """Exit 2, no traceback, and one error line (after the progress lines of the work done)."""
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and r.stderr.strip().splitlines()[-1] == errors[0], r.stderr
    assert all(n in errors[0] for n in needles), errors[0]
    return errors[0]


def fill(command, tmp_path, out):
    f = write_inputs(tmp_path) if command == "report" else {}
    inp = history_csv(tmp_path / "h.csv")
    values = {"inp": inp, "out": str(out), "cost": f.get("--cost", ""), "history": f.get("--history", "")}
    return [a.format(**values) for a in COMMANDS[command]]


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder no write can land in, even as root: a read-only tmpfs when root, else mode 0555."""
    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() != 0:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
        return
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(d)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {r.stderr.decode().strip()}")
    yield d
    subprocess.run(["umount", str(d)], check=True)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, command):
    args = fill(command, tmp_path, tmp_path / ("out.html" if command == "report" else "out.csv"))
    before = set(os.listdir(tmp_path))
    line = failed_write(run(args, fsize=200), "writing failed (File too large)", "nothing was written")
    assert str(tmp_path / "out") in line
    assert set(os.listdir(tmp_path)) == before  # no output, no temporary file left behind


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_read_only_folder_is_refused_before_any_work(tmp_path, read_only_dir, command):
    args = fill(command, tmp_path, read_only_dir / ("out.html" if command == "report" else "out.csv"))
    one_line_error(run(args), 2, "is not writable", str(read_only_dir))


def test_fetch_and_train_into_a_read_only_folder(tmp_path, read_only_dir):
    # the URL is unreachable on purpose: the output is refused before anything is asked of it
    one_line_error(run(["fetch", "--prometheus-url", "http://127.0.0.1:9", "--last", "1h",
                        "--output", str(read_only_dir / "h.csv")]), 2, "--output", "is not writable")
    one_line_error(run(["train", "--source", "synthetic", "--registry", str(read_only_dir / "models")]), 2,
                   "--registry", "is not writable")


def test_train_on_a_full_disk_is_one_line_and_leaves_no_partial_version(tmp_path):
    reg = tmp_path / "models"
    r = run(["train", "--source", "synthetic", "--workloads", "1", "--last", "3d", "--folds", "1", "--no-global",
             "--no-decision-time", "--registry", str(reg)], fsize=20_000)
    failed_write(r, "--registry", "writing failed (File too large)")
    assert not [n for n in os.listdir(reg) if n.startswith(".2")]


def test_output_equal_to_the_input_is_refused_by_any_name(tmp_path):
    inp = history_csv(tmp_path / "h.csv")
    original = open(inp).read()
    (tmp_path / "link.csv").symlink_to(inp)
    os.link(inp, tmp_path / "hard.csv")
    (tmp_path / "sub").mkdir()
    for command, out in (("forecast", inp), ("replay", str(tmp_path / "link.csv")),
                         ("profile", str(tmp_path / "hard.csv")), ("forecast", str(tmp_path / "sub" / ".." / "h.csv"))):
        args = [a.format(inp=inp, out=out) for a in COMMANDS[command]]
        one_line_error(run(args), 2, "is the same file as --input", "would overwrite the input")
    assert open(inp).read() == original
    one_line_error(run(["replay", "vpa", "--input", inp, "--output", str(tmp_path / "o.csv"), "--report", inp]), 2,
                   "--report", "same file as --input")


@pytest.mark.parametrize("command", ["forecast", "profile"])
def test_output_with_a_trailing_slash_is_never_a_file_named_so(tmp_path, command):
    args = fill(command, tmp_path, str(tmp_path / "newdir") + "/")
    one_line_error(run(args), 2, "newdir/ ends with '/'", "give a file name")
    assert not os.path.lexists(tmp_path / "newdir")


def test_a_write_that_fails_midway_is_an_input_error_in_the_library(tmp_path):
    from contracts.atomic import write_text_atomic
    from predictor.errors import InputError

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, hard))
    try:
        with pytest.raises(InputError, match=r"out.txt: writing failed \(File too large\)"):
            write_text_atomic(str(tmp_path / "out.txt"), "x" * 1000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert os.listdir(tmp_path) == []
