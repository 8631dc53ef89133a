"""`tidewise serve` with Katalyst objects, as a user runs it: the file sink writes the SPD of an
opted-in workload and the status of an IHPA for review (valid objects), and a bad `serve.spd` setting
is exit 2 with one line."""
from __future__ import annotations

import copy
import json

import yaml

from autoscaler.settings import SPD_OPT_IN
from predictor.history import write_long
from tests.autoscaler.conftest import validate_object
from tests.autoscaler.test_ihpa import hpa_named, ihpa_like
from tests.conftest import run_cli
from tests.tidewise.test_bad_inputs import one_line_error


def inputs(tmp_path, small, objects):
    objects = copy.deepcopy(objects)
    dep = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "frontend")
    dep["metadata"].setdefault("annotations", {})[SPD_OPT_IN] = "true"
    objects.append(ihpa_like(hpa_named(objects)))
    state, hist = tmp_path / "cluster.yaml", tmp_path / "history.parquet"
    state.write_text(yaml.safe_dump_all(objects))
    write_long(small[1], str(hist))
    return ["serve", "--once", "--cluster-state", str(state), "--source", "file", "--input", str(hist),
            "--model", "seasonal_naive_daily"]


def test_the_file_sink_writes_the_spd_and_the_ihpa_status_for_review(tmp_path, small, objects):
    out = tmp_path / "recs"
    r = run_cli(*inputs(tmp_path, small, objects), "--sink", "file", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    (spd_file,) = (out / "serviceprofiledescriptor").glob("*/*.yaml")
    spd = yaml.safe_load(spd_file.read_text())
    validate_object(spd)
    assert spd_file.name == "frontend.yaml" and spd["spec"]["targetRef"]["name"] == "frontend"
    (ihpa_file,) = (out / "intelligenthorizontalpodautoscaler").glob("*/*.yaml")
    ihpa = yaml.safe_load(ihpa_file.read_text())
    validate_object(ihpa)
    assert ihpa["status"]["desiredReplicas"] >= 1
    reasons = json.loads((out / "decisions.json").read_text())
    assert reasons[f"IntelligentHorizontalPodAutoscaler/{ihpa['metadata']['namespace']}/frontend-ihpa"]["reason"]
    assert reasons[f"ServiceProfileDescriptor/{spd['metadata']['namespace']}/frontend"]["profile"]


def test_a_bad_spd_setting_is_one_line_and_exit_2(tmp_path, small, objects):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("serve:\n  spd:\n    period: month\n")
    one_line_error(run_cli("--config", str(cfg), *inputs(tmp_path, small, objects)), 2,
                   "serve.spd.period 'month'", "day", "week")
