"""Serve's VPA decision after an OOM kill (read from the pods' lastState) and the path a change
takes (in place when the VPA's updateMode is InPlaceOrRecreate and the pod template declares
resizePolicy NotRequired, else restart: logic/regime.py)."""
import numpy as np
import pandas as pd

from autoscaler.logic.decide_vpa import VpaInputs, decide_vpa
from autoscaler.model.views import VpaView, WorkloadSeries, last_oom_kills, resizes_in_place
from autoscaler.settings import MIB, VpaSettings
from predictor.history import History
from predictor.types import Forecast

STEP = pd.Timedelta("5min")
NOW = pd.Timestamp("2026-01-02T00:00:00Z")
QS = (0.5, 0.9, 0.95, 0.99)
MEM = "shop/Deployment/web/app/memory"
VPA = {"kind": "VerticalPodAutoscaler", "metadata": {"name": "web", "namespace": "shop"},
       "spec": {"targetRef": {"kind": "Deployment", "name": "web"}, "recommenders": [{"name": "tidewise"}],
                "resourcePolicy": {"containerPolicies": [{"containerName": "app",
                                                          "controlledResources": ["memory"]}]}}}


def workload(resize: list | None = None) -> dict:
    c = {"name": "app", "image": "web:1", "resources": {"requests": {"memory": "400Mi"}}}
    if resize is not None:
        c["resizePolicy"] = resize
    return {"kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"template": {"spec": {"containers": [c]}}}}


def pod(reason: str, finished: str) -> dict:
    return {"kind": "Pod", "metadata": {"name": "web-1", "namespace": "shop"},
            "status": {"containerStatuses": [{"name": "app", "restartCount": 1, "ready": True, "image": "web:1",
                                              "imageID": "", "lastState": {"terminated": {
                                                  "reason": reason, "exitCode": 137, "finishedAt": finished}}}]}}


def decide(ooms: dict, wl: dict | None = None, vpa: dict = VPA):
    idx = pd.date_range(NOW - pd.Timedelta("1D"), NOW - STEP, freq=STEP)
    history = History({MEM: pd.Series(800.0 * MIB, index=idx)}, STEP)  # 2 pods x 400 MiB
    fc = Forecast(MEM, pd.date_range(NOW, periods=96, freq=STEP), QS, np.full((96, 4), 800.0 * MIB), model="m")
    inp = VpaInputs(VpaView(vpa), wl or workload(), 2, WorkloadSeries({"app": {"memory": MEM}}), {MEM: fc},
                    history, NOW, STEP, ooms)
    return decide_vpa(inp, VpaSettings(margin=0.0, min_memory_bytes=1)).containers[0].resources["memory"]


def test_oom_killed_pods_are_read_from_last_state():
    pods = [pod("OOMKilled", "2026-01-01T20:00:00Z"), pod("Error", "2026-01-01T23:00:00Z"),
            pod("OOMKilled", "2026-01-01T22:00:00Z")]
    assert last_oom_kills(pods) == {"app": pd.Timestamp("2026-01-01T22:00:00Z")}
    assert last_oom_kills([pod("OOMKilled", "not a time")]) == {}


def test_memory_after_an_oom_kill_is_bumped_and_the_lower_bound_follows():
    plain = decide({})
    assert plain.target == 400 * MIB
    rec = decide(last_oom_kills([pod("OOMKilled", "2026-01-01T22:00:00Z")]))
    assert rec.target == 500 * MIB  # 400 MiB per pod at the kill + 100 MiB (more than x1.2)
    assert rec.lower == rec.target  # a request at the killed level must be moved by the updater
    assert any("OOM kill" in step for step in rec.reason.steps)


def test_an_oom_kill_older_than_the_memory_window_is_forgotten():
    assert decide({"app": pd.Timestamp("2025-12-30T00:00:00Z")}).target == 400 * MIB


def test_the_reason_names_the_in_place_regime_only_with_in_place_mode_and_resize_policy_not_required():
    in_place = workload([{"resourceName": "memory", "restartPolicy": "NotRequired"}])
    restart = workload([{"resourceName": "memory", "restartPolicy": "RestartContainer"}])
    assert resizes_in_place(in_place, "app", "memory") and not resizes_in_place(restart, "app", "memory")
    mode = {**VPA, "spec": {**VPA["spec"], "updatePolicy": {"updateMode": "InPlaceOrRecreate"}}}
    assert "regime in-place" in decide({}, in_place, mode).reason.summary()
    assert "regime restart" in decide({}, restart, mode).reason.summary()
    assert "regime restart" in decide({}, None, mode).reason.summary()  # no resizePolicy: fail closed
    # the mode does not allow it (unset: the CRD's default, Recreate)
    assert "regime restart (updateMode Recreate" in decide({}, in_place).reason.summary()
