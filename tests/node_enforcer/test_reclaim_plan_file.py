"""Issue 22, low item: a reclaim plan from a file passes the checks the node annotation's plan
passes (a plan dated 2099 was accepted from `--reclaim-plan FILE`, and refused as an annotation)."""
import datetime as dt
import json
import logging
import os
import re

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
    path.write_text(json.dumps(plan_document(plan)))
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
    path.write_text(json.dumps(plan_document(ReclaimPlan("fixture-node", "2099-01-01T00:00:00Z", 3600, 6000, 2**34))))
    rc = main(["enforce", "--once", "--dry-run", "--node", "fixture-node", "--pods-from", "file", "--pods", MIXED_PODS,
               "--sysfs-root", TWO_SOCKET, "--cgroup-root", str(cg), "--reclaim-plan", str(path), "--no-eviction"])
    assert rc == 0
    assert (f"reclaim plan refused, reclaiming nothing beyond the floor: --reclaim-plan {path}: generated_at "
            "2099-01-01T00:00:00Z is in the future") in caplog.text


def _node_yaml(plan):
    import yaml

    return yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": plan.node, "annotations": {"tidewise.io/reclaim-plan": json.dumps(plan_document(plan))}}})


def test_the_file_reader_round_trips_the_annotation_writer(tmp_path):
    """One schema: what contracts.reclaim.plan_document writes (serve's annotation), alone or on its
    Node, is the plan load_reclaim_plan reads back."""
    from node_enforcer.collect.reclaim import load_reclaim_plan

    plan = ReclaimPlan("n1", "2026-12-01T11:30:00Z", 3600, 4000, 2**30, 2500,
                       numa={0: NumaReclaim(3000, 2**29), 1: NumaReclaim(1000, 2**29)})
    (tmp_path / "doc.json").write_text(json.dumps(plan_document(plan)))
    (tmp_path / "node.yaml").write_text(_node_yaml(plan))
    for name in ("doc.json", "node.yaml"):
        assert load_reclaim_plan(str(tmp_path / name), "n1") == plan
        assert reclaim_loader(str(tmp_path / name), "n1", now=lambda: NOW)() == plan


@pytest.mark.parametrize("text,why", [
    (json.dumps(ReclaimPlan("fixture-node", "2026-12-01T11:30:00Z", 3600, 1, 1).to_dict()),
     "ReclaimPlan.to_dict.. keys .window_start., a format no longer read; give the tidewise.io/reclaim-plan"),
    ("kind: Node\nmetadata: {name: fixture-node}\n", "a Node without the tidewise.io/reclaim-plan annotation"),
    ("[1, 2]", "a list, not a reclaim plan; give"),
    ("{", "neither JSON nor YAML"),
    (json.dumps({"schema": 9, "node": "fixture-node"}), "schema 9, this agent reads 1"),
])
def test_a_malformed_plan_file_exits_2_with_one_line_naming_it(tmp_path, capsys, text, why):
    from tests.node_enforcer.conftest import MIXED_PODS, TWO_SOCKET
    from tidewise.cli import main

    path = tmp_path / "plan.json"
    path.write_text(text)
    rc = main(["enforce", "--once", "--dry-run", "--node", "fixture-node", "--pods-from", "file", "--pods", MIXED_PODS,
               "--sysfs-root", TWO_SOCKET, "--cgroup-root", os.path.join(TWO_SOCKET, "fs", "cgroup"),
               "--reclaim-plan", str(path), "--no-eviction"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert f"--reclaim-plan {path}" in err[0] and re.search(why, err[0]), err[0]
