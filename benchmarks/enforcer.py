"""Node enforcer (issues 4, 15): planning cost, no-op reconcile cost on real cgroups, agent memory,
with the batch isolation controllers on (disk I/O, network, reclaimed root, topology report).

- plan: `node_enforcer.policy.plan` for 200 pods (20 dedicated — some NUMA-bound, one
  NUMA-exclusive —, 120 shared, 50 reclaimed, 10 system) on the 4-NUMA, 128-thread fixture, with a
  per-NUMA reclaim plan, then `plan_isolation` (I/O limits on 4 disks, network classes, reclaimed
  root) and the topology report (`topology_status`); QoS annotations are parsed inside every call.
- no-op reconcile: one full `Agent.reconcile_once()` (read the pods file, reclaim plan, policy,
  read-compare every cgroup file incl. blkio.throttle.* of each batch pod for each disk of
  /sys/block, the reclaimed root's memory, `tc` reads of an HTB tree on a veth, checkpoint check,
  topology report compared with the last one written, pressure + per-pod memory usage) over 50
  pods whose cgroups, on this machine's real cgroup v1 hierarchy, already hold the plan. net_prio is
  not mounted here: the batch pods' net class files are reported unsupported (no read cost).
- agent RSS: peak resident memory (VmHWM) of `tidewise enforce` running its loop as a separate
  process over those 50 pods with `--io-limits --net-device`: with `--pods-from file`, and with
  `--pods-from api --report-topology` against a local HTTP fake of the API server (the DaemonSet's
  mode, which loads the `kubernetes` client).

    .venv/bin/python -m benchmarks.run --only enforcer            # full
    .venv/bin/python -m benchmarks.run --only enforcer --quick    # fewer repetitions
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FOUR_NUMA = os.path.join(ROOT, "tests", "fixtures", "sysfs", "four-numa")
MiB = 2**20


def _pods_200():
    from node_enforcer.podspec import make_pod

    pods = []
    for i in range(20):
        enh = {"numa_binding": True} if i % 2 else None
        if i == 0:
            enh = {"numa_binding": True, "numa_exclusive": True}
        pods.append(make_pod(f"ded-{i}", "dedicated_cores", cpu="16" if i == 0 else str(2 + i % 3),
                             mem_enh=enh, priority=100))
    pods += [make_pod(f"web-{i}", None if i % 3 else "shared_cores", cpu=f"{200 + 50 * (i % 7)}m", memory="512Mi",
                      mem_enh={"numa_binding": True} if i % 10 == 0 else None) for i in range(120)]
    pods += [make_pod(f"batch-{i}", "reclaimed_cores", limit_memory="2Gi") for i in range(50)]
    pods += [make_pod(f"sys-{i}", "system_cores", cpu="100m") for i in range(10)]
    return pods


def bench_plan(quick: bool) -> dict:
    from contracts.reclaim import NumaReclaim, ReclaimPlan
    from node_enforcer.collect.qos import QosResolver
    from node_enforcer.collect.topology import read_topology
    from node_enforcer.model.devices import BlockDevice
    from node_enforcer.policy.io import IoSettings
    from node_enforcer.policy.isolation import IsolationSettings, plan_isolation
    from node_enforcer.policy.network import NetworkSettings
    from node_enforcer.policy.plan import plan
    from node_enforcer.policy.topology_report import topology_status

    topo = read_topology(FOUR_NUMA)
    pods = _pods_200()
    reclaim = ReclaimPlan("n1", "2026-11-30T00:00:00Z", 3600, 40_000, 64 * 2**30, 30_000,
                          numa={n: NumaReclaim(10_000, 16 * 2**30) for n in range(4)})
    resolver = QosResolver()
    first = plan(topo, pods, reclaim, resolver=resolver)
    disks = [BlockDevice(f"sd{c}", 8, 16 * i) for i, c in enumerate("abcd")]
    iso_s = IsolationSettings(io=IoSettings(enabled=True, read_bps=50 << 20),
                              network=NetworkSettings(enabled=True, device="eth0"))
    n = 30 if quick else 200
    times = []
    for _ in range(n):
        t = time.perf_counter()
        again = plan(topo, pods, reclaim, previous=first.dedicated, resolver=resolver)
        plan_isolation(again, pods, reclaim, disks, 20.0, iso_s)
        topology_status(topo, again, pods, reclaim)
        times.append(time.perf_counter() - t)
    assert again == first, "plan is not stable"
    return {"n": n, "median_ms": statistics.median(times) * 1000, "p95_ms": _p95(times) * 1000,
            "dedicated": len(first.dedicated), "refused": len(first.refused),
            "pools": {k: len(v) for k, v in first.pools.items()}}


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def _pods_50_objs(node: str) -> list[dict]:
    from node_enforcer.podspec import make_pod_obj

    objs = []
    for i in range(50):
        if i == 0:  # one dedicated pod: on a 2-cpu machine that is all the exclusive room there is
            o = make_pod_obj("db-0", "dedicated_cores", cpu="1", memory="16Mi", limit_cpu="1", limit_memory="16Mi",
                             node=node)
        elif i < 35:
            o = make_pod_obj(f"web-{i}", cpu="20m", memory="16Mi", node=node, k8s_qos="Burstable")
        else:
            o = make_pod_obj(f"batch-{i}", "reclaimed_cores", limit_memory="64Mi", node=node, k8s_qos="BestEffort",
                             mem_enh={"oom_priority": -100})
        objs.append(o)
    return objs


class _CnrStub:
    """Stands in for the API in the timed passes: records writes (an unchanged report makes none)."""

    def __init__(self) -> None:
        self.writes = 0

    def get_cnr(self, name: str) -> dict | None:
        return None

    def create_cnr(self, name: str) -> None:
        self.writes += 1

    def patch_cnr_status(self, name: str, status: dict) -> None:
        self.writes += 1


@contextmanager
def _veth() -> Iterator[str]:
    """A throw-away veth pair for the HTB tree (deleted on exit)."""
    dev = f"twb{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", dev, "type", "veth", "peer", "name", f"twc{os.getpid() % 100000}"],
                   check=True, capture_output=True, timeout=10)
    try:
        yield dev
    finally:
        subprocess.run(["ip", "link", "del", dev], capture_output=True, timeout=10)


def _bench_agent(tree, tmp: str, node: str, pods_file: str, dev: str, cnr: _CnrStub):
    import datetime as dt

    from contracts.reclaim import ReclaimPlan
    from node_enforcer.agent import Agent
    from node_enforcer.collect.devices import read_block_devices
    from node_enforcer.collect.pods import read_pods_file
    from node_enforcer.collect.topology import read_topology
    from node_enforcer.enforce.cnr import CnrPublisher
    from node_enforcer.enforce.evictor import Evictor
    from node_enforcer.enforce.files import HostFiles
    from node_enforcer.enforce.tc import Tc
    from node_enforcer.policy.allocation import PolicySettings
    from node_enforcer.policy.eviction import EvictionSettings
    from node_enforcer.policy.io import IoSettings
    from node_enforcer.policy.network import NetworkSettings
    from node_enforcer.settings import EnforcerSettings

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    reclaim = ReclaimPlan(node, now, 3600, 1000, 1 << 30, 100)
    s = EnforcerSettings(node=node, checkpoint=os.path.join(tmp, "ck.json"), cgroup_parent=dict(tree.parents),
                         policy=PolicySettings(reserved_cpus=0, reclaim_floor_cpus=1),
                         io=IoSettings(enabled=True, read_bps=50 << 20),
                         network=NetworkSettings(enabled=True, device=dev, link_bit_rate=10**9,
                                                 reclaimed_bit_rate=10**8))
    return Agent(s, read_topology("/sys"), lambda: read_pods_file(pods_file, node), tree.driver(), HostFiles(),
                 reclaim=lambda: reclaim, evictor=Evictor(EvictionSettings()), devices=read_block_devices("/sys")[0],
                 tc=Tc(), cnr=CnrPublisher(cnr, node))


def bench_reconcile_and_rss(quick: bool) -> dict:
    from node_enforcer.collect.pods import pods_from_objects
    from testsupport.realcgroups import RealTree

    out: dict = {}
    node = "bench-node"
    objs = _pods_50_objs(node)
    pods = pods_from_objects(objs, node)
    with tempfile.TemporaryDirectory() as tmp, _veth() as dev, \
            RealTree(1, "cgroupfs", controllers=("cpuset", "cpu", "memory", "blkio")) as tree:
        for p in pods:
            tree.add_pod(p)
        pods_file = os.path.join(tmp, "pods.json")
        with open(pods_file, "w") as fh:
            json.dump({"kind": "PodList", "apiVersion": "v1", "items": objs}, fh)
        cnr = _CnrStub()
        agent = _bench_agent(tree, tmp, node, pods_file, dev, cnr)
        first = agent.reconcile_once()
        assert not first.report.errors and not first.report.missing, first.report.summary()
        out["first_writes"], out["cnr_writes_first"] = len(first.report.changes), cnr.writes
        n = 20 if quick else 100
        times, writes = [], 0
        steps: dict[str, list[float]] = {}
        for _ in range(n):
            t = time.perf_counter()
            res = agent.reconcile_once()
            times.append(time.perf_counter() - t)
            writes += len(res.report.changes) + int(res.checkpoint_written)
            for k, v in res.timings.items():
                steps.setdefault(k, []).append(v)
        out.update(n=n, median_ms=statistics.median(times) * 1000, p95_ms=_p95(times) * 1000,
                   noop_writes=writes + cnr.writes - out["cnr_writes_first"],
                   steps_ms={k: statistics.median(v) * 1000 for k, v in steps.items()})
        isolation = ["--io-limits", "--io-read-bps", "50Mi", "--net-device", dev, "--net-link-rate", "1Gbit",
                     "--net-reclaimed-rate", "100Mbit"]
        out["rss_file_mib"] = _agent_rss(tmp, node, tree, ["--pods-from", "file", "--pods", pods_file, *isolation],
                                         quick)
        out["rss_api_mib"] = _agent_rss_api(tmp, node, tree, objs, quick, [*isolation, "--report-topology"])
    return out


def _agent_rss(tmp: str, node: str, tree, extra: list[str], quick: bool, env: dict | None = None) -> float:
    import yaml

    cfg = os.path.join(tmp, "tw.yaml")
    with open(cfg, "w") as fh:
        yaml.safe_dump({"enforcer": {"cgroup_parent": dict(tree.parents), "reserved_cpus": 0,
                                     "reclaim_floor_cpus": 1}}, fh)
    cmd = [os.path.join(os.path.dirname(sys.executable), "tidewise"), "--config", cfg, "enforce", "--node", node,
           "--cgroup-root", "/sys/fs/cgroup", "--cgroup-version", "1", "--checkpoint", os.path.join(tmp, "ck2.json"),
           "--interval", "0.2", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        time.sleep(6 if quick else 10)  # many reconcile passes at 0.2 s (start-up alone takes seconds on a busy machine)
        if proc.poll() is not None:
            raise RuntimeError(f"agent exited: {proc.stderr.read().decode()[-500:] if proc.stderr else ''}")
        with open(f"/proc/{proc.pid}/status") as fh:
            status = dict(line.split(":", 1) for line in fh if ":" in line)
        return int(status["VmHWM"].split()[0]) / 1024
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _agent_rss_api(tmp: str, node: str, tree, objs: list[dict], quick: bool, extra: list[str]) -> float:
    import yaml

    from testsupport.kube_fake import FakeApiServer

    with FakeApiServer.of_node(objs) as fake:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        with open(kubeconfig, "w") as fh:
            yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                            "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
                            "users": [{"name": "u", "user": {"token": "t"}}],
                            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}]}, fh)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        rss = _agent_rss(tmp, node, tree, ["--pods-from", "api", "--kubeconfig", kubeconfig, *extra], quick, env=env)
        assert any(r.path == "/api/v1/pods" for r in fake.requests), "the agent never listed pods"
        cnrs = fake.objects_of("CustomNodeResource")
        assert node in cnrs and cnrs[node].get("status"), "the agent never published its topology"
    return rss


def run(quick: bool) -> str:
    p = bench_plan(quick)
    r = bench_reconcile_and_rss(quick)

    def ok(v: float, target: float) -> str:
        return "yes" if v <= target else "**no**"

    rows = [
        ("plan + isolation + topology report, 200 pods, 4-NUMA 128-thread fixture (median of %d)" % p["n"], f"{p['median_ms']:.2f} ms",
         f"p95 {p['p95_ms']:.2f} ms", "≤ 20 ms", ok(p["median_ms"], 20)),
        ("no-op reconcile, 50 pods, real cgroup v1 (median of %d)" % r["n"], f"{r['median_ms']:.2f} ms",
         f"p95 {r['p95_ms']:.2f} ms; {r['noop_writes']} writes", "≤ 50 ms", ok(r["median_ms"], 50)),
        ("agent peak RSS, `--pods-from file --io-limits --net-device`", f"{r['rss_file_mib']:.1f} MiB", "VmHWM",
         "≤ 80 MiB", ok(r["rss_file_mib"], 80)),
        ("agent peak RSS, `--pods-from api` (kubernetes client) `--report-topology` too", f"{r['rss_api_mib']:.1f} MiB",
         "VmHWM", "≤ 80 MiB", ok(r["rss_api_mib"], 80)),
    ]
    lines = ["## Node enforcer\n", __doc__.split("\n\n", 1)[1].strip() + "\n",
             "| measure | result | detail | target | met |", "|---|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows]
    lines.append("")
    lines.append(f"Plan: {p['dedicated']} dedicated pods placed, {p['refused']} refused, pool sizes (threads) "
                 f"{p['pools']}. Reconcile: the first pass wrote {r['first_writes']} values; "
                 "median per step: " + ", ".join(f"{k} {v:.2f} ms" for k, v in r["steps_ms"].items()) + ". "
                 f"Load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (timings on a shared "
                 "machine are upper bounds).\n")
    return "\n".join(lines)


if __name__ == "__main__":
    print(run("--quick" in sys.argv))
