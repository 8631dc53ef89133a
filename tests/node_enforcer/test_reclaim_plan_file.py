"""Issue 22, low item: a reclaim plan from a file passes the checks the node annotation's plan
passes (a plan dated 2099 was accepted from `--reclaim-plan FILE`, and refused as an annotation)."""
import datetime as dt
import json
import logging

import pytest

from contracts.errors import InputError
from contracts.reclaim import NumaReclaim, ReclaimPlan, plan_document, plan_from_annotation
from node_enforcer.collect.reclaim import reclaim_loader

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("plan,why", [
    (ReclaimPlan("n1", "2099-01-01T00:00:00Z", 3600, 4000, 2**30), "generated_at|window_start"),
    (ReclaimPlan("n1", "2026-12-01T12:06:00Z", 3600, 4000, 2**30), "in the future"),  # past the 5 min of skew
    (ReclaimPlan("n1", "2026-12-01T10:00:00Z", 3600, 4000, 2**30), "expired at 2026-12-01T11:00:00Z"),
    (ReclaimPlan("n1", "2026-12-01T11:30:00Z", 3600, 4000, 2**30, numa={0: NumaReclaim(5000, 0)}), "per-NUMA"),
])
def test_file_and_annotation_refuse_the_same_plans(tmp_path, caplog, plan, why):
    with pytest.raises(InputError, match=why):
        plan_from_annotation(json.dumps(plan_document(plan)), "n1", NOW)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan.to_dict()))
    with caplog.at_level(logging.WARNING):
        got = reclaim_loader(str(path), "n1", now=lambda: NOW)()
    assert (got.reclaimed_millicpu, got.reclaimed_memory_bytes, dict(got.numa)) == (0, 0, {})  # fail closed
    assert "reclaim plan refused" in caplog.text and f"--reclaim-plan {path}" in caplog.text


def test_a_plan_in_force_is_read_from_both():
    plan = ReclaimPlan("n1", "2026-12-01T12:03:00Z", 3600, 4000, 2**30)  # within the clock skew allowed
    assert plan_from_annotation(json.dumps(plan_document(plan)), "n1", NOW).reclaimed_millicpu == 4000


def test_the_2099_file_from_the_command_line_is_refused(tmp_path, caplog):
    import os
    import shutil

    from tests.node_enforcer.conftest import MIXED_PODS, TWO_SOCKET
    from tidewise.cli import main

    cg = tmp_path / "cgroup"
    shutil.copytree(os.path.join(TWO_SOCKET, "fs", "cgroup"), cg)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(ReclaimPlan("fixture-node", "2099-01-01T00:00:00Z", 3600, 6000, 2**34).to_dict()))
    rc = main(["enforce", "--once", "--dry-run", "--node", "fixture-node", "--pods-from", "file", "--pods", MIXED_PODS,
               "--sysfs-root", TWO_SOCKET, "--cgroup-root", str(cg), "--reclaim-plan", str(path), "--no-eviction"])
    assert rc == 0
    assert (f"reclaim plan refused, reclaiming nothing beyond the floor: --reclaim-plan {path}: window_start "
            "2099-01-01T00:00:00Z is in the future") in caplog.text
