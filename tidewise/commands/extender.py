"""`tidewise extender` — the kube-scheduler extender: filter and prioritize by reclaimable resources,
NUMA topology and the nodes' forecasts."""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any, NoReturn

HELP = """\
Answer kube-scheduler's extender calls (k8s.io/kube-scheduler/extender/v1) over HTTP:
  POST /filter      drop nodes where a reclaimed pod's reclaimed_millicpu/reclaimed_memory request does
                    not fit the node's reclaim plan (missing or expired plan: does not fit), and where a
                    NUMA-bound dedicated pod finds no free NUMA node in the topology the node agents report
  POST /prioritize  score nodes 0..10 by the headroom the node's forecast (tidewise.io/node-forecast,
                    written by `tidewise serve`) leaves over the pod's expected lifetime
  GET  /explain?pod=NS/NAME   why each node was filtered or scored as it was
  GET  /metrics, /healthz     Prometheus metrics; 200 once Nodes are listed
Watches Nodes and CustomNodeResources (nodeCacheCapable: true works; false too). Writes nothing.
Deployment and the KubeSchedulerConfiguration: deploy/scheduler-extender.yaml.
"""

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("extender", help="kube-scheduler extender: place pods by reclaimable room, NUMA and forecast",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", default="127.0.0.1:8888", metavar="HOST:PORT",
                   help="address to serve on (default 127.0.0.1:8888: this machine only; deploy/scheduler-extender.yaml "
                        "gives 0.0.0.0:8888 for the scheduler's pods; port 0 picks a free one and prints it)")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--cluster-state", metavar="FILE",
                   help="read Nodes and CustomNodeResources once from this YAML/JSON instead of watching the API")
    p.add_argument("--no-node-cache", action="store_true",
                   help="do not watch Nodes (only for nodeCacheCapable: false, where the scheduler sends them)")
    p.add_argument("--no-topology", action="store_true",
                   help="do not watch CustomNodeResources (no Katalyst CRD; without it the list keeps failing): "
                        "NUMA-bound dedicated pods then fit nowhere")
    p.add_argument("--stale-after", default="120", metavar="SECONDS",
                   help="a cache whose watch has failed this long is not used (default 120: fail closed)")
    p.add_argument("--explain-pods", default="256", metavar="N", help="pods whose reasons /explain keeps (default 256)")
    p.add_argument("--max-body-mib", default="4", metavar="MIB",
                   help="largest request body, refused with 413 unread (default 4: names of any cluster, or "
                        "~1,200 whole Nodes with nodeCacheCapable: false)")
    p.add_argument("--max-nodes", default="5000", metavar="N", help="most candidate nodes in one call (default 5000)")
    p.add_argument("--client-timeout", default="10", metavar="SECONDS",
                   help="longest wait on a client's read; a request must arrive within twice it (default 10)")
    p.add_argument("--workers", default="4", metavar="N", help="requests answered at once (default 4)")
    p.add_argument("--max-connections", default="256", metavar="N",
                   help="connections open at once; past it 503 (default 256)")
    p.set_defaults(func=run)

    def one_line(message: str) -> NoReturn:  # argparse's usage block is noise for one wrong flag value
        print(f"tidewise extender: error: {message} (see `tidewise extender --help`)", file=sys.stderr)
        raise SystemExit(2)

    p.error = one_line  # type: ignore[method-assign]
    whole = p.parse_known_args

    def strict(args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        # an unknown flag would otherwise reach the top-level parser, which prints its usage block too
        ns, extra = whole(args, namespace)
        if extra:
            one_line(f"unrecognized arguments: {' '.join(extra)}")
        return ns, extra

    p.parse_known_args = strict  # type: ignore[method-assign]


def _listen(text: str) -> tuple[str, int]:
    from contracts.errors import InputError

    from contracts.http_endpoint import parse_listen_address

    try:
        return parse_listen_address(text)
    except ValueError as exc:
        raise InputError(f"--listen {exc}") from None


def _number(flag: str, text: str, low: float) -> float:
    from contracts.errors import InputError

    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value >= low and value < float("inf")):
        raise InputError(f"{flag} {text!r}: expected a finite number of at least {low:g}")
    return value


def _state_source(path: str) -> Any:
    """Nodes and CNRs read once from a file (a StaticSource)."""
    from extender.nodes import StaticSource
    from autoscaler.input.cluster import read_objects

    objects = read_objects(path)
    kinds = {k: [o for o in objects if isinstance(o, dict) and o.get("kind") == k] for k in ("Node", "CustomNodeResource")}
    return StaticSource(kinds["Node"], kinds["CustomNodeResource"])


def _limits(args: argparse.Namespace) -> Any:
    from extender.limits import Limits

    return Limits(max_body_bytes=int(_number("--max-body-mib", args.max_body_mib, 0.001) * 2**20),
                  max_nodes=int(_number("--max-nodes", args.max_nodes, 1)),
                  client_timeout=_number("--client-timeout", args.client_timeout, 0.1),
                  workers=int(_number("--workers", args.workers, 1)),
                  max_connections=int(_number("--max-connections", args.max_connections, 1)))


def run(args: argparse.Namespace) -> int:
    from extender.server import ExtenderServer
    from extender.service import Extender

    host, port = _listen(args.listen)
    stale_after = _number("--stale-after", args.stale_after, 1)
    explain_pods = int(_number("--explain-pods", args.explain_pods, 0))
    limits = _limits(args)
    watched = None
    if args.cluster_state:
        source = _state_source(args.cluster_state)
    else:
        from extender.nodes import StaticSource, WatchedSource
        from autoscaler.kube import Kube

        kube = Kube.from_config(args.kubeconfig)
        if args.no_topology and args.no_node_cache:
            source = StaticSource()
        else:
            watched = WatchedSource(kube, stale_after=stale_after, watch_nodes=not args.no_node_cache,
                                    watch_topology=not args.no_topology).start()
            source = watched
    extender = Extender(source, explain_pods=explain_pods, limits=limits)
    ready = (lambda: True) if watched is None else watched.ready
    try:
        server = ExtenderServer((host, port), extender, ready, limits)
    except OSError as exc:
        from contracts.errors import SourceError

        raise SourceError(f"--listen {args.listen}: cannot listen ({exc.strerror or exc})") from None
    print(f"tidewise extender: listening on {server.url} (filter, prioritize, explain, metrics, healthz)", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # a rolling update stops it cleanly
    server.start()
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        if watched is not None:
            watched.stop()
    return 0
