"""Serve side: the regime per container resource (in place or restart) from what the cluster says, and
the restart regime's limit of changes a day kept by the change policy (the update modes' table:
test_vpa_update_modes.py)."""
import pandas as pd
import pytest

from autoscaler.logic.regime import IN_PLACE, RESTART, regime, restart_limit
from autoscaler.model.decisions import ContainerRecommendation, Reason, ResourceRecommendation, VpaDecision
from autoscaler.model.views import VpaView
from autoscaler.output.objects import vpa_change
from autoscaler.output.sinks import DRY_RUN, WriteResult
from autoscaler.routines.change_policy import ChangePolicy
from autoscaler.routines.context import RunReport
from autoscaler.settings import ServeSettings, VpaSettings
from tests.conftest import run_cli

NOW = pd.Timestamp("2026-11-02T00:00:00Z")
H = pd.Timedelta("1h")


def vpa(mode: str | None = None) -> dict:
    spec = {"targetRef": {"kind": "Deployment", "name": "web"}, "recommenders": [{"name": "tidewise"}]}
    if mode:
        spec["updatePolicy"] = {"updateMode": mode}
    return {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop"}, "spec": spec}


def workload(resize: list | None) -> dict:
    c = {"name": "app", "image": "web:1", "resources": {"requests": {"cpu": "500m"}}}
    if resize is not None:
        c["resizePolicy"] = resize
    return {"kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"template": {"spec": {"containers": [c]}}}}


NOT_REQUIRED = [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                {"resourceName": "memory", "restartPolicy": "RestartContainer"}]


def test_in_place_needs_both_the_mode_and_resize_policy_not_required():
    r = regime(VpaView(vpa("InPlaceOrRecreate")), workload(NOT_REQUIRED), "app", "cpu")
    assert r.name == IN_PLACE and "resizePolicy cpu NotRequired" in r.why
    # memory restarts the container on a resize: that resource is in the restart regime
    assert regime(VpaView(vpa("InPlaceOrRecreate")), workload(NOT_REQUIRED), "app", "memory").name == RESTART
    # no resizePolicy: fail closed
    absent = regime(VpaView(vpa("InPlaceOrRecreate")), workload(None), "app", "cpu")
    assert absent.name == RESTART and "declares no resizePolicy" in absent.why
    # the mode does not allow it (unset is the CRD's default, Recreate)
    for mode in (None, "Auto", "Recreate"):
        r = regime(VpaView(vpa(mode)), workload(NOT_REQUIRED), "app", "cpu")
        assert r.name == RESTART and f"updateMode {mode or 'Recreate'}: the updater evicts a pod" in r.why
    assert "at most 3 changes in any 24 h" in absent.describe(3)


def test_restart_limit_holds_the_fourth_change_in_a_day_and_lets_an_oom_raise_through():
    three = [NOW - 20 * H, NOW - 10 * H, NOW - H]
    assert restart_limit(500, 700, three[:2], NOW, 3) == (700, None)
    held, why = restart_limit(500, 700, three, NOW, 3)
    assert held == 500 and "3 changes in the last 24 h" in why
    # a change 25 h ago is out of the window
    assert restart_limit(500, 700, [NOW - 25 * H, *three[1:]], NOW, 3) == (700, None)
    raised, why = restart_limit(500, 700, three, NOW, 3, raise_after_oom=True)
    assert raised == 700 and "OOM kill goes through" in why
    assert restart_limit(500, 300, three, NOW, 3, raise_after_oom=True)[0] == 500  # a decrease still waits
    assert restart_limit(None, 700, three, NOW, 3) == (700, None)  # nothing published: the first write


def decision(target: int, regime_name: str) -> VpaDecision:
    rec = ResourceRecommendation("cpu", target, target // 2, target * 2, target, Reason("m", 0.9, 0.1, "1h", target),
                                 regime=regime_name)
    return VpaDecision("shop", "web", "Deployment", "web", 1, [ContainerRecommendation("app", {"cpu": rec})])


@pytest.mark.parametrize("regime_name,expected", [(RESTART, [500, 700, 500, 700, 700, 700]),
                                                  (IN_PLACE, [500, 700, 500, 700, 500, 700])])
def test_the_change_policy_counts_written_changes_per_resource(regime_name, expected):
    """Six hourly runs asking 500, 700, 500, ...: restart writes the first and three changes, then
    holds; in place follows every run."""
    s = ServeSettings()
    policy, obj, out, made = ChangePolicy(s), vpa(), [], []
    for i in range(6):
        now = NOW + i * H
        d = policy.limit(decision(500 if i % 2 == 0 else 700, regime_name), VpaView(obj), now)
        rep = RunReport()
        rep.vpa, rep.changes = [d], [vpa_change(obj, d, str(now))]
        policy.record(rep, [WriteResult(d.key, DRY_RUN)], now, {d.key: obj}, lands=False)
        out.append(d.containers[0].resources["cpu"].target)
        made.append(d)
    assert out == expected
    if regime_name == RESTART:
        assert policy.changed_at[(d.key, "app", "cpu")] == [NOW + H, NOW + 2 * H, NOW + 3 * H]
        assert any("vpa.max_changes_per_day 3" in step for step in made[4].containers[0].resources["cpu"].reason.steps)
        # a day after the first change, a fourth may go through
        later = policy.limit(decision(500, RESTART), VpaView(obj), NOW + 25 * H + pd.Timedelta("1min"))
        assert later.containers[0].resources["cpu"].target == 500


@pytest.mark.parametrize("key", ["max_changes_per_day", "day_plans_per_run"])
@pytest.mark.parametrize("value", [0, -1, 2.5, "three", True])
def test_a_bad_count_setting_is_refused_with_its_key(key, value):
    with pytest.raises(ValueError, match=key):
        VpaSettings(**{key: value}).check()


def test_serve_refuses_a_bad_vpa_setting_with_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("serve:\n  vpa:\n    max_changes_per_day: 0\n")
    proc = run_cli("--config", str(bad), "serve", "--once", "--source", "file",
                   "--input", str(tmp_path / "history.parquet"))
    assert proc.returncode == 2 and "serve.vpa" in proc.stderr and "max_changes_per_day 0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_serve_refuses_a_bad_peaks_window_with_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("serve:\n  guardrails:\n    peaks_window: a week\n")
    proc = run_cli("--config", str(bad), "serve", "--once", "--source", "file",
                   "--input", str(tmp_path / "history.parquet"))
    assert proc.returncode == 2 and "serve.guardrails.peaks_window" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("section, key", [("vpa:\n    pod_life: a day", "serve.vpa.pod_life"),
                                          ("vpa:\n    in_place_memory_margin: 2", "in_place_memory_margin"),
                                          ("reclaim:\n    window: 48h", "serve.reclaim.window")])
def test_serve_refuses_a_bad_life_margin_or_plan_window_with_exit_2(tmp_path, section, key):
    """A reclaim window longer than a node agent honours a plan (24 h) would be cut short on the node."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"serve:\n  {section}\n")
    proc = run_cli("--config", str(bad), "serve", "--once", "--source", "file",
                   "--input", str(tmp_path / "history.parquet"))
    assert proc.returncode == 2 and key in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
