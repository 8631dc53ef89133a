"""`tidewise simulate rebalance` — hot nodes with no rebalancing, a reactive descheduler and Tidewise's
forecast rebalancing, on real traces.

Registered by `tidewise/commands/simulate.py` (one of the `simulate` command's simulations)."""
from __future__ import annotations

import argparse
import json
import os
import sys

HELP = """\
Simulate rebalancing of hot nodes on a cluster whose online services replay real traces.

N nodes (32 cores each) host the colocation simulator's online services, with requests sized below
their peaks (--headroom), so that nodes run hot at their tides. Every --interval minutes each policy
plans moves with the serving loop's own choice (autoscaler/logic/rebalance.py): none; reactive
(current usage, as Koordinator's LowNodeLoad; also requiring 3 or 5 hot checks in a row); tidewise
(the forecast peak over the next 2 h, forecasts made every 6 h from the past only). Per setting:
node-minutes above 80% of allocatable, above 100%, and pods moved. Writes DIR/results.json.
"""


def register_rebalance(inner: argparse._SubParsersAction) -> None:
    c = inner.add_parser("rebalance", help="moving pods off hot nodes, reactive vs forecast (issue 16)",
                         description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--traces", default=os.path.join("..", "shared", "data"), metavar="DIR",
                   help="folder of real traces laid out like ../shared/data (default ../shared/data)")
    c.add_argument("--nodes", type=int, default=20, metavar="N", help="nodes of 32 cores (default 20)")
    c.add_argument("--days", type=int, default=3, help="simulated days: each trace's last whole days (default 3)")
    c.add_argument("--seed", type=int, default=0, help="seed of the cluster")
    c.add_argument("--policy", default="all", choices=["all", "none", "reactive", "tidewise"],
                   help="which policy to run, with its sweep (default all)")
    c.add_argument("--headroom", default="0.5,0.8", metavar="LO,HI",
                   help="requests = history peak x U(LO, HI) (default 0.5,0.8; the colocation study's 1.0,1.3 "
                        "leaves hardly a hot node)")
    c.add_argument("--interval", type=int, default=5, metavar="MIN", help="minutes between decisions (default 5)")
    c.add_argument("--out", default="rebalance-out", metavar="DIR",
                   help="output folder, created if missing (its parent must exist; default rebalance-out)")
    c.add_argument("--forecast-model", default="auto",
                   help="forecasting model for tidewise: auto (chosen per series, default) or one model name")
    c.add_argument("--no-sweeps", action="store_true", help="run each policy's default setting only")
    c.add_argument("--no-cache", action="store_true",
                   help="do not read or write DIR/forecast-cache (the traces' forecasts, keyed by traces and model)")


def _headroom(text: str) -> tuple[float, float]:
    from contracts.errors import InputError

    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"--headroom {text!r}: two numbers, LO,HI (e.g. 0.5,0.8)") from None
    return lo, hi


def run_rebalance(args: argparse.Namespace) -> int:
    from contracts.errors import InputError
    from predictor.atomic import write_text_atomic
    from predictor.models import MODELS
    from studies.simulation.rebalance import RebalanceStudySettings, check, run_rebalance_study
    from tidewise.paths import prepare_output_dir

    if args.forecast_model != "auto" and args.forecast_model not in MODELS:
        raise InputError(f"--forecast-model {args.forecast_model!r}: use auto or one of {sorted(MODELS)}")
    s = RebalanceStudySettings(traces=args.traces, nodes=args.nodes, days=args.days, seed=args.seed,
                               headroom=_headroom(args.headroom), interval=args.interval,
                               forecast_model=args.forecast_model,
                               cache_dir=None if args.no_cache else os.path.join(args.out, "forecast-cache"))
    check(s)
    if not os.path.isdir(args.traces):
        raise InputError(f"--traces {args.traces}: no such directory (the real traces live in ../shared/data)")
    prepare_output_dir(args.out)  # before the simulation, not after
    print(f"simulating {args.nodes} nodes x {args.days} days (forecasting the traces first) ...", file=sys.stderr)
    result = run_rebalance_study(s, policy=args.policy, sweeps=not args.no_sweeps)
    path = os.path.join(args.out, "results.json")
    write_text_atomic(path, json.dumps(result, indent=2) + "\n")
    print(f"{result['services']} services from {result['traces']} traces, {result['node_minutes']} node-minutes",
          file=sys.stderr)
    for label, r in result["policies"].items():
        print(f"  {label:30s} hot {r['node_minutes_hot']:6d} node-min ({100 * r['hot_share']:.3f}%)  saturated "
              f"{r['node_minutes_saturated']:5d}  pods moved {r['pods_moved']:4d} ({r['moves_per_day']:.1f}/day)",
              file=sys.stderr)
    print(f"wrote {path}", file=sys.stderr)
    return 0
