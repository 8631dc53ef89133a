"""`tidewise serve --once` as a user runs it (a real process): its exit status says whether the run
did its job. Writes that fail, conflict or are refused make it exit 1 and name every such object;
so does a kill switch that cannot be read or understood; an explicit `stop` exits 0."""
from __future__ import annotations

import pytest
import yaml

from predictor.history import write_long
from testsupport.kube_fake import FakeApiServer
from tests.conftest import run_cli, write_kubeconfig


@pytest.fixture
def cluster(small, objects, tmp_path):
    history = tmp_path / "history.parquet"
    write_long(small[1], str(history))
    fake = FakeApiServer(objects).start()
    try:
        cmd = ["serve", "--once", "--kubeconfig", write_kubeconfig(tmp_path / "kubeconfig", fake.url),
               "--source", "file", "--input", str(history), "--model", "seasonal_naive_daily"]
        yield fake, cmd, objects
    finally:
        fake.stop()


def names(objects, kind):
    return [f"{kind}/{o['metadata']['namespace']}/{o['metadata']['name']}" for o in objects if o["kind"] == kind]


def test_failed_and_conflicting_writes_exit_1_and_name_each_object(cluster, tmp_path):
    fake, cmd, objects = cluster
    fake.fail("PATCH", r"/verticalpodautoscalers/.*/status", 403, times=1000)
    fake.fail("PATCH", r"/horizontalpodautoscalers/", 409, times=1000)
    proc = run_cli(*cmd, "--apply", "--report", str(tmp_path / "report.json"))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    report = yaml.safe_load((tmp_path / "report.json").read_text())
    failed = {w["object"]: w["outcome"] for w in report["writes"] if w["outcome"] not in ("written", "dry-run")}
    assert {k for k, v in failed.items() if v == "forbidden"} == set(names(objects, "VerticalPodAutoscaler"))
    conflicting = {k for k, v in failed.items() if v == "conflict"}
    assert conflicting and conflicting <= set(names(objects, "HorizontalPodAutoscaler"))
    for key in failed:
        assert f"not done: {key}: " in proc.stderr  # every one by name, on the command's output
    assert len(report["problems"]) == len(failed)
    # the nodes were still written: one refused kind does not stop the others
    assert any(w["object"].startswith("Node/") and w["outcome"] == "written" for w in report["writes"])


def test_a_clean_run_exits_0(cluster):
    fake, cmd, _ = cluster
    proc = run_cli(*cmd, "--apply")
    assert proc.returncode == 0, proc.stderr
    assert fake.writes() and "not done" not in proc.stderr


@pytest.mark.parametrize("text,code", [("stop\n", 0), ("halt\n", 1), (None, 1)])
def test_the_kill_switch_exit_status(cluster, tmp_path, text, code):
    fake, cmd, _ = cluster
    switch = tmp_path / "kill-switch"
    if text is not None:
        switch.write_text(text)
    proc = run_cli(*cmd, "--apply", "--kill-switch", str(switch))
    assert proc.returncode == code, proc.stderr
    assert "killed" in proc.stderr and fake.writes() == []
    if code:
        assert f"not done: killed: kill switch {switch}" in proc.stderr


def test_a_frozen_run_exits_1(cluster):
    fake, cmd, _ = cluster
    proc = run_cli(*cmd, "--now", "2026-11-02T02:00:00Z")  # the history ends 2 h earlier: stale
    assert proc.returncode == 1 and "frozen" in proc.stderr and "stale" in proc.stderr
    assert fake.writes() == []


def test_review_files_and_report_land_together_or_not_at_all(small, objects, tmp_path):
    """`serve --once --sink file --out recs --report r.json`: a report that failed (a full disk) left the
    review files of the run written, and the line said "nothing was written"."""
    import os

    history, state = tmp_path / "history.parquet", tmp_path / "cluster-state.yaml"
    write_long(small[1], str(history))
    state.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    cmd = ["serve", "--once", "--cluster-state", str(state), "--source", "file", "--input", str(history),
           "--model", "seasonal_naive_daily", "--sink", "file"]
    first = tmp_path / "first"
    assert run_cli(*cmd, "--out", str(first), "--report", str(tmp_path / "first.json")).returncode == 0
    sizes = [os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(first) for n in names]
    report = os.path.getsize(tmp_path / "first.json")
    assert len(sizes) > 5 and max(sizes) < report  # a disk that holds every review file and not the report
    recs = tmp_path / "recs"
    (recs / "node").mkdir(parents=True)
    before = {}
    for name in ("decisions.json", "node/node-0.yaml"):  # what the previous run left
        (recs / name).write_text("the previous run's\n")
        os.utime(recs / name, (1_600_000_000, 1_600_000_000))
        before[name] = ((recs / name).read_bytes(), os.stat(recs / name).st_mtime_ns)
    r = run_cli(*cmd, "--out", str(recs), "--report", str(tmp_path / "r.json"), fsize=max(sizes) + 1)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"tidewise serve: error: --report {tmp_path / 'r.json'}: writing failed (File too large); nothing was written "
        f"({len(sizes)} file sink outputs under {recs} left as they were): free space or give a file in a writable folder")
    after = {n: ((recs / n).read_bytes(), os.stat(recs / n).st_mtime_ns) for n in before}
    assert after == before and not (tmp_path / "r.json").exists()
    assert sorted(n for _, _, names in os.walk(recs) for n in names) == ["decisions.json", "node-0.yaml"]
