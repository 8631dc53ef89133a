"""The loop holds its ground against the cluster (issue 10, section 5): what it wrote and someone
cleared or edited since is decided again from the cluster as it is and written again, through the
real `kubernetes` client against the API fake. Its memory of past writes still spares writes when
nothing changed, and a dry run (which leaves the cluster as it was) does not repeat itself."""
from __future__ import annotations

import copy

import pandas as pd
import pytest
from kubernetes import client

from autoscaler.input.cluster import ApiCluster
from autoscaler.kube import Kube
from autoscaler.output.sinks import WRITTEN, ApiSink, DryRunSink
from autoscaler.routines.loop import OK, ServingLoop
from contracts.quantity import to_units
from tests.autoscaler.conftest import fast_settings, source_of, validate_object
from testsupport.kube_fake import FakeApiServer

MILLICPU = "resource.katalyst.kubewharf.io/reclaimed_millicpu"


@pytest.fixture
def api(objects):
    fake = FakeApiServer(objects).start()
    cfg = client.Configuration()
    cfg.host = fake.url
    kube = Kube(client.ApiClient(cfg), sleep=lambda s: None, max_retries=3)
    try:
        yield fake, kube
    finally:
        kube.api_client.close()
        fake.stop()


class Clock:
    """Decision time, moved by the test (the history ends at `history.end`)."""

    def __init__(self, t: pd.Timestamp):
        self.t = t

    def __call__(self) -> pd.Timestamp:
        return self.t


def serving(kube, history, sink=None, settings=None, clock=None):
    return ServingLoop(settings or fast_settings(), source_of(history), ApiCluster(kube), sink or ApiSink(kube),
                       clock=clock)


def edit(fake, kind, name, namespace, fn):
    """Change an object as another client would (a new resourceVersion)."""
    obj = copy.deepcopy(fake.get(kind, name, namespace))
    fn(obj)
    fake.put(obj)


def written_keys(rep):
    return {r.key for r in rep.results if r.outcome == WRITTEN}


def test_a_cleared_vpa_recommendation_is_written_again(api, history):
    fake, kube = api
    loop = serving(kube, history)
    first = loop.run_once()
    assert first.outcome == OK
    d = first.vpa[0]
    assert d.key in written_keys(first)
    recs = fake.get("VerticalPodAutoscaler", d.name, d.namespace)["status"]["recommendation"]
    # nothing changed: nothing rewritten (the loop's memory still spares writes)
    assert d.key not in {r.key for r in loop.run_once().results}
    edit(fake, "VerticalPodAutoscaler", d.name, d.namespace, lambda o: o["status"].pop("recommendation"))
    again = loop.run_once()
    assert again.outcome == OK
    assert d.key in again.drifted and "status.recommendation" in again.drifted[d.key]
    assert d.key in written_keys(again)
    restored = fake.get("VerticalPodAutoscaler", d.name, d.namespace)
    assert restored["status"]["recommendation"] == recs
    validate_object(restored)
    # restored once, then left alone again
    assert d.key not in {r.key for r in loop.run_once().results}


def test_an_edited_vpa_recommendation_is_written_again(api, history):
    fake, kube = api
    loop = serving(kube, history)
    d = loop.run_once().vpa[0]

    def shrink(o):  # a hand edit far outside the dead-band: every target down to 1m / 1 byte
        for r in o["status"]["recommendation"]["containerRecommendations"]:
            r["target"] = {res: "1m" if res == "cpu" else "1" for res in r["target"]}

    edit(fake, "VerticalPodAutoscaler", d.name, d.namespace, shrink)
    edited = fake.get("VerticalPodAutoscaler", d.name, d.namespace)["status"]["recommendation"]
    again = loop.run_once()
    assert d.key in again.drifted and d.key in written_keys(again)
    now = fake.get("VerticalPodAutoscaler", d.name, d.namespace)["status"]["recommendation"]
    # the edit is undone: every target is above the edited 1m / 1 byte again (how far is for the
    # guardrails: a rise is limited per step from the published value, memory never below its peak)
    for r in now["containerRecommendations"]:
        assert all(to_units(res, q) > 1 for res, q in r["target"].items())
    assert now != edited


def test_an_hpa_floor_lowered_by_hand_is_raised_again(api, history):
    fake, kube = api
    loop = serving(kube, history)
    first = loop.run_once()
    raised = [h for h in first.hpa if h.min_replicas > 1 and h.key in written_keys(first)]
    assert raised, "the fixture cluster needs one HPA whose predictive floor is above 1"
    h = raised[0]
    edit(fake, "HorizontalPodAutoscaler", h.name, h.namespace, lambda o: o["spec"].update(minReplicas=1))
    again = loop.run_once()
    assert h.key in again.drifted and h.key in written_keys(again)
    assert fake.get("HorizontalPodAutoscaler", h.name, h.namespace)["spec"]["minReplicas"] == h.min_replicas


def test_node_reclaimed_resources_reset_are_decided_again_from_the_node(api, history):
    fake, kube = api
    s = fast_settings()
    clock = Clock(history.end + history.step)
    loop = serving(kube, history, settings=s, clock=clock)
    first = loop.run_once()
    assert "Node/node-0" in written_keys(first)
    assert int(fake.get("Node", "node-0")["status"]["allocatable"][MILLICPU]) > 0

    def reset(o):  # as after a node re-registration: the extended resources are gone
        for part in ("allocatable", "capacity"):
            o["status"][part].pop(MILLICPU)

    edit(fake, "Node", "node-0", None, reset)
    clock.t += pd.Timedelta("6m")  # past the 5 m cool-down: a higher value is not the safe direction
    again = loop.run_once()
    assert again.outcome == OK
    assert "Node/node-0" in again.drifted and "Node/node-1" not in again.drifted
    assert "Node/node-0" in written_keys(again)
    assert int(fake.get("Node", "node-0")["status"]["allocatable"][MILLICPU]) > 0


def test_a_deleted_and_recreated_vpa_is_served_again(api, history):
    fake, kube = api
    loop = serving(kube, history)
    d = loop.run_once().vpa[0]
    path = f"/apis/autoscaling.k8s.io/v1/namespaces/{d.namespace}/verticalpodautoscalers/{d.name}"
    old = fake.objects.pop(path)
    assert d.key not in {r.key for r in loop.run_once().results}  # gone: nothing to write, memory dropped
    fake.put({k: v for k, v in old.items() if k != "status"})  # recreated, without a status
    assert d.key in written_keys(loop.run_once())


def test_a_dry_run_does_not_repeat_itself_while_the_cluster_stays_as_it_was(api, history):
    fake, kube = api
    sink = DryRunSink()
    loop = serving(kube, history, sink=sink)
    first = loop.run_once()
    vpas = {c.key for c in first.changes if c.kind == "VerticalPodAutoscaler"}
    assert vpas
    second = loop.run_once()
    assert not second.drifted
    assert not vpas & {c.key for c in second.changes}
    assert fake.writes() == []
