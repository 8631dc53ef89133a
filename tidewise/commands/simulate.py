"""`tidewise simulate colocation` — replay real traces on a simulated cluster under each policy."""
from __future__ import annotations

import argparse
import sys

from tidewise.commands.study_args import add_study_args, cache_dir, check_study_args, check_traces, source_settings

HELP = """\
Simulate colocation on a cluster whose online services replay real traces, or your own history.

N nodes (32 cores each) host online services scaled from the traces in --traces, with requests
sized near their observed peak; online demand bursts inside each minute (--bursts, a model
estimated from the traces). With --history FILE (what `tidewise fetch` wrote) the online
services are your workloads' pods instead: their CPU usage, their requests where the file has them.
Batch jobs arrive at a cluster queue (seeded) and each policy places
them. Every minute each policy sets the batch quota per node (applied one minute later); batch is
throttled to it and evicted when that is not enough. Policies: none, katalyst (reactive),
koordinator (threshold), tidewise (fast reactive quota, reserve from its forecast's uncertainty,
forecast-aware admission), each with its main knobs swept. Writes DIR/results.json,
DIR/details.json, DIR/report.html.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="simulate colocation, tidal node pools or rebalancing on real traces",
                       description="Simulations on real traces: colocation, tide, rebalance. Run `tidewise "
                                   "simulate SIMULATION --help`.")
    inner = p.add_subparsers(dest="simulation", metavar="SIMULATION", required=True)
    c = inner.add_parser("colocation", help="batch colocation on a simulated cluster",
                         description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_args(c, nodes=40, nodes_help="nodes of 32 cores", days=7,
                   seed_help="seed of the cluster, the system noise and the batch queue",
                   policies=["none", "katalyst", "koordinator", "tidewise"], out="simulation-out",
                   model_help="chosen per series", cache_help="daily forecasts, keyed by traces and model")
    c.add_argument("--bursts", default="calibrated", choices=["none", "calibrated", "high"],
                   help="online demand's peaks inside the minute: none, calibrated (estimated from the traces, "
                        "default) or high (as rough as uncorrelated demand)")
    c.add_argument("--forecast-level", default="node", choices=["node", "service"],
                   help="tidewise forecasts each node's online demand (node, default) or every trace, summing "
                        "its services' quantiles per node as the serving loop sums pods' (service)")
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
    from dataclasses import asdict

    from studies.simulation.colocation.runner import run_study, write_outputs
    from studies.simulation.colocation.study import StudySettings
    from studies.simulation.harness.cluster import ClusterSettings
    from studies.simulation.harness.history import read_history
    from tidewise.paths import prepare_output_dir
    from tidewise.progress import progress

    check_study_args(args)
    check_traces(args)
    s = StudySettings(**source_settings(args), nodes=args.nodes, days=args.days, seed=args.seed, policy=args.policy,
                      sweeps=not args.no_sweeps, bursts=args.bursts, forecast_model=args.forecast_model,
                      forecast_level=args.forecast_level,
                      cache_dir=cache_dir(args))
    history = read_history(s, ClusterSettings(**{**asdict(s.cluster), "nodes": s.nodes}))  # before the folder
    prepare_output_dir(args.out)  # before hours of simulation, not after
    study = run_study(s, progress=progress, history=history)
    from contracts.atomic import all_or_none

    with all_or_none():  # results.json, details.json and report.html: all three, or none
        paths = write_outputs(study, args.out)
    v = study.verdict()
    source = f"{len(study.cluster.traces)} workloads in {args.history}" if args.history else \
        f"{len(study.cluster.traces)} traces"
    print(f"simulated {study.cluster.nodes} nodes x {args.days} days, {len(study.cluster.services)} services "
          f"from {source}, bursts {args.bursts}; {len(study.results)} policy settings", file=sys.stderr)
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
