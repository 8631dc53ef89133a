"""Watches that recover (issue 22, defect 5): a reconnected watch on a quiet kind is not "failing",
and the extender's `/healthz` follows its Node cache. Through the REAL `kubernetes` client against
the API fake, which cuts (`drop`), refuses (`refuse_next`: 503 before opening) and heals
(`recover`) watches; the informers' clock is injected, so no test waits for `stale_after`."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from kubernetes import client

from extender.nodes import WatchedSource
from extender.server import ExtenderServer
from extender.service import Extender
from autoscaler.kube import Kube
from contracts.informer import Backoff, Informer, StaleCache
from testsupport.kube_fake import FakeApiServer
from tests.extender.test_extender import NOW, fixture
from tests.conftest import wait_until


@pytest.fixture
def api():
    items = json.loads(fixture("cluster-state.json"))["items"]
    fake = FakeApiServer(items).start()  # Nodes and CNRs, and no HPA at all: a quiet kind
    cfg = client.Configuration()
    cfg.host = fake.url
    kube = Kube(client.ApiClient(cfg), sleep=lambda s: None)
    kube.watch_seconds = 300  # as in a cluster: a quiet watch stays open, no clean end comes to the rescue
    try:
        yield fake, kube
    finally:
        fake.watch.recover()
        fake.watch.drop()  # end the open streams, so the informers' threads end with the test
        kube.api_client.close()
        fake.stop()


def test_a_quiet_kind_whose_watch_reopened_is_not_failing(api):
    fake, kube = api
    now = [0.0]
    hpas = Informer("HorizontalPodAutoscaler", *kube.watched("HorizontalPodAutoscaler"),
                    backoff=Backoff(0.01, 0.05), stale_after=120.0, clock=lambda: now[0]).prime()
    fake.watch.refuse_next(3)  # three reconnects refused, the fourth opens and stays open, quiet
    hpas.start()
    try:
        assert wait_until(lambda: hpas.stats.resumes_after_error == 3 and hpas.stats.opened == 1)
        assert hpas.stats.events == 0  # nothing happened to HPAs: no event will ever clear the failure
        now[0] = 130.0  # past stale_after since the first refusal, the watch open all along
        assert hpas.items() == [] and hpas.unusable() is None
        fake.watch.refuse_next(10_000)
        fake.watch.drop()  # cut again after 130 s open: a new failure, counted from now
        assert wait_until(lambda: hpas.stats.resumes_after_error >= 5)
        now[0] = 249.0
        assert hpas.items() == []  # 119 s into the new failure: still answering
        now[0] = 251.0
        with pytest.raises(StaleCache, match="watch failing for more than 120 s"):
            hpas.items()
    finally:
        hpas.stop()


def test_a_watch_cut_as_soon_as_it_opens_stays_failing(api):
    fake, kube = api
    now = [0.0]
    nodes = Informer("Node", *kube.watched("Node"), backoff=Backoff(0.01, 0.05), stale_after=60.0,
                     settle=5.0, clock=lambda: now[0]).prime()
    nodes.start()
    assert wait_until(lambda: nodes.stats.opened == 1)
    fake.watch.drop_next(10_000)  # every reconnect opens and is cut at once (a flapping balancer)
    fake.watch.drop()
    assert wait_until(lambda: nodes.stats.resumes_after_error >= 3 and nodes.stats.opened >= 3)
    nodes.stop()  # so that no flapping watch is open at the instant the clock jumps
    assert wait_until(lambda: not nodes._thread.is_alive())
    now[0] = 61.0
    with pytest.raises(StaleCache, match="watch failing"):
        nodes.items()


def healthz(url: str) -> int:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def filter_names(url: str) -> dict:
    req = urllib.request.Request(f"{url}/scheduler/filter", data=fixture("filter-reclaimed-names.json"), method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def test_the_extender_is_unhealthy_while_its_node_cache_is_stale_and_healthy_once_its_watch_is_back(api):
    fake, kube = api
    now = [0.0]
    source = WatchedSource(kube, stale_after=60.0, watch_topology=False, clock=lambda: now[0])
    for informer in source.informers.values():
        informer.backoff = Backoff(0.01, 0.05)
    source.start()
    server = ExtenderServer(("127.0.0.1", 0), Extender(source, clock=lambda: NOW), source.ready).start()
    nodes = source.informers["Node"]
    try:
        assert source.wait_synced(10) and wait_until(lambda: nodes.stats.opened == 1)
        assert healthz(server.url) == 200 and filter_names(server.url)["NodeNames"] == ["node-a", "node-e"]
        fake.watch.refuse_next(10_000)
        fake.watch.drop()
        assert wait_until(lambda: nodes.stats.resumes_after_error >= 2)
        now[0] = 61.0
        assert healthz(server.url) == 503
        refused = filter_names(server.url)
        assert refused["NodeNames"] == [] and all("node cache unavailable" in why
                                                  for why in refused["FailedAndUnresolvableNodes"].values())
        fake.watch.recover()  # the API server answers again: the next reconnect opens, quiet
        assert wait_until(lambda: nodes.stats.opened == 2)
        assert healthz(server.url) == 503  # open for 0 s (the clock stands still): not trusted yet
        now[0] = 67.0
        assert healthz(server.url) == 200 and filter_names(server.url)["NodeNames"] == ["node-a", "node-e"]
    finally:
        server.stop()
        source.stop()
