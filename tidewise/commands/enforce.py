"""`tidewise enforce` — the node agent: QoS pools, NUMA binding, memory caps and eviction on cgroups."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from node_enforcer.agent import Agent
    from node_enforcer.enforce.cgroups import CgroupDriver
    from node_enforcer.kube import KubeApi
    from node_enforcer.metrics import EnforcerMetrics, MetricsServer
    from node_enforcer.model.topology import Topology
    from node_enforcer.settings import EnforcerSettings

HELP = """\
Turn this node's pods (Katalyst QoS annotations) and the reclaim plan into cgroup settings:
a reserve pool for system pods, exclusive whole cores for dedicated pods (NUMA-bound when asked),
a share pool sized by the shared pods' (forecast) demand, and a reclaim pool for batch pods with
CPU quota, lowest weight and a memory cap. Writes only what differs (old -> new in the log),
checkpoints the allocation, and evicts reclaimed pods first under memory pressure (dry-run unless
--evict). With --once it reconciles one time and prints the plan; otherwise it loops.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("enforce", help="node agent: enforce QoS pools, NUMA binding and memory caps on cgroups",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--once", action="store_true", help="reconcile one time, print the plan and exit")
    p.add_argument("--dry-run", action="store_true", default=None,
                   help="write nothing (cgroups, checkpoint, evictions): print the diff instead")
    p.add_argument("--node", help="this node's name (default: settings enforcer.node, then $NODE_NAME)")
    p.add_argument("--pods-from", choices=["kubelet", "api", "file"],
                   help="where the pods come from (default kubelet: GET <kubelet-url>/pods)")
    p.add_argument("--pods", metavar="FILE", help="with --pods-from file: a PodList, list of pods or pod (JSON/YAML)")
    p.add_argument("--kubelet-url", help="default https://127.0.0.1:10250")
    p.add_argument("--kubelet-ca", metavar="FILE", help="CA bundle for the kubelet's serving certificate")
    p.add_argument("--kubeconfig", metavar="FILE", help="for --pods-from api and evictions outside a cluster")
    p.add_argument("--sysfs-root", metavar="DIR", help="folder that holds /sys (default /sys)")
    p.add_argument("--cgroup-root", metavar="DIR", help="cgroup mount (default /sys/fs/cgroup)")
    p.add_argument("--cgroup-driver", choices=["cgroupfs", "systemd"], help="the kubelet's cgroup driver (default cgroupfs)")
    p.add_argument("--cgroup-version", choices=["1", "2", "auto"], help="default auto: 2 when the root is unified")
    p.add_argument("--cgroup-parent", metavar="PATH", help="folder under each hierarchy holding kubepods (default none)")
    p.add_argument("--proc-root", metavar="DIR", help="default /proc (oom_score_adj, meminfo, PSI)")
    p.add_argument("--reclaim-plan", metavar="FILE", help="this node's plan offline: the tidewise.io/reclaim-plan "
                   "annotation's JSON as serve writes it, or the Node (YAML/JSON) carrying it, e.g. recommendations/"
                   "node/<node>.yaml of `serve --sink file` or `tidewise demo`; a malformed file exits 2")
    p.add_argument("--reclaim-plan-from", choices=["api", "file", "none"],
                   help="api: this Node's tidewise.io/reclaim-plan annotation, written by `tidewise serve --apply`; "
                        "file: --reclaim-plan (default when given); none. A missing, malformed or expired plan "
                        "reclaims nothing beyond the floor")
    p.add_argument("--checkpoint", metavar="FILE", help="default /var/lib/tidewise/enforcer-checkpoint.json")
    p.add_argument("--plan-out", metavar="FILE", help="write the plan, diff and evictions as JSON (atomically)")
    p.add_argument("--interval", type=float, metavar="SECONDS", help="reconcile period (default 5)")
    p.add_argument("--evict", action="store_true", default=None,
                   help="really evict under memory pressure (default: Eviction API with dryRun=All)")
    p.add_argument("--no-eviction", action="store_true", help="do not check memory pressure at all")
    p.add_argument("--no-watch", action="store_true",
                   help="with the API: list the pods and get the Node every pass instead of listing once and "
                        "then watching (the default when looping; --once always lists)")
    p.add_argument("--metrics-port", type=int, metavar="N",
                   help="serve /metrics and /healthz on this port while looping (default: none; the DaemonSet: 9107)")
    p.add_argument("--metrics-address", default="127.0.0.1", metavar="ADDR",
                   help="address the metrics port listens on (default 127.0.0.1; the DaemonSet: 0.0.0.0)")
    _register_isolation(p)
    p.set_defaults(func=run)


def _register_isolation(p: argparse.ArgumentParser) -> None:
    """Disk I/O, network, reclaimed-root memory and topology-report flags (settings `io:`, `network:`)."""
    g = p.add_argument_group("batch isolation (reclaimed_cores pods) and the topology report")
    g.add_argument("--io-limits", action="store_true", default=None,
                   help="limit reclaimed pods' disk I/O (io.max / blkio.throttle.*), harder under online I/O PSI")
    for key, what in (("read-bps", "bytes/s, e.g. 50Mi"), ("write-bps", "bytes/s"), ("read-iops", "IOPS"),
                      ("write-iops", "IOPS")):
        g.add_argument(f"--io-{key}", metavar="N", help=f"static per-pod, per-device limit ({what})")
    g.add_argument("--io-device", action="append", metavar="NAME",
                   help="also limit this /sys/block device even if virtual (repeatable; default: physical disks)")
    g.add_argument("--io-psi-path", metavar="FILE", help="online I/O pressure (default <proc-root>/pressure/io)")
    g.add_argument("--net-device", metavar="DEV", help="shape egress on this uplink (HTB): caps reclaimed pods")
    g.add_argument("--net-link-rate", metavar="RATE", help="the uplink's speed, e.g. 10Gbit (default 10Gbit)")
    g.add_argument("--net-reclaimed-rate", metavar="RATE", help="reclaimed pods' egress cap, e.g. 1Gbit")
    g.add_argument("--net-classifier", choices=["priority", "classid"],
                   help="v1 net_prio.ifpriomap (default) or net_cls.classid + a tc cgroup filter")
    g.add_argument("--no-reclaimed-root-memory", action="store_true",
                   help="do not cap the QoS cgroup holding only batch pods (memory.max, memory.high)")
    g.add_argument("--reclaimed-root-high-ratio", type=float, metavar="F",
                   help="memory.high of the reclaimed root as a fraction of its cap (default 0.95, Katalyst's)")
    g.add_argument("--report-topology", action="store_true", default=None,
                   help="publish sockets/NUMA nodes on this node's Katalyst CustomNodeResource (status.topologyZone)")


def read_settings(section: dict[str, Any] | None, evict: bool | None = None, io: dict[str, Any] | None = None,
                  network: dict[str, Any] | None = None, **flags: Any) -> "EnforcerSettings":
    """The `enforcer:` section with the flags over it (None = not given). The policy's, the
    eviction's, the I/O's and the network's settings are nested sub-sections (`io`/`network` hold
    their flags); older files put the policy's and eviction's keys flat (still read)."""
    from contracts.errors import InputError
    from node_enforcer.policy.allocation import PolicySettings
    from node_enforcer.policy.eviction import EvictionSettings
    from node_enforcer.policy.io import IoSettings
    from node_enforcer.policy.network import NetworkSettings
    from node_enforcer.settings import EnforcerSettings, nest_section
    from tidewise.config import settings_from

    nested = nest_section(section, evict=evict)
    for name in ("io", "network"):
        if nested.get(name) is not None and not isinstance(nested[name], dict):
            raise InputError(f"config section 'enforcer': {name} must be a mapping of keys, not "
                             f"{type(nested[name]).__name__}")
    io_s = settings_from(IoSettings, nested.get("io"), "enforcer.io", **(io or {}))
    net_s = settings_from(NetworkSettings, nested.get("network"), "enforcer.network", **(network or {}))
    io_s.check()
    net_s.check()
    io_s = dataclasses.replace(io_s, devices=tuple(io_s.devices), exclude_devices=tuple(io_s.exclude_devices))
    ratio = flags.get("reclaimed_root_memory_high_ratio") or (section or {}).get("reclaimed_root_memory_high_ratio", 0.95)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise InputError(f"enforcer.reclaimed_root_memory_high_ratio {ratio!r}: give a fraction in (0, 1]")
    return settings_from(
        EnforcerSettings, {k: v for k, v in nested.items() if k not in ("policy", "eviction", "io", "network")},
        "enforcer", policy=settings_from(PolicySettings, nested.get("policy"), "enforcer.policy"),
        eviction=settings_from(EvictionSettings, nested.get("eviction"), "enforcer.eviction"), io=io_s,
        network=net_s, **flags)


def _quantity(flag: str, value: str | None, rate: bool) -> int | None:
    """A --io-*/--net-*-rate value: bytes (50Mi) or IOPS, or bit/s (1Gbit, 500Mbit, or a plain integer)."""
    from contracts.errors import InputError
    from contracts.quantity import parse_memory_bytes
    from node_enforcer.enforce.tc import parse_rate

    if value is None:
        return None
    try:
        n = int(value) if value.isdigit() else parse_rate(value) if rate else (
            parse_memory_bytes(value) if flag.endswith("bps") else int(value))
    except ValueError:
        n = 0
    if n <= 0:
        raise InputError(f"--{flag} {value!r}: give a positive " + ("rate like 1Gbit or 500Mbit" if rate else
                         "quantity like 50Mi" if flag.endswith("bps") else "integer"))
    return n


def run(args: argparse.Namespace) -> int:
    """Check every input first (exit 2 before any cgroup is written), then reconcile once or loop."""
    from node_enforcer.agent import Agent
    from node_enforcer.collect.reclaim import load_reclaim_plan
    from node_enforcer.collect.topology import read_topology

    s = _settings(args)
    node, plan_from = _node_and_plan_source(s)
    _check_metrics_flags(args)
    _check_paths(s, args.plan_out)
    topo = read_topology(s.sysfs_root)
    driver = _driver(s)
    kube = _kube_api(s, node, plan_from, args.kubeconfig)
    watch = not args.once and not getattr(args, "no_watch", False)
    list_pods = _pod_lister(s, node, kube, watch)
    if plan_from == "file" and s.reclaim_plan and (args.once or os.path.exists(s.reclaim_plan)):
        load_reclaim_plan(s.reclaim_plan, node)  # a bad file exits 2 now; in the loop a stale plan reclaims 0
    writer, reclaim, evictor = _enforcement(s, node, plan_from, kube, watch, topo)
    metrics, server = _metrics(args, s, node)
    agent = Agent(s, topo, list_pods, driver, writer, reclaim, evictor, **_isolation(s, node, kube), metrics=metrics)
    if not args.once:
        print(f"tidewise enforce: node {node}, {topo.summary()}, cgroup v{driver.version} ({s.cgroup_driver}) "
              f"at {s.cgroup_root}, every {s.interval_seconds:g} s{' (dry-run)' if s.dry_run else ''}"
              + (f", metrics on {server.host}:{server.port}" if server else ""), file=sys.stderr)
        try:
            agent.run_until_signalled()  # SIGTERM finishes the pass under way, then exit 0
        finally:
            if server is not None:
                server.stop()
        return 0
    return _reconcile_once(agent, s, node, topo.summary(), driver.version, args.plan_out)


def _check_metrics_flags(args: argparse.Namespace) -> None:
    from contracts.errors import InputError
    from contracts.http_endpoint import check_host

    try:
        check_host(args.metrics_address.strip("[]"))
    except ValueError as exc:
        raise InputError(f"--metrics-address {exc}: give an address of this host, for example 127.0.0.1 or 0.0.0.0") \
            from None
    if args.metrics_port is None:
        return
    if not 1 <= args.metrics_port <= 65535:
        raise InputError(f"--metrics-port {args.metrics_port}: give a port 1-65535")
    if args.once:
        raise InputError("--metrics-port serves the loop's metrics, and --once exits after one pass: drop one of them")


def _metrics(args: argparse.Namespace, s: "EnforcerSettings",
             node: str) -> tuple["EnforcerMetrics | None", "MetricsServer | None"]:
    """The agent's metrics and their HTTP server, started (None, None without --metrics-port)."""
    if args.metrics_port is None:
        return None, None
    from contracts.errors import InputError
    from node_enforcer.metrics import EnforcerMetrics, MetricsServer

    metrics = EnforcerMetrics(node, memory_floor_bytes=s.policy.reclaimed_memory_floor_bytes,
                              interval_seconds=s.interval_seconds)
    try:
        server = MetricsServer(metrics, args.metrics_address, args.metrics_port)
    except OSError as exc:  # in use, or not an address of this host
        raise InputError(f"--metrics-port {args.metrics_port} on --metrics-address {args.metrics_address}: "
                         f"{exc.strerror or exc}; pick a free port or an address of this host") from None
    return metrics, server.start()


def _settings(args: argparse.Namespace) -> "EnforcerSettings":
    version = None if args.cgroup_version in (None, "auto") else int(args.cgroup_version)
    return read_settings(
        (args.settings or {}).get("enforcer"), evict=args.evict,
        node=args.node, pods_from=args.pods_from, pods_file=args.pods, kubelet_url=args.kubelet_url,
        kubelet_ca=args.kubelet_ca, sysfs_root=args.sysfs_root, cgroup_root=args.cgroup_root,
        cgroup_driver=args.cgroup_driver, cgroup_version=version, cgroup_parent=args.cgroup_parent,
        proc_root=args.proc_root, checkpoint=args.checkpoint, reclaim_plan=args.reclaim_plan,
        reclaim_plan_from=args.reclaim_plan_from, interval_seconds=args.interval, dry_run=args.dry_run,
        eviction_enabled=False if args.no_eviction else None,
        reclaimed_root_memory=False if args.no_reclaimed_root_memory else None,
        reclaimed_root_memory_high_ratio=args.reclaimed_root_high_ratio, report_topology=args.report_topology,
        io={k: v for k, v in {
            "enabled": args.io_limits, "devices": tuple(args.io_device) if args.io_device else None,
            "psi_path": args.io_psi_path, **{k.replace("-", "_"): _quantity(f"io-{k}", getattr(args, f"io_{k.replace('-', '_')}"), False)
                                            for k in ("read-bps", "write-bps", "read-iops", "write-iops")}}.items()
            if v is not None},
        network={k: v for k, v in {
            "enabled": True if args.net_device else None, "device": args.net_device,
            "link_bit_rate": _quantity("net-link-rate", args.net_link_rate, True),
            "reclaimed_bit_rate": _quantity("net-reclaimed-rate", args.net_reclaimed_rate, True),
            "classifier": args.net_classifier}.items() if v is not None},
    )


def _node_and_plan_source(s: "EnforcerSettings") -> tuple[str, str]:
    """This node's name and where the reclaim plan comes from (api, file or none), both checked."""
    from contracts.errors import InputError

    node = s.node or os.environ.get("NODE_NAME", "")
    if not node:
        raise InputError("--node is required (or settings enforcer.node, or $NODE_NAME)")
    if s.pods_from not in ("kubelet", "api", "file"):
        raise InputError(f"enforcer.pods_from {s.pods_from!r}: use kubelet, api or file")
    if s.cgroup_version not in (0, 1, 2):
        raise InputError(f"enforcer.cgroup_version {s.cgroup_version!r}: use 1, 2 or 0 (detect)")
    plan_from = s.reclaim_plan_from or ("file" if s.reclaim_plan else "none")
    if plan_from not in ("api", "file", "none"):
        raise InputError(f"enforcer.reclaim_plan_from {s.reclaim_plan_from!r}: use api, file or none")
    if plan_from == "file" and not s.reclaim_plan:
        raise InputError("--reclaim-plan-from file needs --reclaim-plan FILE")
    if s.pods_from == "file" and not s.pods_file:
        raise InputError("--pods-from file needs --pods FILE")
    return node, plan_from


def _check_paths(s: "EnforcerSettings", plan_out: str | None) -> None:
    """The output file, the cgroup mount and the checkpoint, checked before any cgroup is written."""
    from contracts.errors import InputError

    if plan_out:  # checked before any cgroup is written, not after
        from contracts.atomic import check_output_path

        check_output_path(plan_out, what="--plan-out")
    if not os.path.isdir(s.cgroup_root):
        raise InputError(f"--cgroup-root {s.cgroup_root}: no such folder")
    if not s.dry_run and s.checkpoint:
        from node_enforcer.enforce.checkpoint import path_problem

        if (problem := path_problem(s.checkpoint)) is not None:  # the agent checks each pass too
            raise InputError(f"--checkpoint {s.checkpoint}: {problem}")


def _driver(s: "EnforcerSettings") -> "CgroupDriver":
    from contracts.errors import InputError
    from node_enforcer.enforce.cgroups import make_driver

    try:
        return make_driver(s.cgroup_root, s.cgroup_driver, s.cgroup_version or None, s.cgroup_parent)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _kube_api(s: "EnforcerSettings", node: str, plan_from: str, kubeconfig: str | None) -> "KubeApi | None":
    """The Kubernetes API client, only when the pods, the plan or evictions need it; bound to `node`."""
    if not (s.pods_from == "api" or plan_from == "api" or s.report_topology
            or (s.eviction_enabled and s.pods_from != "file")):
        return None
    from kubernetes.config import ConfigException

    from contracts.errors import InputError
    from node_enforcer.kube import KubeApi

    if kubeconfig and not os.path.isfile(kubeconfig):
        raise InputError(f"--kubeconfig {kubeconfig}: no such file")
    try:
        return KubeApi(kubeconfig=kubeconfig, node=node)
    except ConfigException as exc:
        needs = "pods_from api" if s.pods_from == "api" else (
            "the reclaim plan from the API" if plan_from == "api" else
            "--report-topology" if s.report_topology else "eviction")
        raise InputError(f"{needs} needs the Kubernetes API, but there are no credentials ({exc}): run in a pod "
                         "with a service account, or give --kubeconfig FILE (or $KUBECONFIG)"
                         + ("; --no-eviction needs none" if needs == "eviction" else "")) from None


def _isolation(s: "EnforcerSettings", node: str, kube: "KubeApi | None") -> dict[str, Any]:
    """The agent's block devices (missing ones warned about), tc runner and CNR publisher."""
    from node_enforcer.collect.devices import read_block_devices
    from node_enforcer.enforce.cnr import CnrPublisher
    from node_enforcer.enforce.tc import Tc

    out: dict[str, Any] = {}
    if s.io.enabled:
        devices, problems = read_block_devices(s.sysfs_root, s.io.devices, s.io.exclude_devices)
        for problem in problems + ([] if devices else [f"no block device to limit under {s.sysfs_root}/block"]):
            print(f"warning: {problem}", file=sys.stderr)
        out["devices"] = devices
    if s.network.enabled:
        out["tc"] = Tc(dry_run=s.dry_run)
    if s.report_topology and kube is not None:
        out["cnr"] = CnrPublisher(kube, node, dry_run=s.dry_run)
    return out


def _pod_lister(s: "EnforcerSettings", node: str, kube: "KubeApi | None", watch: bool = False) -> Callable[[], Any]:
    from node_enforcer.collect.pods import KubeletPods, read_pods_file

    if s.pods_from == "file":
        pods_file = s.pods_file or ""
        read_pods_file(pods_file, node)  # fail now, with exit 2, on a bad file
        return lambda: read_pods_file(pods_file, node)
    if s.pods_from == "api" and watch:
        return kube.watched_pods(node)  # type: ignore[union-attr]
    if s.pods_from == "api":
        return lambda: kube.list_node_pods(node)  # type: ignore[union-attr]
    return lambda: KubeletPods(s.kubelet_url, verify=s.kubelet_ca or True).list(node)


def _enforcement(s: "EnforcerSettings", node: str, plan_from: str, kube: "KubeApi | None",
                 watch: bool = False, topo: "Topology | None" = None) -> tuple[Any, Any, Any]:
    """The file writer (dry-run or host), the reclaim-plan loader (a plan cut to the node's capacity)
    and the evictor (None when disabled)."""
    from node_enforcer.collect.reclaim import node_capacity, reclaim_loader
    from node_enforcer.enforce.evictor import Evictor
    from node_enforcer.enforce.files import DryRunFiles, HostFiles

    writer = DryRunFiles() if s.dry_run else HostFiles()
    ev_settings = s.eviction
    if s.dry_run:
        ev_settings = dataclasses.replace(ev_settings, dry_run=True)
    evictor = Evictor(ev_settings, kube, node=node) if s.eviction_enabled else None
    capacity = None if topo is None else node_capacity(topo, s.proc_root)
    if plan_from == "api":
        annotations = kube.watched_annotations(node) if watch else lambda: kube.node_annotations(node)  # type: ignore[union-attr]
        reclaim = reclaim_loader(None, node, annotations=annotations, capacity=capacity)
    else:
        reclaim = reclaim_loader(s.reclaim_plan if plan_from == "file" else None, node, capacity=capacity)
    return writer, reclaim, evictor


def _reconcile_once(agent: "Agent", s: "EnforcerSettings", node: str, topo_summary: str, cgroup_version: int,
                    plan_out: str | None) -> int:
    """One pass: print the plan, write --plan-out; exit 1 when a cgroup write failed."""
    from contracts.atomic import write_text_atomic
    from tidewise.commands.enforce_render import plan_doc, render

    res = agent.reconcile_once()
    if res.error or res.allocation is None or res.report is None:
        from contracts.errors import TidewiseError

        raise TidewiseError(res.error or "reconcile failed")
    print(render(node, topo_summary, res, bool(s.dry_run)))
    if plan_out:
        doc = plan_doc(res, node, topo_summary, cgroup_version, bool(s.dry_run))
        write_text_atomic(plan_out, json.dumps(doc, indent=1) + "\n")
        print(f"plan written to {plan_out}", file=sys.stderr)
    return 1 if res.report.errors else 0
