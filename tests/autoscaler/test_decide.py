"""The pure decisions the serving loop calls (`autoscaler/logic/decide_*`), on typed views of plain
API objects, and the change guardrail applied after a VPA decision."""
import numpy as np
import pandas as pd
import pytest

from autoscaler.logic.decide_hpa import HpaInputs, decide_hpa
from autoscaler.logic.decide_node import NodeInputs, decide_node
from autoscaler.logic.decide_vpa import VpaInputs, decide_vpa
from autoscaler.logic.guardrails import limit_vpa_decision
from autoscaler.logic.hpa import Stabilizer
from autoscaler.logic.vpa import pod_peaks_range
from autoscaler.model.views import HpaView, MalformedHpa, NodeView, PodView, VpaView, WorkloadSeries
from autoscaler.settings import HpaSettings, ReclaimSettings, VpaSettings
from predictor.history import History
from predictor.types import Forecast

STEP = pd.Timedelta("5min")
NOW = pd.Timestamp("2026-01-02T00:00:00Z")
QS = (0.5, 0.9, 0.95, 0.99)
SID = "shop/Deployment/web/app/cpu"


def flat(cores: float, sid: str = SID, n: int = 48) -> Forecast:
    return Forecast(sid, pd.date_range(NOW, periods=n, freq=STEP), QS, np.full((n, len(QS)), cores), model="m")


def vpa(max_cpu: str | None = None) -> dict:
    spec = {"targetRef": {"kind": "Deployment", "name": "web"}, "recommenders": [{"name": "tidewise"}]}
    if max_cpu:
        spec["resourcePolicy"] = {"containerPolicies": [{"containerName": "app", "maxAllowed": {"cpu": max_cpu}}]}
    return {"kind": "VerticalPodAutoscaler", "metadata": {"name": "web", "namespace": "shop"}, "spec": spec}


WORKLOAD = {"kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]}}}}
HISTORY = History({SID: pd.Series(1.0, index=pd.date_range(NOW - pd.Timedelta("1D"), NOW - STEP, freq=STEP))}, STEP)
SERIES = WorkloadSeries({"app": {"cpu": SID}})


def vpa_decision(obj: dict, cores: float = 2.0):
    inputs = VpaInputs(VpaView(obj), WORKLOAD, 2, SERIES, {SID: flat(cores)}, HISTORY, NOW, STEP)
    return decide_vpa(inputs, VpaSettings(margin=0.0))


def test_decide_vpa_gives_the_estimator_numbers_and_the_guardrail_then_limits_the_move():
    d = vpa_decision(vpa())
    rec = d.containers[0].resources["cpu"]
    assert (d.namespace, d.name, d.target_kind, d.target_name, d.replicas) == ("shop", "web", "Deployment", "web", 2)
    assert rec.target == 1000  # 2 cores of forecast over 2 replicas, no margin
    limit_vpa_decision(d, {("app", "cpu"): 400}, vpa(), max_decrease_ratio=0.5, max_increase_ratio=2.0)
    assert rec.target == 800  # at most x2 of the 400m published
    assert rec.lower <= rec.target <= rec.upper
    assert rec.reason.steps[-1] == "increase limited to 2x of 400: 800"


def test_the_guardrail_leaves_a_decision_with_nothing_published_alone_and_respects_max_allowed():
    d = vpa_decision(vpa())
    limit_vpa_decision(d, {}, vpa(), 0.5, 2.0)
    assert d.containers[0].resources["cpu"].target == 1000
    capped = vpa_decision(vpa(max_cpu="900m"), cores=4.0)
    assert capped.containers[0].resources["cpu"].target == 900  # 2000m wanted, capped by the policy
    limit_vpa_decision(capped, {("app", "cpu"): 3000}, vpa(max_cpu="900m"), 0.5, 2.0)
    assert capped.containers[0].resources["cpu"].target == 900  # the slow decrease would hold 1500m: maxAllowed wins


def test_the_guardrail_follows_a_tide_within_the_workloads_own_hourly_peaks():
    # a day at 4 cores and a night at 0.2 (2 replicas: 2000m and 100m a pod); the forecast says night
    day = pd.date_range(NOW - pd.Timedelta("1D"), NOW - STEP, freq=STEP)
    tide = pd.Series(np.where(day.hour < 12, 4.0, 0.2), index=day)

    def decided(window, cores, published):
        d = decide_vpa(VpaInputs(VpaView(vpa()), WORKLOAD, 2, SERIES, {SID: flat(cores)}, History({SID: tide}, STEP),
                                 NOW, STEP), VpaSettings(margin=0.0))
        peaks = (lambda c, r: pod_peaks_range(tide, NOW, window, 2, r)) if window is not None else None
        return limit_vpa_decision(d, {("app", "cpu"): published}, vpa(), 0.5, 4.0, peaks).containers[0].resources["cpu"]

    rec = decided(pd.Timedelta("1D"), 0.2, 2000)
    assert rec.target == 100  # a level the workload reached: no halving
    assert rec.reason.steps[-1] == "beyond 0.5x of 2000, not limited: the workload's own hourly peaks spanned 100-2000"
    assert decided(None, 0.2, 2000).target == 1000  # without the range: the ratio alone
    assert decided(pd.Timedelta("1D"), 4.0, 100).target == 2000  # and back up to the day's level at once
    assert decided(pd.Timedelta("2h"), 4.0, 100).target == 400  # the last 2 h saw only the night: 4x at most


def test_decide_vpa_without_a_usable_forecast_is_a_lookup_error():
    with pytest.raises(LookupError, match="no container with a usable forecast"):
        decide_vpa(VpaInputs(VpaView(vpa()), WORKLOAD, 1, SERIES, {}, HISTORY, NOW, STEP), VpaSettings())


def hpa(annotations: dict | None = None, max_replicas: int = 10) -> dict:
    return {"kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop", "annotations": annotations or {}},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 1,
                     "maxReplicas": max_replicas}}


