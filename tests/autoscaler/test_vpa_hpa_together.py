"""Issue 24 item 5, serve side: when a VPA decision changes a container's CPU request and an HPA
scales the same workload on CPU utilisation, serve rewrites the HPA's target so that target x request
stays where the user's target x the request at the first rewrite put it, within vpa.hpa_target_bounds,
or holds the CPU request; both writes land or neither. Through the real client against the API fake."""
import pandas as pd
import pytest

from autoscaler.input.cluster import ApiCluster
from autoscaler.logic.vpa_hpa import plan_scale_point
from autoscaler.output.sinks import FAILED, WRITTEN, ApiSink
from autoscaler.routines.loop import OK, ServingLoop
from contracts.annotations import HPA_ANCHOR_ANNOTATION, HPA_USER_TARGET_ANNOTATION, MANAGE_ANNOTATION
from predictor.history import History
from tests.autoscaler.conftest import END, STEP, fast_settings, source_of

SID = "shop/Deployment/web/app/cpu"


def objects(hpa_selected: bool = True) -> list[dict]:
    labels = {"app": "web"}
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
              "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
                  "metadata": {"labels": labels},
                  "spec": {"containers": [{"name": "app", "image": "web:1",
                                           "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}}}
    vpa = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
           "metadata": {"name": "web", "namespace": "shop"},
           "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "recommenders": [{"name": "tidewise"}], "updatePolicy": {"updateMode": "InPlaceOrRecreate"},
                    "resourcePolicy": {"containerPolicies": [{"containerName": "*", "controlledResources": ["cpu"]}]}}}
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "web", "namespace": "shop",
                        "annotations": {MANAGE_ANNOTATION: "true"} if hpa_selected else {}},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "minReplicas": 2, "maxReplicas": 20,
                    "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                        "type": "Utilization", "averageUtilization": 70}}}]}}
    return [deploy, vpa, hpa]


def flat(cores: float) -> History:
    idx = pd.date_range(END - pd.Timedelta("9D"), END - STEP, freq=STEP)
    return History({SID: pd.Series(cores, index=idx)}, STEP)


def run(api_factory, history, objs, fail_hpa: bool = False):
    fake, kube = api_factory(objs)
    s = fast_settings()
    s.loop.apply = True
    s.reclaim.enabled = False
    if fail_hpa:
        fake.fail("PATCH", r"/horizontalpodautoscalers/web$", 500, times=10)
    rep = ServingLoop(s, source_of(history), ApiCluster(kube), ApiSink(kube)).run_once()
    assert rep.outcome == OK, rep.reason
    return fake, rep


def cpu(rep):
    return next(d for d in rep.vpa if d.name == "web").containers[0].resources["cpu"]


def test_a_new_cpu_request_rewrites_the_hpa_target_to_keep_its_scale_point(api_factory):
    # 1.2 cores over 2 pods: 600m x 1.1 margin = 660m a pod; 70% x 500m = 350m stays the scale point
    fake, rep = run(api_factory, flat(1.2), objects())
    assert cpu(rep).target == 660
    vpa = fake.get("VerticalPodAutoscaler", "web", "shop")
    assert vpa["status"]["recommendation"]["containerRecommendations"][0]["target"]["cpu"] == "660m"
    hpa = fake.get("HorizontalPodAutoscaler", "web", "shop")
    target = hpa["spec"]["metrics"][0]["resource"]["target"]
    assert target == {"type": "Utilization", "averageUtilization": 53}  # 350 / 660 = 0.530
    assert hpa["metadata"]["annotations"][HPA_USER_TARGET_ANNOTATION] == "70"
    assert hpa["metadata"]["annotations"][HPA_ANCHOR_ANNOTATION] == "500"
    assert target["averageUtilization"] / 100 * 660 == pytest.approx(0.7 * 500, rel=0.01)
    assert hpa["spec"]["maxReplicas"] == 20  # the rest of the spec as the user left it
    assert "target 70% -> 53%" in cpu(rep).reason.summary()
    assert {r.key: r.outcome for r in rep.results}["VerticalPodAutoscaler/shop/web"] == WRITTEN


