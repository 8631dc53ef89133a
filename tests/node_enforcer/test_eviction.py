import logging

import kubernetes_validate

from contracts.kube_errors import TooManyRequests
from node_enforcer.collect.pressure import read_pressure
from node_enforcer.enforce.evictor import Evictor, RateLimiter
from node_enforcer.kube import KubeApi
from node_enforcer.model.pressure import Pressure
from node_enforcer.policy.eviction import EvictionSettings, choose_victims, triggers
from node_enforcer.policy.plan import plan
from testsupport.kube_fake import FakeApiServer
from tests.node_enforcer.conftest import make_pod, make_pod_obj

GiB = 2**30
CALM = Pressure(64 * GiB, 32 * GiB, 0.0)
LOW_MEM = Pressure(64 * GiB, 1 * GiB, 0.0)  # watermark 5% = 3.2 GiB: deficit 2.2 GiB
PSI = Pressure(64 * GiB, 32 * GiB, 55.0)


def _pods():
    return [make_pod("sys", "system_cores", cpu="1", priority=-100), make_pod("db", "dedicated_cores", cpu="2", priority=-50),
            make_pod("web", cpu="1", priority=10), make_pod("low", cpu="1", priority=-5),
            make_pod("batch-small", "reclaimed_cores", priority=0), make_pod("batch-big", "reclaimed_cores", priority=0),
            make_pod("batch-hi", "reclaimed_cores", priority=50)]


def _usage(pods):
    sizes = {"sys": 9, "db": 9, "web": 4, "low": 1, "batch-small": 1, "batch-big": 2, "batch-hi": 0.5}
    return {p.uid: int(sizes[p.name] * GiB) for p in pods}


def test_triggers():
    assert triggers(CALM, EvictionSettings()) == ([], 0)
    reasons, deficit = triggers(LOW_MEM, EvictionSettings())
    assert "MemAvailable 1024 MiB < watermark 3276 MiB" in reasons[0] and deficit == int(64 * GiB * 0.05) - GiB
    reasons, deficit = triggers(PSI, EvictionSettings())
    assert reasons == ["memory PSI some avg10 55.0% >= 30.0%"] and deficit == 0
    assert triggers(Pressure(64 * GiB, 32 * GiB, None), EvictionSettings()) == ([], 0)
    assert triggers(Pressure(64 * GiB, 5 * GiB, None), EvictionSettings(min_available_bytes=6 * GiB))[1] == GiB


def test_victim_order_reclaimed_first_then_priority_then_usage(two_socket):
    pods = _pods()
    alloc = plan(two_socket, pods)
    victims = choose_victims(LOW_MEM, pods, alloc, _usage(pods), EvictionSettings())
    # deficit 2.2 GiB: batch-big (2 GiB, priority 0), then batch-small (1 GiB, priority 0) covers it
    assert [p.name for p, _ in victims] == ["batch-big", "batch-small"]
    assert "MemAvailable" in victims[0][1] and "reclaimed_cores priority 0, using 2048 MiB" in victims[0][1]
    # a huge deficit goes through every candidate, but never system or dedicated pods
    huge = Pressure(64 * GiB, 0, None)
    names = [p.name for p, _ in choose_victims(huge, pods, alloc, _usage(pods), EvictionSettings(min_available_ratio=0.9))]
    assert names == ["batch-big", "batch-small", "batch-hi", "low", "web"]
    assert choose_victims(CALM, pods, alloc, _usage(pods), EvictionSettings()) == []
    # PSI alone (no byte deficit) evicts one pod
    assert [p.name for p, _ in choose_victims(PSI, pods, alloc, _usage(pods), EvictionSettings())] == ["batch-big"]


def test_rate_limiter_with_injected_clock():
    now = [0.0]
    lim = RateLimiter(2, 60, clock=lambda: now[0])
    assert lim.allow() and lim.allow() and not lim.allow()
    now[0] = 59.9
    assert not lim.allow()
    now[0] = 60.0  # both earlier events have left the window
    assert lim.allow() and lim.allow() and not lim.allow()


class RecordingApi:
    def __init__(self, refuse=()):
        self.calls, self.refuse = [], set(refuse)

    def evict(self, namespace, name, dry_run=True, node=None, uid=None):
        self.calls.append((namespace, name, dry_run))
        if name in self.refuse:
            raise TooManyRequests("evict: 429 Cannot evict pod as it would violate the pod's disruption budget.")


