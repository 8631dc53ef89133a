"""The scheduler extender over real HTTP on 127.0.0.1, fed the recorded ExtenderArgs payloads of
tests/fixtures/extender/ (as kube-scheduler sends them: whole Nodes when nodeCacheCapable is false,
names when true). The clock is fixed inside the fixtures' plan and forecast windows."""
from __future__ import annotations

import datetime as dt
import json
import os
import urllib.error
import urllib.request

import pytest

from extender.nodes import StaticSource
from extender.server import ExtenderServer
from extender.service import Extender
from tests.conftest import ROOT

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "extender")
NOW = dt.datetime(2026, 12, 1, 12, 20, tzinfo=dt.timezone.utc)  # plans valid 12:00-13:00, forecasts to 14:00


def fixture(name: str) -> bytes:
    with open(os.path.join(FIXTURES, name), "rb") as fh:
        return fh.read()


def state_source() -> StaticSource:
    items = json.loads(fixture("cluster-state.json"))["items"]
    return StaticSource([o for o in items if o["kind"] == "Node"], [o for o in items if o["kind"] == "CustomNodeResource"])


def post(url: str, verb: str, body: bytes) -> tuple[int, object]:
    req = urllib.request.Request(f"{url}/{verb}", data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def get(url: str, path: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(f"{url}{path}", timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def served():
    def start(source=None, now=NOW):
        server = ExtenderServer(("127.0.0.1", 0), Extender(source or state_source(), clock=lambda: now)).start()
        started.append(server)
        return server.url + "/scheduler"  # any urlPrefix path: the verb is the last segment

    started: list[ExtenderServer] = []
    yield start
    for s in started:
        s.stop()


def passed(result) -> list[str]:
    if result.get("NodeNames") is not None:
        return result["NodeNames"]
    return [n["metadata"]["name"] for n in result["Nodes"]["items"]]


@pytest.mark.parametrize("payload", ["filter-reclaimed-nodes.json", "filter-reclaimed-names.json"])
def test_a_reclaimed_pod_goes_only_where_its_request_fits_a_valid_plan(served, payload):
    code, r = post(served(), "filter", fixture(payload))
    assert code == 200 and r["Error"] == ""
    assert passed(r) == ["node-a", "node-e"]
    # B lends 2000m < 4000m; F's plan says 8000m but the Node advertises only 3000m
    assert "4000m > reclaimable 2000m" in r["FailedNodes"]["node-b"]
    assert "4000m > reclaimable 3000m" in r["FailedNodes"]["node-f"]
    # no plan / an expired plan lends nothing, and preempting pods would not change that
    assert set(r["FailedAndUnresolvableNodes"]) == {"node-c", "node-d"}
    assert "expired" in r["FailedAndUnresolvableNodes"]["node-c"]
    assert "not set" in r["FailedAndUnresolvableNodes"]["node-d"]
    if payload.endswith("nodes.json"):  # answered in the form asked: whole Nodes back, unchanged
        sent = {n["metadata"]["name"]: n for n in json.loads(fixture(payload))["Nodes"]["items"]}
        assert all(n == sent[n["metadata"]["name"]] for n in r["Nodes"]["items"])
        assert r.get("NodeNames") is None
    else:
        assert "Nodes" not in r


def test_the_same_pod_fits_nowhere_once_every_plan_has_expired(served):
    later = NOW + dt.timedelta(hours=1)  # every plan expired at 13:00
    code, r = post(served(now=later), "filter", fixture("filter-reclaimed-names.json"))
    assert code == 200 and passed(r) == []
    assert all("lends nothing" in why for why in r["FailedAndUnresolvableNodes"].values())


def test_a_numa_bound_dedicated_pod_needs_a_whole_free_numa_node(served):
    code, r = post(served(), "filter", fixture("filter-numa-names.json"))
    assert code == 200
    assert passed(r) == ["node-b", "node-f"]  # each has one NUMA node without a dedicated pod
    assert "NUMA 0 holds 1 dedicated pod(s); NUMA 1 holds 1" in r["FailedNodes"]["node-a"]
    un = r["FailedAndUnresolvableNodes"]
    assert set(un) == {"node-c", "node-d", "node-e"}  # no CNR; E's CNR has no per-NUMA cpu (serve's, not the agent's)
    assert "no CustomNodeResource node-c" in un["node-c"] and "reports no cpu" in un["node-e"]


def test_numa_pods_fail_closed_without_a_topology_cache_and_others_pass_untouched(served):
    nodes_only = StaticSource(state_source().node_objects, None)
    url = served(nodes_only)
    code, r = post(url, "filter", fixture("filter-numa-names.json"))
    assert code == 200 and passed(r) == []
    assert all("topology cache unavailable" in why for why in r["FailedAndUnresolvableNodes"].values())
    online = json.loads(fixture("prioritize-online-nodes.json"))
    code, r = post(url, "filter", json.dumps(online).encode())
    assert code == 200 and len(passed(r)) == 6 and r["FailedNodes"] == {}


def test_node_names_fail_closed_when_the_node_cache_is_unavailable(served):
    code, r = post(served(StaticSource(None, None)), "filter", fixture("filter-reclaimed-names.json"))
    assert code == 200 and passed(r) == [] and r["FailedNodes"] == {}
    assert all("node cache unavailable" in why for why in r["FailedAndUnresolvableNodes"].values())


def scores(r) -> dict[str, int]:
    return {h["Host"]: h["Score"] for h in r}


def test_a_batch_pod_prefers_where_reclaimable_capacity_lasts(served):
    code, r = post(served(), "prioritize", fixture("prioritize-batch-names.json"))
    assert code == 200 and all(0 <= h["Score"] <= 10 and isinstance(h["Score"], int) for h in r)
    s = scores(r)
    # E keeps 10.2 cores reclaimable over the hour, A dips to 7.2 in 40 min, B keeps barely the request
    assert s["node-e"] > s["node-a"] > s["node-b"] >= 1
    assert s["node-c"] == s["node-d"] == 5  # stale / missing forecast: neutral, never a crash


def test_an_online_pod_avoids_the_node_whose_forecast_peak_leaves_no_room(served):
    code, r = post(served(), "prioritize", fixture("prioritize-online-nodes.json"))
    assert code == 200
    s = scores(r)
    assert s["node-a"] == 0  # quiet now, 15 cores in 2h40 + 2 requested > 16: only the forecast sees it
    assert s["node-e"] > s["node-f"] > s["node-b"] > 0


def test_every_node_has_a_reason_in_explain(served):
    url = served()
    post(url, "filter", fixture("filter-reclaimed-names.json"))
    post(url, "prioritize", fixture("prioritize-batch-names.json"))
    base = url.rsplit("/", 1)[0]
    code, e = get(base, "/explain?pod=analytics/etl-nightly-7x2kq")
    assert code == 200 and e["level"] == "reclaimed_cores" and e["lifetime"] == "batch default 1h"
    assert set(e["filter"]["nodes"]) == set(e["prioritize"]["nodes"]) == {f"node-{c}" for c in "abcdef"}
    a = e["prioritize"]["nodes"]["node-a"]["reason"]
    assert "reclaimable cpu lowest 7200m in 0.667h" in a and "over 1h" in a
    assert "expired" in e["prioritize"]["nodes"]["node-c"]["reason"]
    assert get(base, "/explain")[1] == {"pods": ["analytics/etl-nightly-7x2kq"]}
    code, e = get(base, "/explain?pod=nobody/none")
    assert code == 404 and "nobody/none" in e["Error"]


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("body, needle", [
    (b"{not json", "not JSON"),
    (b"[]", "JSON object"),
    (b'{"Nodes": {"items": []}}', "Pod"),
    (b'{"Pod": {"metadata": {"name": "p"}}}', "neither Nodes nor NodeNames"),
    (b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1, 2]}', "list of node names"),
    (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"kind": "Node"}]}}', "Node objects"),
    (b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}},'
     b' "NodeNames": ["node-a"]}', "does not parse"),
])
def test_a_bad_request_is_400_with_the_reason_in_error(served, verb, body, needle):
    code, r = post(served(), verb, body)
    assert code == 400 and needle in r["Error"], r
    assert "Traceback" not in r["Error"]
    if verb == "filter":
        assert r["FailedNodes"] == {} and r["Nodes"] is None


