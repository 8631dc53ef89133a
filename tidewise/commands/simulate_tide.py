"""`tidewise simulate tide` — whole nodes lent to batch and handed back, under each policy, on real traces.

Registered by `tidewise/commands/simulate.py` (the `simulate` command's second simulation)."""
from __future__ import annotations

import argparse
import sys

from tidewise.commands.study_args import add_study_args, cache_dir, check_study_args, check_traces, source_settings

HELP = """\
Simulate a tidal node pool on a cluster whose online services replay real traces.

N nodes host the colocation simulator's online services (real traces in --traces) under the HPA:
replicas follow demand, and the pods' requests need a number of whole nodes each minute. The
other nodes may be lent to a batch queue (seeded jobs); a node handed back evicts its batch pods.
Policies: watermark (Katalyst's reactive rule, thresholds swept), schedule (fixed night hours,
windows swept), tidewise (the serving loop's plan on an hourly forecast of the pool's requests,
lead time and quantile swept). Per setting: node-hours lent, late minutes (online service needed
more nodes than it had), pods moved and batch goodput. With --history FILE (what `tidewise
fetch` wrote) the online services are your workloads' pods instead. Writes DIR/results.json,
DIR/details.json, DIR/report.html.
"""


def register_tide(inner: argparse._SubParsersAction) -> None:
    c = inner.add_parser("tide", help="whole nodes lent to batch and handed back",
                         description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_args(c, nodes=40, nodes_help="nodes in the pool", days=7, seed_help="seed of the cluster and the batch queue",
                   policies=["watermark", "schedule", "tidewise"], out="tide-out", model_help="chosen per forecast",
                   cache_help="the pool's hourly forecasts")


def run_tide(args: argparse.Namespace) -> int:
    from studies.simulation.harness.cluster import ClusterSettings
    from studies.simulation.harness.history import read_history
    from studies.simulation.tide.report import write_tide_outputs
    from studies.simulation.tide.study import TideStudySettings, check_settings, run_tide_study
    from tidewise.paths import prepare_output_dir
    from tidewise.progress import progress

    check_study_args(args)
    s = TideStudySettings(**source_settings(args), nodes=args.nodes, days=args.days, seed=args.seed, policy=args.policy,
                          sweeps=not args.no_sweeps, forecast_model=args.forecast_model,
                          cache_dir=cache_dir(args))
    check_settings(s)
    check_traces(args)
    history = read_history(s, ClusterSettings(nodes=s.nodes), min_nodes=2)  # before the output folder
    prepare_output_dir(args.out)  # before the simulation, not after
    study = run_tide_study(s, progress=progress, history=history)
    from contracts.atomic import all_or_none

    with all_or_none():  # results.json, details.json and report.html: all three, or none
        paths = write_tide_outputs(study, args.out)
    p = study.pool
    source = f"workloads in {args.history}" if args.history else "traces"
    print(f"simulated {p.nodes} nodes x {args.days} days, {study.services} services from {len(study.traces)} "
          f"{source}; online service needs {p.needed.min()}-{p.needed.max()} nodes; {len(study.runs)} policy settings",
          file=sys.stderr)
    for r in study.runs:
        if "@" not in r.label:
            print(f"  {r.label:10s} lent {r.node_hours_lent:7.0f} node-h  late {r.late_minutes:4d} min  pods moved "
                  f"{r.pods_moved:6d}  goodput {r.goodput_core_hours:8.0f} core-h", file=sys.stderr)
    v = study.verdict()
    if "lend_ratio" in v:
        print(f"  tidewise lends {v['lend_ratio']:.2f}x the best watermark with no more late minutes "
              f"({v['best_watermark']['label']}); targets met: "
              f"{', '.join(k for k, ok in v['targets'].items() if ok) or 'none'}", file=sys.stderr)
    print(f"wrote {paths['results']}, {paths['details']}, {paths['report']}", file=sys.stderr)
    return 0