def test_a_later_rewrite_keeps_the_first_anchor_not_the_last_request(api_factory):
    objs = objects()
    objs[2]["metadata"]["annotations"].update({HPA_USER_TARGET_ANNOTATION: "70", HPA_ANCHOR_ANNOTATION: "500"})
    objs[2]["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] = 53
    objs[1]["status"] = {"recommendation": {"containerRecommendations": [{"containerName": "app",
                                                                           "target": {"cpu": "660m"}}]}}
    fake, rep = run(api_factory, flat(1.0), objs)  # 500m x 1.1 = 550m a pod
    assert cpu(rep).target == 550
    hpa = fake.get("HorizontalPodAutoscaler", "web", "shop")
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 64  # 350 / 550, not 53 x 660 / 550
    assert hpa["metadata"]["annotations"][HPA_ANCHOR_ANNOTATION] == "500"


def test_outside_the_bounds_the_cpu_request_is_held_and_the_hpa_left_alone(api_factory):
    # 2 cores: 1100m a pod would need 350 / 1100 = 32%, under the 50% bound
    fake, rep = run(api_factory, flat(2.0), objects())
    rec = cpu(rep)
    assert rec.target == 500 and "outside vpa.hpa_target_bounds 50%-90%; CPU request held" in rec.reason.summary()
    hpa = fake.get("HorizontalPodAutoscaler", "web", "shop")
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 70
    assert HPA_ANCHOR_ANNOTATION not in hpa["metadata"]["annotations"]


def test_when_the_hpa_write_fails_the_vpa_write_is_undone_and_both_reported_failed(api_factory):
    fake, rep = run(api_factory, flat(1.2), objects(), fail_hpa=True)
    result = {r.key: r for r in rep.results}["VerticalPodAutoscaler/shop/web"]
    assert result.outcome == FAILED
    assert "both failed: HorizontalPodAutoscaler/shop/web" in result.detail and "put back as read (written)" in result.detail
    vpa_writes = [r for r in fake.writes("PATCH") if "/verticalpodautoscalers/web/status" in r.path]
    assert len(vpa_writes) == 2  # the recommendation, then the undo
    vpa = fake.get("VerticalPodAutoscaler", "web", "shop")
    assert "recommendation" not in (vpa.get("status") or {})  # as read: none
    hpa = fake.get("HorizontalPodAutoscaler", "web", "shop")
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 70


def test_an_hpa_not_opted_in_is_never_written_and_the_reason_says_its_point_moves(api_factory):
    fake, rep = run(api_factory, flat(1.2), objects(hpa_selected=False))
    assert cpu(rep).target == 660
    assert "may not be written (not selected" in cpu(rep).reason.summary()
    assert not [r for r in fake.writes("PATCH") if "/horizontalpodautoscalers/" in r.path]


def test_the_plan_reads_the_anchor_only_when_both_annotations_are_well_formed():
    first = plan_scale_point("web", 70, (None, None), 500, 660, (0.5, 0.9))
    assert (first.target_pct, first.user_pct, first.anchor) == (53, 70, 500)
    broken = plan_scale_point("web", 53, ("70", "lots"), 660, 550, (0.5, 0.9))
    assert (broken.user_pct, broken.anchor, broken.target_pct) == (53, 660, 64)  # 53% x 660 / 550
    held = plan_scale_point("web", 70, ("70", "500"), 500, 300, (0.5, 0.9))
    assert held.target_pct is None and "117%" in held.why  # 350 / 300


def test_the_review_folder_shows_the_hpa_floor_and_its_target_in_one_file(tmp_path):
    """The file sink gets two changes to the HPA in one run (its floor, its target): the file holds both."""
    import json

    import yaml

    from autoscaler.output.sinks import FileSink
    from tests.autoscaler.conftest import StaticCluster, validate_object

    objs = objects()
    sink = FileSink(str(tmp_path))
    s = fast_settings()
    s.reclaim.enabled = False
    rep = ServingLoop(s, source_of(flat(1.2)), StaticCluster(objs), sink).run_once()
    assert rep.outcome == OK, rep.reason
    hpa = yaml.safe_load((tmp_path / "horizontalpodautoscaler" / "shop" / "web.yaml").read_text())
    validate_object(hpa)
    assert hpa["spec"]["minReplicas"] == next(d for d in rep.hpa if d.name == "web").min_replicas > 2
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 53
    reasons = json.loads((tmp_path / "decisions.json").read_text())["HorizontalPodAutoscaler/shop/web"]
    assert "timeline" in reasons and reasons["scale_point"]["target_utilization"] == 53


@pytest.mark.parametrize("metrics", [7, {"type": "Resource"}, [{"type": "Resource", "resource": "cpu"}],
                                     [{"type": "Pods", "pods": {}}]])
def test_an_hpa_without_a_readable_cpu_utilization_metric_is_not_paired(metrics):
    from autoscaler.model.views import HpaView

    hpa = objects()[2]
    hpa["spec"]["metrics"] = metrics
    assert HpaView(hpa).cpu_utilization_metric() is None
    assert HpaView(objects()[2]).cpu_utilization_metric() == 0


def test_hpa_target_bounds_are_checked_at_load():
    from autoscaler.settings import VpaSettings

    s = VpaSettings(hpa_target_bounds=[0.6, 0.8])  # as YAML gives it
    s.check()
    assert s.hpa_target_bounds == (0.6, 0.8)
    for bad in ([0.9, 0.5], [0, 0.9], [0.5, 1.2], [0.5], "50-90", [True, 0.9]):
        with pytest.raises(ValueError, match="hpa_target_bounds"):
            VpaSettings(hpa_target_bounds=bad).check()
