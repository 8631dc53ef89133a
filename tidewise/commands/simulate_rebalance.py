"""`tidewise simulate rebalance` — hot nodes with no rebalancing, a reactive descheduler and Tidewise's
forecast rebalancing, on real traces.

Registered by `tidewise/commands/simulate.py` (one of the `simulate` command's simulations)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from tidewise.commands.study_args import add_study_args, cache_dir, check_study_args, check_traces, source_settings

HELP = """\
Simulate rebalancing of hot nodes on a cluster whose online services replay real traces.

N nodes (32 cores each) host the colocation simulator's online services, with requests sized below
their peaks (--headroom), so that nodes run hot at their tides. Every --interval minutes each policy
plans moves with the serving loop's own choice (autoscaler/logic/rebalance.py): none; reactive
(current usage, as Koordinator's LowNodeLoad; also requiring 3 or 5 hot checks in a row); tidewise
(the forecast peak over the next 2 h, forecasts made every 6 h from the past only). Per setting:
node-minutes above 80% of allocatable, above 100%, and pods moved. With --history FILE (what
`tidewise fetch` wrote) the services are your workloads' pods instead, on the nodes a `node` label
column names where the file has one. Writes DIR/results.json.
"""


def register_rebalance(inner: argparse._SubParsersAction) -> None:
    c = inner.add_parser("rebalance", help="moving pods off hot nodes, reactive vs forecast",
                         description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_args(c, nodes=20, nodes_help="nodes of 32 cores", days=3, seed_help="seed of the cluster",
                   policies=["none", "reactive", "tidewise"], out="rebalance-out", model_help="chosen per series",
                   cache_help="the traces' forecasts, keyed by traces and model")
    c.add_argument("--headroom", default="0.5,0.8", metavar="LO,HI",
                   help="requests = history peak x U(LO, HI) (default 0.5,0.8; the colocation study's 1.0,1.3 "
                        "leaves hardly a hot node)")
    c.add_argument("--interval", type=int, default=5, metavar="MIN", help="minutes between decisions (default 5)")


def _headroom(text: str) -> tuple[float, float]:
    from contracts.errors import InputError

    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"--headroom {text!r}: two numbers, LO,HI (e.g. 0.5,0.8)") from None
    return lo, hi


def run_rebalance(args: argparse.Namespace) -> int:
    from contracts.atomic import write_text_atomic
    from studies.simulation.harness.cluster import ClusterSettings
    from studies.simulation.harness.history import read_history
    from studies.simulation.rebalance.study import RebalanceStudySettings, check, run_rebalance_study
    from tidewise.paths import prepare_output_dir
    from tidewise.progress import progress

    check_study_args(args)
    s = RebalanceStudySettings(**source_settings(args), nodes=args.nodes, days=args.days, seed=args.seed,
                               headroom=_headroom(args.headroom), interval=args.interval,
                               forecast_model=args.forecast_model,
                               cache_dir=cache_dir(args))
    check(s)
    check_traces(args)
    history = read_history(s, ClusterSettings(nodes=s.nodes, headroom=s.headroom), min_nodes=2)  # before the folder
    prepare_output_dir(args.out)  # before the simulation, not after
    print(f"simulating {'the nodes that hold ' + args.history if s.fit_nodes else str(args.nodes) + ' nodes'} x "
          f"{args.days} days (forecasting the {'workloads' if args.history else 'traces'} first) ...", file=sys.stderr)
    result = run_rebalance_study(s, policy=args.policy, sweeps=not args.no_sweeps, history=history, progress=progress)
    path = os.path.join(args.out, "results.json")
    write_text_atomic(path, json.dumps(result, indent=2) + "\n")
    source = f"workloads in {args.history}" if args.history else "traces"
    print(f"{result['services']} services from {result['traces']} {source} on {result['nodes']} nodes, "
          f"{result['node_minutes']} node-minutes", file=sys.stderr)
    for label, r in result["policies"].items():
        print(f"  {label:30s} hot {r['node_minutes_hot']:6d} node-min ({100 * r['hot_share']:.3f}%)  saturated "
              f"{r['node_minutes_saturated']:5d}  pods moved {r['pods_moved']:4d} ({r['moves_per_day']:.1f}/day)",
              file=sys.stderr)
    print(f"wrote {path}", file=sys.stderr)
    return 0