def test_lowercase_keys_are_read_as_go_reads_them_and_unknown_paths_are_404(served):
    url = served()
    args = json.loads(fixture("filter-reclaimed-names.json"))
    code, r = post(url, "filter", json.dumps({"pod": args["Pod"], "nodenames": args["NodeNames"]}).encode())
    assert code == 200 and passed(r) == ["node-a", "node-e"]
    assert post(url, "bind", b"{}")[0] == 404
    assert get(url.rsplit("/", 1)[0], "/healthz") == (200, {"ready": True})


def test_the_recorded_objects_are_valid_kubernetes_objects():
    from tests.autoscaler.conftest import validate_object

    items = json.loads(fixture("cluster-state.json"))["items"]
    assert {o["kind"] for o in items} == {"Node", "CustomNodeResource"}  # the CNRs against the vendored CRD
    for o in items:
        validate_object(o)
    for name in sorted(os.listdir(FIXTURES)):
        if name != "cluster-state.json":
            args = json.loads(fixture(name))
            validate_object(args["Pod"])
            for node in (args.get("Nodes") or {}).get("items", []):
                validate_object(node)


def test_metrics_count_calls_codes_and_what_became_of_the_nodes(served):
    url = served()
    base = url.rsplit("/", 1)[0]
    post(url, "filter", fixture("filter-reclaimed-names.json"))
    post(url, "prioritize", fixture("prioritize-batch-names.json"))
    post(url, "filter", b"{not json")
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert 'tidewise_extender_calls_total{code="200",verb="filter"} 1.0' in text
    assert 'tidewise_extender_calls_total{code="400",verb="filter"} 1.0' in text
    assert 'tidewise_extender_nodes_total{result="passed",verb="filter"} 2.0' in text
    assert 'tidewise_extender_nodes_total{result="failed",verb="filter"} 2.0' in text
    assert 'tidewise_extender_nodes_total{result="unresolvable",verb="filter"} 2.0' in text
    assert 'tidewise_extender_nodes_total{result="neutral",verb="prioritize"} 2.0' in text
    assert 'tidewise_extender_call_seconds_count{verb="prioritize"} 1.0' in text
