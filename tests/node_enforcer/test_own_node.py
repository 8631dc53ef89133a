"""The node agent writes only its own node's objects (issue 22, least privilege): it evicts only pods
whose `spec.nodeName` is its node, and creates or patches only its node's CustomNodeResource; each
refusal happens before any request reaches the API server (here the local fake, which records them)."""
from __future__ import annotations

import kubernetes_validate
import pytest

from contracts.kube_errors import Conflict, Forbidden
from node_enforcer.enforce.cnr import CnrPublisher
from node_enforcer.enforce.evictor import Evictor
from node_enforcer.kube import KubeApi
from node_enforcer.model.pressure import Pressure
from node_enforcer.policy.eviction import EvictionSettings
from testsupport.kube_fake import FakeApiServer
from tests.node_enforcer.conftest import make_pod_obj
from tests.node_enforcer.test_eviction import GiB, plan

LOW_MEM = Pressure(mem_total_bytes=64 * GiB, mem_available_bytes=int(0.5 * GiB), psi_some_avg10=0.0)


def _posts(fake: FakeApiServer) -> list[str]:
    return [r.path for r in fake.requests if r.method in ("POST", "PATCH")]


def test_the_api_wrapper_refuses_to_evict_a_pod_on_another_node_unsent():
    objs = [make_pod_obj("mine", "reclaimed_cores", ns="batch", node="n1"),
            make_pod_obj("theirs", "reclaimed_cores", ns="batch", node="n2")]
    with FakeApiServer.of_node(objs) as fake:
        api = KubeApi(fake.api_client(), node="n1")
        with pytest.raises(Forbidden, match="on node 'n2', not this agent's node 'n1'"):
            api.evict("batch", "theirs", dry_run=False, node="n2")
        with pytest.raises(Forbidden, match="on no node"):
            api.evict("batch", "theirs", dry_run=False)  # a caller that does not say where the pod is
        with pytest.raises(Forbidden, match="not this agent's node None"):
            KubeApi(fake.api_client()).evict("batch", "mine", node="n1")  # an agent bound to no node writes nothing
        assert _posts(fake) == []
        api.evict("batch", "mine", dry_run=False, node="n1", uid=objs[0]["metadata"]["uid"])
    assert _posts(fake) == ["/api/v1/namespaces/batch/pods/mine/eviction"]
    body = fake.requests[-1].body
    assert body["deleteOptions"] == {"preconditions": {"uid": objs[0]["metadata"]["uid"]}}
    kubernetes_validate.validate(body, "1.30", strict=True)


def test_a_namesake_created_on_another_node_since_the_read_is_not_evicted():
    """The uid precondition: the pod read on this node was replaced by one of the same name elsewhere."""
    old = make_pod_obj("web-0", "reclaimed_cores", ns="batch", node="n1")
    with FakeApiServer.of_node([old]) as fake:
        api = KubeApi(fake.api_client(), node="n1")
        pod = api.list_node_pods("n1")[0]
        fake.put(dict(make_pod_obj("web-0", "reclaimed_cores", ns="batch", node="n2"), kind="Pod"))  # rescheduled elsewhere
        with pytest.raises(Conflict, match="Precondition failed"):
            api.evict(pod.namespace, pod.name, dry_run=False, node=pod.node_name, uid=pod.uid)


def test_the_evictor_refuses_a_victim_on_another_node_or_on_none(two_socket):
    """Victims from a source that is not filtered by node (a pods file may hold other nodes' pods or
    leave nodeName out): chosen by the policy, refused by the evictor with the reason, never sent."""
    objs = [make_pod_obj("theirs", "reclaimed_cores", ns="batch", node="n2"),
            make_pod_obj("nowhere", "reclaimed_cores", ns="batch", node=""),
            make_pod_obj("mine", "reclaimed_cores", ns="batch", node="n1")]
    with FakeApiServer.of_node(objs) as fake:
        api = KubeApi(fake.api_client(), node="n1")
        from node_enforcer.collect.pods import pods_from_objects

        pods = pods_from_objects(objs)  # all nodes
        # mine, nowhere, theirs: together just enough to cover the 2.7 GiB deficit, so all three are chosen
        usage = {pods[0].uid: GiB, pods[1].uid: int(1.1 * GiB), pods[2].uid: int(1.2 * GiB)}
        done = Evictor(EvictionSettings(max_evictions=5, dry_run=False), api, node="n1").run(
            LOW_MEM, pods, plan(two_socket, pods), usage)
    results = {e.pod: e.result for e in done}
    assert results["batch/theirs"] == "refused: the pod is on node 'n2', not this agent's node 'n1'"
    assert results["batch/nowhere"] == "refused: the pod is on no node, not this agent's node 'n1'"
    assert results["batch/mine"] == "requested"
    assert _posts(fake) == ["/api/v1/namespaces/batch/pods/mine/eviction"]


def test_an_evictor_with_an_api_but_no_node_is_refused_at_construction():
    with pytest.raises(ValueError, match="needs the agent's own node"):
        Evictor(EvictionSettings(), api=object())  # type: ignore[arg-type]


def test_the_agent_creates_and_patches_only_its_own_customnoderesource():
    status = {"topologyPolicy": "None"}
    with FakeApiServer() as fake:
        api = KubeApi(api_client=fake.api_client(), node="n1")
        with pytest.raises(Forbidden, match="patch customnoderesource n2 status: refused by the agent"):
            api.patch_cnr_status("n2", status)
        with pytest.raises(Forbidden, match="create customnoderesource n2: refused by the agent"):
            api.create_cnr("n2")
        # a publisher wired to another node's name reports the refusal and writes nothing
        assert CnrPublisher(api, "n2").publish(status).startswith("failed: ")
        assert _posts(fake) == [] and fake.objects_of("CustomNodeResource") == {}
        assert CnrPublisher(api, "n1").publish(status) == "created"
    assert set(fake.objects_of("CustomNodeResource")) == {"n1"}
    assert _posts(fake) == ["/apis/node.katalyst.kubewharf.io/v1alpha1/customnoderesources",
                            "/apis/node.katalyst.kubewharf.io/v1alpha1/customnoderesources/n1/status"]
