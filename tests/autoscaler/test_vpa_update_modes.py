"""What serve recommends in each VPA update mode (docs/serve-vpa.md, "Update modes"), a row of the table
each, through the real client against the API fake: Off recommends only and says nothing is applied;
Initial covers a pod's expected life; Recreate and Auto are the restart regime; InPlaceOrRecreate and
InPlace the in-place regime, per resource as resizePolicy says, with memory never lowered in place below
the recent peak plus a margin."""
import numpy as np
import pandas as pd
import pytest

from autoscaler.input.cluster import ApiCluster
from autoscaler.logic.pod_life import PodLives
from autoscaler.logic.regime import AT_CREATION, IN_PLACE, OFF, RESTART, regime
from autoscaler.model.views import VpaView
from autoscaler.output.sinks import ApiSink
from autoscaler.routines.loop import OK, ServingLoop
from autoscaler.settings import GIB, MIB
from contracts.annotations import MANAGE_ANNOTATION
from contracts.quantity import to_units
from predictor.history import History
from tests.autoscaler.conftest import END, STEP, fast_settings, source_of, validate_object

CPU, MEM = "shop/Deployment/web/app/cpu", "shop/Deployment/web/app/memory"
BOTH = [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
        {"resourceName": "memory", "restartPolicy": "NotRequired"}]
MEMORY_RESTARTS = [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                   {"resourceName": "memory", "restartPolicy": "RestartContainer"}]


