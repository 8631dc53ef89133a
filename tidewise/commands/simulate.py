"""`tidewise simulate colocation` — replay real traces on a simulated cluster under each policy."""
from __future__ import annotations

import argparse
import os
import sys

HELP = """\
Simulate colocation on a cluster whose online services replay real traces.

N nodes (32 cores each) host online services scaled from the traces in --traces, with requests
sized near their observed peak; online demand bursts inside each minute (--bursts, a model
estimated from the traces). Batch jobs arrive at a cluster queue (seeded) and each policy places
them. Every minute each policy sets the batch quota per node (applied one minute later); batch is
throttled to it and evicted when that is not enough. Policies: none, katalyst (reactive),
koordinator (threshold), tidewise (fast reactive quota, reserve from its forecast's uncertainty,
forecast-aware admission), each with its main knobs swept. Writes DIR/results.json,
DIR/details.json, DIR/report.html.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="simulate colocation policies on real traces",
                       description="Simulations. Run `tidewise simulate colocation --help`.")
    inner = p.add_subparsers(dest="simulation", metavar="SIMULATION", required=True)
    c = inner.add_parser("colocation", help="batch colocation on a simulated cluster (issue 6)",
                         description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--traces", default=os.path.join("..", "shared", "data"), metavar="DIR",
                   help="folder of real traces laid out like ../shared/data (default ../shared/data)")
    c.add_argument("--nodes", type=int, default=40, metavar="N", help="nodes of 32 cores (default 40)")
    c.add_argument("--policy", default="all", choices=["all", "none", "katalyst", "koordinator", "tidewise"],
                   help="which policy to run, with its sweep (default all)")
    c.add_argument("--out", default="simulation-out", metavar="DIR",
                   help="output folder, created if missing (its parent must exist; default simulation-out)")
    c.add_argument("--seed", type=int, default=0, help="seed of the cluster, the system noise and the batch queue")
    c.add_argument("--days", type=int, default=7, help="simulated days: each trace's last whole days (default 7)")
    c.add_argument("--bursts", default="calibrated", choices=["none", "calibrated", "high"],
                   help="online demand's peaks inside the minute: none, calibrated (estimated from the traces, "
                        "default) or high (as rough as uncorrelated demand)")
    c.add_argument("--forecast-model", default="auto",
                   help="forecasting model for tidewise: auto (chosen per series, default) or one model name")
    c.add_argument("--forecast-level", default="node", choices=["node", "service"],
                   help="tidewise forecasts each node's online demand (node, default) or every trace, summing "
                        "its services' quantiles per node as the serving loop sums pods' (service)")
    c.add_argument("--no-sweeps", action="store_true", help="run each policy's default setting only")
    c.add_argument("--no-cache", action="store_true",
                   help="do not read or write DIR/forecast-cache (daily forecasts, keyed by traces and model)")
    p.set_defaults(func=run)
    from tidewise.commands.simulate_tide import register_tide

    register_tide(inner)
    from tidewise.commands.simulate_rebalance import register_rebalance

    register_rebalance(inner)


def run(args: argparse.Namespace) -> int:
    if args.simulation == "rebalance":
        from tidewise.commands.simulate_rebalance import run_rebalance

        return run_rebalance(args)
    if args.simulation == "tide":
        from tidewise.commands.simulate_tide import run_tide

        return run_tide(args)
    from contracts.errors import InputError
    from studies.simulation.runner import run_study, write_outputs
    from studies.simulation.study import StudySettings
    from predictor.models import MODELS
    from tidewise.paths import prepare_output_dir
    from tidewise.progress import progress

    if args.forecast_model != "auto" and args.forecast_model not in MODELS:
        raise InputError(f"--forecast-model {args.forecast_model!r}: use auto or one of {sorted(MODELS)}")
    if args.nodes < 1 or args.days < 1:
        raise InputError(f"--nodes {args.nodes} and --days {args.days}: each must be at least 1")
    if not os.path.isdir(args.traces):
        raise InputError(f"--traces {args.traces}: no such directory (the real traces live in ../shared/data)")
    prepare_output_dir(args.out)  # before hours of simulation, not after
    s = StudySettings(traces=args.traces, nodes=args.nodes, days=args.days, seed=args.seed, policy=args.policy,
                      sweeps=not args.no_sweeps, bursts=args.bursts, forecast_model=args.forecast_model,
                      forecast_level=args.forecast_level,
                      cache_dir=None if args.no_cache else os.path.join(args.out, "forecast-cache"))
    study = run_study(s, progress=progress)
    paths = write_outputs(study, args.out)
    v = study.verdict()
    print(f"simulated {study.cluster.nodes} nodes x {args.days} days, {len(study.cluster.services)} services "
          f"from {len(study.cluster.traces)} traces, bursts {args.bursts}; {len(study.results)} policy settings",
          file=sys.stderr)
    for r in study.results:
        if "@" not in r.label:
            print(f"  {r.label:12s} utilisation {100 * r.utilisation:5.1f}%  shortfall {100 * r.shortfall:.4f}%  "
                  f"goodput {r.goodput_core_hours:9.0f} core-h  evictions {r.evictions}  "
                  f"slowdown p95 {r.slowdown_p95:.2f}", file=sys.stderr)
    if "goodput_ratio" in v:
        t, b = v["tidewise_best"], v["best_baseline"]
        print(f"  within {100 * v['shortfall_budget']:g}% shortfall: best tidewise {t['label']} goodput "
              f"{t['goodput_core_hours']:.0f} core-h vs best baseline {b['label']} {b['goodput_core_hours']:.0f} "
              f"({v['goodput_ratio']:.3f}x); evictions {t['evictions']} vs {b['evictions']}", file=sys.stderr)
    print(f"wrote {paths['results']}, {paths['details']}, {paths['report']}", file=sys.stderr)
    return 0