def hpa_inputs(obj: dict, cores: float) -> HpaInputs:
    fc = flat(cores)
    return HpaInputs(HpaView(obj), {"cpu": 1000}, SERIES, {SID: fc}, {SID: fc}, HISTORY, NOW, NOW, STEP)


def test_decide_hpa_floor_from_the_forecast_capped_at_max_replicas():
    s = HpaSettings(default_utilization=0.5, floor_tolerance=0.0, level_steps=0)
    out = decide_hpa(hpa_inputs(hpa(), cores=2.0), s, Stabilizer(pd.Timedelta("5min")))
    assert out.decision.min_replicas == 4  # 2 cores at 500m per replica
    assert "per replica 500m (" in out.decision.reason.summary()  # millicores named as such, not a bare 500
    assert out.series == [SID] and (out.target_kind, out.target_name) == ("Deployment", "web")
    capped = decide_hpa(hpa_inputs(hpa(max_replicas=3), cores=2.0), s, Stabilizer(pd.Timedelta("5min")))
    assert capped.decision.min_replicas == 3
    assert "capped at maxReplicas 3" in capped.decision.reason.summary()


def test_decide_hpa_refuses_a_user_minimum_that_is_not_an_integer():
    with pytest.raises(MalformedHpa, match="not an integer"):
        decide_hpa(hpa_inputs(hpa({"tidewise.io/user-min-replicas": "two"}), 1.0), HpaSettings(),
                   Stabilizer(pd.Timedelta("5min")))


def pod(name: str, qos: str | None = None, cpu: str = "500m") -> PodView:
    ann = {"katalyst.kubewharf.io/qos_level": qos} if qos else {}
    return PodView({"kind": "Pod", "metadata": {"name": name, "namespace": "shop", "annotations": ann},
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}})


def test_decide_node_skips_reclaimed_pods_and_counts_a_pod_without_forecast_at_its_requests():
    node = NodeView({"kind": "Node", "metadata": {"name": "n1"},
                     "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}})
    s = ReclaimSettings()
    steps = 12

    def demand(p: PodView):
        return (np.full(steps, 1.0), np.full(steps, 2.0 ** 30)) if p.name == "forecast" else None

    def plan(pods):
        return decide_node(NodeInputs(node, pods, demand, None, "2026-01-02T00:00:00Z", 3600, steps), s)

    base = plan([pod("forecast")])
    with_batch = plan([pod("forecast"), pod("batch", qos="reclaimed_cores", cpu="8")])
    assert base.shared_demand_millicpu == 1000
    assert with_batch.shared_demand_millicpu == 1000  # the borrower is not online demand
    with_unknown = plan([pod("forecast"), pod("new", cpu="2")])
    assert with_unknown.shared_demand_millicpu == 3000  # counted at its 2-core request
    assert "pod shop/new: no forecast, counted at its requests" in with_unknown.reasons