def test_evictor_rate_limits_logs_and_is_dry_run_by_default(two_socket, caplog):
    pods = _pods()
    alloc = plan(two_socket, pods)
    api = RecordingApi()
    now = [0.0]
    ev = Evictor(EvictionSettings(), api, clock=lambda: now[0], node="n1")
    with caplog.at_level(logging.WARNING, logger="node_enforcer.enforce.evictor"):
        done = ev.run(LOW_MEM, pods, alloc, _usage(pods))
    assert [e.pod for e in done] == ["default/batch-big"] and done[0].dry_run  # 1 per minute
    assert api.calls == [("default", "batch-big", True)]
    assert "dry-run: evict default/batch-big: MemAvailable" in caplog.text and "postponed by the rate limit" in caplog.text
    assert ev.run(LOW_MEM, pods, alloc, _usage(pods)) == []  # still within the minute
    now[0] = 61
    real = Evictor(EvictionSettings(dry_run=False, max_evictions=5), RecordingApi(refuse={"batch-big"}), node="n1")
    done = real.run(LOW_MEM, pods, alloc, _usage(pods))
    assert done[0].result.startswith("refused:") and "disruption budget" in done[0].result
    assert [e.pod for e in done] == ["default/batch-big", "default/batch-small"] and not done[1].dry_run


def test_evictor_without_api_only_logs(two_socket):
    pods = _pods()
    done = Evictor(EvictionSettings()).run(PSI, pods, plan(two_socket, pods), _usage(pods))
    assert done[0].result == "logged only (no Kubernetes API)"


def test_read_pressure_real_and_fixture(tmp_path):
    p = read_pressure("/proc")
    assert p.mem_total_bytes > p.mem_available_bytes > 0
    (tmp_path / "meminfo").write_text("MemTotal:       1000 kB\nMemFree:   10 kB\nMemAvailable:    100 kB\n")
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure/memory").write_text("some avg10=12.50 avg60=1.00 avg300=0.00 total=5\n"
                                              "full avg10=3.00 avg60=0.00 avg300=0.00 total=1\n")
    assert read_pressure(str(tmp_path)) == Pressure(1024000, 102400, 12.5)
    (tmp_path / "pressure/memory").unlink()
    assert read_pressure(str(tmp_path)).psi_some_avg10 is None


def test_eviction_through_the_api_wrapper_against_a_local_fake(two_socket):
    objs = [make_pod_obj("batch-big", "reclaimed_cores", ns="batch"), make_pod_obj("batch-small", "reclaimed_cores", ns="batch")]
    with FakeApiServer.of_node(objs) as fake:
        api = KubeApi(fake.api_client(), node="n1")
        fake.get("Pod", "batch-big", "batch")["metadata"]["labels"] = {"app": "big"}
        fake.put({"kind": "PodDisruptionBudget", "metadata": {"name": "big", "namespace": "batch"},
                  "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "big"}}}})
        pods = api.list_node_pods("n1")
        usage = {pods[0].uid: 2 * GiB, pods[1].uid: GiB}
        done = Evictor(EvictionSettings(max_evictions=5), api, node="n1").run(LOW_MEM, pods, plan(two_socket, pods), usage)
    posts = [r for r in fake.requests if r.method == "POST"]
    assert [r.path for r in posts] == ["/api/v1/namespaces/batch/pods/batch-big/eviction",
                                          "/api/v1/namespaces/batch/pods/batch-small/eviction"]
    assert all(r.params.get("dryRun") == ["All"] for r in posts)
    assert done[0].result.startswith("refused:") and done[1].result == "requested"
    for r in posts:  # what we sent is a valid policy/v1 Eviction
        kubernetes_validate.validate(r.body, "1.30", strict=True)


def test_markers_keep_shared_pods_but_never_reclaimed_ones(two_socket):
    """The agent's memory-pressure eviction is a safety: a marker protects a shared pod as it does from
    serve's moves, but a reclaimed pod cannot buy protection its level does not give."""
    import dataclasses

    def marked(pod, **ann):
        return dataclasses.replace(pod, annotations={**pod.annotations, **ann})

    web = marked(make_pod("web", cpu="1"), **{"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})
    api = marked(make_pod("api", cpu="1"), **{"tidewise.io/evict": " No "})
    free = make_pod("free", cpu="1")
    batch = marked(make_pod("batch", "reclaimed_cores"), **{"tidewise.io/evict": "false",
                                                            "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})
    pods = [web, api, free, batch]
    alloc = plan(two_socket, pods)
    huge = Pressure(64 * GiB, 0, None)  # every candidate is needed
    assert {p.name for p, _ in choose_victims(huge, pods, alloc, {}, EvictionSettings())} == {"free", "batch"}
    assert [p.name for p, _ in choose_victims(PSI, pods, alloc, {}, EvictionSettings())] == ["batch"]
