"""A command's outputs land all together or not at all (`contracts.atomic.all_or_none`): when the
second output fails, the first is untouched (same bytes, same mtime) and the message says so truly."""
from __future__ import annotations

import os

import pytest

from contracts.atomic import write_text_atomic
from contracts.errors import InputError
from tests.conftest import run_cli
from tests.studies.cost_fixtures import write_inputs
from tests.tidewise.test_bad_inputs import one_line_error
from tests.tidewise.test_replay_cli import MODEL, tidal_frame

OLD = "the previous run's\n"
LONG_AGO = 1_600_000_000  # an mtime a rewrite would change


def old_file(path) -> tuple[bytes, int]:
    """`path` holding OLD, dated LONG_AGO; its (bytes, mtime_ns) to compare with afterwards."""
    path.write_text(OLD)
    os.utime(path, (LONG_AGO, LONG_AGO))
    return state(path)


def state(path) -> tuple[bytes, int]:
    return path.read_bytes(), os.stat(path).st_mtime_ns


def no_temp_files(folder) -> bool:
    return not [n for root, _, names in os.walk(folder) for n in names if ".tmp" in n]


# --- the block, in the library -----------------------------------------------------------------------

def test_outputs_land_only_when_the_block_ends(tmp_path):
    from contracts.atomic import all_or_none

    a, b = tmp_path / "a.csv", tmp_path / "b.html"
    before = old_file(a)
    with all_or_none({"--output": str(a), "--report": str(b)}):
        write_text_atomic(str(a), "new a\n")
        assert state(a) == before and not b.exists()  # produced beside it, not yet in place
        write_text_atomic(str(b), "new b\n")
    assert (a.read_text(), b.read_text()) == ("new a\n", "new b\n") and no_temp_files(tmp_path)


@pytest.mark.parametrize("how", ["its parent became a file", "it became a folder"])
def test_the_second_output_failing_leaves_the_first_untouched(tmp_path, how):
    from contracts.atomic import all_or_none

    a, folder = tmp_path / "a.csv", tmp_path / "reports"
    folder.mkdir()
    b = folder / "b.html"
    before = old_file(a)
    with pytest.raises(InputError) as exc:
        with all_or_none({"--output": str(a), "--report": str(b)}):
            write_text_atomic(str(a), "new a\n")
            if how == "it became a folder":
                b.mkdir()
            else:
                folder.rmdir()
                folder.write_text("a file now")
            write_text_atomic(str(b), "new b\n")
    assert state(a) == before and no_temp_files(tmp_path)
    assert str(exc.value).startswith(f"--report {b}")
    assert f"nothing was written (--output {a} left as it was)" in str(exc.value) or \
        f"{b} is a folder" in str(exc.value), str(exc.value)


def test_a_target_that_changed_before_the_end_stops_every_rename(tmp_path):
    from contracts.atomic import all_or_none

    a, b = tmp_path / "a.csv", tmp_path / "b.html"
    before = old_file(b)
    with pytest.raises(InputError, match=r"--output .*a.csv is a folder.*; nothing was written \(--report .*b.html "
                                         r"left as it was\)"):
        with all_or_none({"--output": str(a), "--report": str(b)}):
            write_text_atomic(str(a), "new a\n")
            write_text_atomic(str(b), "new b\n")
            a.mkdir()  # checked up front, a folder by the time the outputs land
    assert state(b) == before and no_temp_files(tmp_path)


def test_two_outputs_of_one_command_on_one_file_are_refused(tmp_path):
    from contracts.atomic import all_or_none

    a = tmp_path / "a.csv"
    with pytest.raises(InputError, match="--report .*a.csv is the same file as --output; give each output its own"):
        with all_or_none({"--output": str(a), "--report": str(tmp_path / "." / "a.csv")}):
            pass
    with pytest.raises(InputError, match="--report .*a.csv is the same file as --output .*a.csv; give each output"):
        with all_or_none():  # not named up front: found as they are written
            write_text_atomic(str(a), "one", what="--output")
            write_text_atomic(str(a), "two", what="--report")
    assert not a.exists() and no_temp_files(tmp_path)
    with all_or_none():  # one output written twice (serve's file sink: an HPA's floor, then its target)
        write_text_atomic(str(a), "one", what="file sink output")
        write_text_atomic(str(a), "two", what="file sink output")
    assert a.read_text() == "two" and no_temp_files(tmp_path)


# --- the commands --------------------------------------------------------------------------------------

def test_replay_whose_report_fails_leaves_its_output_untouched(tmp_path):
    """`replay vpa --output v.csv --report v.html`: the report failed (a full disk) after v.csv was
    replaced, and the line said "nothing was written"."""
    inp = tmp_path / "in.csv"
    tidal_frame(series=("web/cpu",)).to_csv(inp, index=False)
    first, second = tmp_path / "first", tmp_path / "second"
    for d in (first, second):
        d.mkdir()
    argv = ["replay", "vpa", "--input", str(inp), *MODEL]
    assert run_cli(*argv, "--output", str(first / "v.csv"), "--report", str(first / "v.html")).returncode == 0
    csv, page = (os.path.getsize(first / n) for n in ("v.csv", "v.html"))
    assert csv < page  # a disk that holds the CSV and not the page
    out = second / "v.csv"
    before = old_file(out)
    r = run_cli(*argv, "--output", str(out), "--report", str(second / "v.html"), fsize=csv + 1)
    lines = [line for line in r.stderr.splitlines() if "error" in line]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr
    assert lines[0] == (f"tidewise replay: error: --report {second / 'v.html'}: writing failed (File too large); "
                        f"nothing was written (--output {out} left as it was): free space or give a file in a "
                        "writable folder")
    assert state(out) == before and os.listdir(second) == ["v.csv"]


def test_replay_refuses_one_new_name_for_both_outputs(tmp_path):
    inp = tmp_path / "in.csv"
    tidal_frame(series=("web/cpu",), days=2).to_csv(inp, index=False)
    same = tmp_path / "new.csv"
    one_line_error(run_cli("replay", "vpa", "--input", str(inp), "--output", str(same), "--report", str(same)), 2,
                   f"--report {same} is the same file as --output {same}; give each output its own name")
    assert not same.exists()


def test_the_cost_report_writes_its_three_files_or_none(tmp_path):
    f = write_inputs(tmp_path)
    args = ["report", "--cost", f["--cost"], "--history", f["--history"], "--node-size", "32,128"]
    assert run_cli(*args, "--out", str(tmp_path / "first.html")).returncode == 0
    sizes = {ext: os.path.getsize(tmp_path / f"first.{ext}") for ext in ("html", "json", "csv")}
    assert sizes["html"] > max(sizes["json"], sizes["csv"])  # written last, and the largest
    out = tmp_path / "cost.html"
    before = {ext: old_file(tmp_path / f"cost.{ext}") for ext in ("json", "csv")}
    r = run_cli(*args, "--out", str(out), fsize=max(sizes["json"], sizes["csv"]) + 1)
    line = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and line.startswith(f"tidewise report: error: --out {out}: writing failed"), r.stderr
    assert f"nothing was written (--out's json {tmp_path / 'cost.json'}, --out's csv {tmp_path / 'cost.csv'} left as " \
           "they were)" in line
    assert {ext: state(tmp_path / f"cost.{ext}") for ext in ("json", "csv")} == before and not out.exists()