def objects(mode: str, resize: list | None = BOTH, hpa: bool = False, pods: int = 0) -> list[dict]:
    labels = {"app": "web"}
    c = {"name": "app", "image": "web:1", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}
    if resize is not None:
        c["resizePolicy"] = resize
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
              "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                       "template": {"metadata": {"labels": labels}, "spec": {"containers": [c]}}}}
    vpa = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
           "metadata": {"name": "web", "namespace": "shop"},
           "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "recommenders": [{"name": "tidewise"}], "updatePolicy": {"updateMode": mode}}}
    out = [deploy, vpa]
    if hpa:
        out.append({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": "web", "namespace": "shop", "annotations": {MANAGE_ANNOTATION: "true"}},
                    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                             "minReplicas": 2, "maxReplicas": 20,
                             "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                                 "type": "Utilization", "averageUtilization": 70}}}]}})
    return out + [pod(f"web-{i}", f"uid-{i}", END - pd.Timedelta("3h")) for i in range(pods)]


def pod(name: str, uid: str, created: pd.Timestamp) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "uid": uid, "labels": {"app": "web"},
                         "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                              "uid": "d", "controller": True}]},
            "spec": {"containers": [{"name": "app", "image": "web:1"}]}, "status": {"phase": "Running"}}


def tide(night: float, day: float) -> np.ndarray:
    """9 days of 5-minute steps ending at END (a midnight): `day` from 12:00 to 16:00 UTC, else `night`."""
    idx = pd.date_range(END - pd.Timedelta("9D"), END - STEP, freq=STEP)
    return np.where((idx.hour >= 12) & (idx.hour < 16), day, night)


def history() -> History:
    """A tidal workload of 2 pods: 1 core at night, 5 at the day's peak; memory 1 GiB, 3 GiB at the peak."""
    idx = pd.date_range(END - pd.Timedelta("9D"), END - STEP, freq=STEP)
    return History({CPU: pd.Series(tide(1.0, 5.0), index=idx),
                    MEM: pd.Series(tide(1.0, 3.0) * GIB, index=idx)}, STEP)


def serve(api_factory, objs: list[dict], settings=None, runs=(END,), between=None):
    """Runs the loop once at each time of `runs` (applying), `between(fake, i)` before run i."""
    fake, kube = api_factory(objs)
    s = settings or fast_settings()
    s.loop.apply = True
    s.reclaim.enabled = False
    times = iter(runs)
    now = [END]
    loop = ServingLoop(s, source_of(history()), ApiCluster(kube), ApiSink(kube), clock=lambda: now[0])
    rep = None
    for i, t in enumerate(times):
        if between is not None:
            between(fake, i)
        now[0] = t
        rep = loop.run_once()
        assert rep.outcome == OK, rep.reason
    return fake, rep


def written(fake) -> tuple[dict, str]:
    """The VPA's written container recommendation and condition message."""
    vpa = fake.get("VerticalPodAutoscaler", "web", "shop")
    validate_object(vpa)
    status = vpa["status"]
    return status["recommendation"]["containerRecommendations"][0], status["conditions"][0]["message"]


def cores(rec: dict) -> float:
    return to_units("cpu", rec["target"]["cpu"]) / 1000


@pytest.mark.parametrize("mode, resize, cpu, memory", [
    ("Off", BOTH, OFF, OFF),
    ("Initial", BOTH, AT_CREATION, AT_CREATION),
    ("Recreate", BOTH, RESTART, RESTART),
    ("Auto", BOTH, RESTART, RESTART),
    ("InPlaceOrRecreate", BOTH, IN_PLACE, IN_PLACE),
    ("InPlace", BOTH, IN_PLACE, IN_PLACE),
    ("InPlaceOrRecreate", MEMORY_RESTARTS, IN_PLACE, RESTART),
    ("InPlace", MEMORY_RESTARTS, IN_PLACE, RESTART),
    ("InPlace", None, RESTART, RESTART),  # no resizePolicy: fail closed
    ("Sometimes", BOTH, RESTART, RESTART),  # a mode the VPA does not know: fail closed
])
def test_each_update_mode_and_resize_policy_has_its_regime(mode, resize, cpu, memory):
    deploy, vpa = objects(mode, resize)[:2]
    assert regime(VpaView(vpa), deploy, "app", "cpu").name == cpu
    assert regime(VpaView(vpa), deploy, "app", "memory").name == memory


def test_off_recommends_only_and_says_nothing_is_applied(api_factory):
    fake, rep = serve(api_factory, objects("Off", hpa=True))
    rec, message = written(fake)
    assert "updateMode Off: recommend only: nothing is applied to pods" in message
    assert "lands only when a pod is created" not in message and "changes in any 24 h" not in message
    # what a pod created now would need for its life: the day's peak (5 cores over 2 pods, + 10%)
    assert cores(rec) == pytest.approx(2.75, rel=0.02)
    # nothing is applied, so the HPA's scale point does not move: its target is left as the user set it
    hpa = fake.get("HorizontalPodAutoscaler", "web", "shop")
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 70
    assert "left as it is, since updateMode Off applies no request" in message


def test_initial_covers_the_pods_life_not_the_night_hour(api_factory):
    """At 00:00 the coming hour needs 1 core; a pod created now lives through the day's 5-core peak."""
    fake, _ = serve(api_factory, objects("Initial"))
    rec, message = written(fake)
    assert cores(rec) == pytest.approx(2.75, rel=0.02)  # 5 cores / 2 pods + 10%
    assert "updateMode Initial: a request is set when a pod is created and kept for its whole life" in message
    assert "a pod's expected life 24 h (vpa.pod_life" in message
    # the same workload resized in place follows the night
    fake, _ = serve(api_factory, objects("InPlaceOrRecreate"))
    night, message = written(fake)
    assert cores(night) == pytest.approx(0.55, rel=0.02) and "regime in-place" in message


def test_initial_covers_the_life_the_workloads_pods_are_seen_to_live(api_factory):
    """Pods replaced every 2 hours: once 3 are seen to end, a request set at 00:00 covers 2 hours, not
    the day's peak at noon."""
    def replace(fake, i):  # each run lists the pod created at this run's time; the one before has ended
        for old in list(fake.objects_of("Pod").values()):
            fake.delete("Pod", old["metadata"]["name"], "shop")
        fake.put(pod(f"web-{i}", f"uid-{i}", END - pd.Timedelta("8h") + i * pd.Timedelta("2h")))

    runs = [END - pd.Timedelta("8h") + i * pd.Timedelta("2h") for i in range(5)]  # 16:00 .. 00:00
    fake, rep = serve(api_factory, objects("Initial"), runs=runs, between=replace)
    rec, _ = written(fake)
    why = rep.vpa[0].reasons()["app"]["cpu"]  # the last run's (its equal target was not written again)
    assert "a pod's expected life 2.0 h (the longest life of its last 4 pods seen to end, 2.0 h)" in why
    assert "over 2h +10%" in why
    assert cores(rec) == pytest.approx(1.1, rel=0.02)  # the next 2 h are night: 1 core, one pod, + 10%


def test_recreate_and_auto_are_the_restart_regime(api_factory):
    for mode in ("Recreate", "Auto"):
        fake, _ = serve(api_factory, objects(mode))
        _, message = written(fake)
        assert f"regime restart (updateMode {mode}: the updater evicts a pod to apply a change" in message
        assert "at most 3 changes in any 24 h" in message


def test_in_place_follows_resize_policy_per_resource(api_factory):
    fake, _ = serve(api_factory, objects("InPlace", MEMORY_RESTARTS))
    _, message = written(fake)
    cpu, memory = message.split("app/memory: ")[0], message.split("app/memory: ")[1]
    assert "regime in-place (updateMode InPlace: the updater resizes the running pod and never evicts it" in cpu
    assert "regime restart (updateMode InPlace" in memory and "RestartContainer" not in memory
    assert "declares no resizePolicy restartPolicy NotRequired for memory" in memory


def test_memory_lowered_in_place_never_goes_below_the_recent_peak_plus_a_margin(api_factory):
    """At night the memory forecast is 1 GiB; the last day's peak was 3 GiB (1.5 GiB a pod)."""
    fake, rep = serve(api_factory, objects("InPlaceOrRecreate"))
    rec, message = written(fake)
    assert to_units("memory", rec["target"]["memory"]) == pytest.approx(1.5 * GIB * 1.15, abs=MIB)
    assert "peak +15%" in message and "the kubelet checks usage only before it lowers a limit" in message
    # in the restart regime the peak itself is the floor, without the margin
    fake, _ = serve(api_factory, objects("InPlaceOrRecreate", MEMORY_RESTARTS))
    rec, _ = written(fake)
    assert to_units("memory", rec["target"]["memory"]) == pytest.approx(1.5 * GIB, abs=MIB)


def test_pod_lives_read_the_longest_of_the_recent_lives_and_an_older_running_pod():
    lives, key, h = PodLives(), ("shop", "Deployment", "web"), pd.Timedelta("1h")
    t0 = END
    assert lives.expected(key, 24 * h, t0)[0] == 24 * h  # nothing seen: the setting
    for i in range(4):  # pods of 3, 3, 5 and 3 hours: each seen gone at the next pod's start
        lives.observe(key, {f"u{i}": t0 + 10 * i * h}, t0 + 10 * i * h)
        lives.observe(key, {}, t0 + 10 * i * h + (5 if i == 2 else 3) * h)
    lives.observe(key, {"late": t0 + 40 * h}, t0 + 40 * h)
    life, why = lives.expected(key, 24 * h, t0 + 40 * h)
    assert life == 5 * h and "last 4 pods" in why
    # a pod running for 9 hours says pods live longer than those that ended
    lives.observe(key, {"late": t0 + 40 * h}, t0 + 49 * h)
    assert lives.expected(key, 24 * h, t0 + 49 * h)[0] == 9 * h
    lives.keep(set())
    assert lives.expected(key, 24 * h, t0 + 49 * h)[0] == 24 * h


def test_with_a_day_plan_a_pods_life_reads_the_plans_highest_hour_ahead():
    """The restart regime's day plan (hourly requests of a UTC day) read for a pod's life from 20:00: 24 h
    wrap into the next day (the plan of a day stands for the next), 3 h read 20:00-22:00 only."""
    from autoscaler.routines.tidal import DayChoice, TidalRun, TidalServing
    from autoscaler.settings import VpaSettings

    origin = END - pd.Timedelta("4h")  # 20:00
    values = np.full(24, 1.0)
    values[13], values[21] = 5.0, 2.0  # the day's peak at 13:00, a smaller one at 21:00
    state = TidalServing()
    state.plans[CPU] = DayChoice(origin.floor("D"), values, "day plan in 2 blocks")
    run = TidalRun(state, None, "v1", history(), origin, VpaSettings())  # type: ignore[arg-type]
    day, why = run.for_life(CPU, 0.05, pd.Timedelta("24h"))
    assert day is not None and day.value == 5.0 and why == ""
    assert day.why == "the day plan's highest hour over the next 24 h from 20:00 UTC: day plan in 2 blocks"
    short, _ = run.for_life(CPU, 0.05, pd.Timedelta("3h"))
    assert short is not None and short.value == 2.0 and "next 3 h" in short.why
    hour, _ = run.request(CPU, False, 0.05)  # the restart regime's request for the hour itself
    assert hour is not None and hour.value == 1.0
