"""The topology report: Katalyst CustomNodeResource status.topologyZone from the sysfs fixtures,
validated against the vendored CRD schema, published through the API wrapper only when it changes."""
import pytest

from contracts.qos import RECLAIMED_MEMORY, RECLAIMED_MILLICPU
from contracts.reclaim import NumaReclaim, ReclaimPlan
from node_enforcer.enforce.cnr import CnrPublisher
from node_enforcer.kube import KubeApi
from node_enforcer.policy.allocation import PolicySettings
from node_enforcer.policy.plan import plan
from node_enforcer.policy.topology_report import topology_status
from testsupport.k8s_schemas import schema_errors
from testsupport.kube_fake import FakeApiServer
from tests.node_enforcer.conftest import make_pod

GiB = 2**30


def _cnr(status, name="n1"):
    return {"apiVersion": "node.katalyst.kubewharf.io/v1alpha1", "kind": "CustomNodeResource",
            "metadata": {"name": name}, "spec": {}, "status": status}


def _pods():
    return [make_pod("db", "dedicated_cores", cpu="4", memory="8Gi", mem_enh={"numa_binding": True}),
            make_pod("web", cpu="2"), make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")]


@pytest.mark.parametrize("fixture,sockets,numas", [("two_socket", 2, 2), ("four_numa", 2, 4)])
def test_report_of_the_fixtures_matches_the_crd_schema_and_the_allocation(fixture, sockets, numas, request):
    topo = request.getfixturevalue(fixture)
    pods = _pods()
    reclaim = ReclaimPlan("n1", "2026-12-01T00:00:00Z", 3600, 4000, 8 * GiB, 2000,
                          numa={n: NumaReclaim(4000 // numas, 8 * GiB // numas) for n in topo.numa_nodes})
    alloc = plan(topo, pods, reclaim, PolicySettings())
    status = topology_status(topo, alloc, pods, reclaim)
    assert schema_errors(_cnr(status)) == []
    zones = status["topologyZone"]
    assert [z["type"] for z in zones] == ["Socket"] * sockets
    numa = [c for z in zones for c in z["children"]]
    assert [c["type"] for c in numa] == ["Numa"] * numas and sorted(int(c["name"]) for c in numa) == list(range(numas))
    assert sum(int(c["resources"]["capacity"]["cpu"]) for c in numa) == len(topo.cpus)
    assert sum(int(c["resources"]["allocatable"][RECLAIMED_MILLICPU]) for c in numa) == len(alloc.pools["reclaim"]) * 1000
    assert sum(int(c["resources"]["allocatable"][RECLAIMED_MEMORY]) for c in numa) == 8 * GiB
    db = alloc.pod("default/db")
    held = [a for c in numa for a in c.get("allocations", []) if a["consumer"].startswith("default/db/")]
    assert len(held) == 1 and int(held[0]["requests"]["cpu"]) == len(db.cpus) and held[0]["requests"]["memory"] == str(8 * GiB)
    assert all(len(c["siblings"]) == numas - 1 for c in numa)


def test_a_status_that_breaks_the_schema_is_caught():
    assert schema_errors(_cnr({"topologyZone": [{"type": "Socket"}]}))  # no topologyPolicy, no zone name


def test_publisher_creates_then_writes_only_on_change(two_socket):
    pods = _pods()
    status = topology_status(two_socket, plan(two_socket, pods), pods)
    with FakeApiServer() as fake:
        api = KubeApi(api_client=fake.api_client(), node="n1")
        pub = CnrPublisher(api, "n1")
        assert pub.publish(status) == "created"
        assert fake.get("CustomNodeResource", "n1")["status"] == status and schema_errors(fake.get("CustomNodeResource", "n1")) == []
        sent = len(fake.requests)
        assert pub.publish(status) == "unchanged" and len(fake.requests) == sent  # no API call at all
        # a restarted agent reads the object back and finds nothing to write
        assert CnrPublisher(api, "n1").publish(status) == "unchanged"
        assert [r.method for r in fake.requests[sent:]] == ["GET"]
        grown = topology_status(two_socket, plan(two_socket, pods[1:]), pods[1:])  # the dedicated pod left
        assert pub.publish(grown) == "updated" and fake.get("CustomNodeResource", "n1")["status"] == grown
        dry = CnrPublisher(api, "n1", dry_run=True)
        assert dry.publish(status) == "would update"
        sent = len(fake.requests)
        assert dry.publish(status) == "would update" and len(fake.requests) == sent  # no re-read each pass
        assert fake.get("CustomNodeResource", "n1")["status"] == grown


def test_publisher_reports_an_api_failure_and_retries_with_a_fresh_read(two_socket):
    pods = _pods()
    status = topology_status(two_socket, plan(two_socket, pods), pods)
    with FakeApiServer() as fake:
        pub = CnrPublisher(KubeApi(api_client=fake.api_client(), node="n1"), "n1")
        bad = dict(status, topologyZone=[{"type": "Socket"}])  # refused by the API (422): reported, not raised
        assert pub.publish(bad).startswith("failed:") and pub.last is None
        assert pub.publish(status) == "updated"
