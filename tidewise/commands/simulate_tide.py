"""`tidewise simulate tide` — whole nodes lent to batch and handed back, under each policy, on real traces.

Registered by `tidewise/commands/simulate.py` (the `simulate` command's second simulation)."""
from __future__ import annotations

import argparse
import os
import sys

HELP = """\
Simulate a tidal node pool on a cluster whose online services replay real traces.

N nodes host the colocation simulator's online services (real traces in --traces) under the HPA:
replicas follow demand, and the pods' requests need a number of whole nodes each minute. The
other nodes may be lent to a batch queue (seeded jobs); a node handed back evicts its batch pods.
Policies: watermark (Katalyst's reactive rule, thresholds swept), schedule (fixed night hours,
windows swept), tidewise (the serving loop's plan on an hourly forecast of the pool's requests,
lead time and quantile swept). Per setting: node-hours lent, late minutes (online service needed
more nodes than it had), pods moved and batch goodput. Writes DIR/results.json, DIR/details.json,
DIR/report.html.
"""


def register_tide(inner: argparse._SubParsersAction) -> None:
    c = inner.add_parser("tide", help="whole nodes lent to batch and handed back (issue 17)",
                         description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--traces", default=os.path.join("..", "shared", "data"), metavar="DIR",
                   help="folder of real traces laid out like ../shared/data (default ../shared/data)")
    c.add_argument("--nodes", type=int, default=40, metavar="N", help="nodes in the pool (default 40)")
    c.add_argument("--days", type=int, default=7, help="simulated days: each trace's last whole days (default 7)")
    c.add_argument("--seed", type=int, default=0, help="seed of the cluster and the batch queue")
    c.add_argument("--policy", default="all", choices=["all", "watermark", "schedule", "tidewise"],
                   help="which policy to run, with its sweep (default all)")
    c.add_argument("--out", default="tide-out", metavar="DIR",
                   help="output folder, created if missing (its parent must exist; default tide-out)")
    c.add_argument("--forecast-model", default="auto",
                   help="forecasting model for tidewise: auto (chosen per forecast, default) or one model name")
    c.add_argument("--no-sweeps", action="store_true", help="run each policy's default setting only")
    c.add_argument("--no-cache", action="store_true",
                   help="do not read or write DIR/forecast-cache (the pool's hourly forecasts)")


def run_tide(args: argparse.Namespace) -> int:
    from contracts.errors import InputError
    from predictor.models import MODELS
    from studies.simulation.tide_study import TideStudySettings, check_settings, run_tide_study, write_tide_outputs
    from tidewise.paths import prepare_output_dir
    from tidewise.progress import progress

    if args.forecast_model != "auto" and args.forecast_model not in MODELS:
        raise InputError(f"--forecast-model {args.forecast_model!r}: use auto or one of {sorted(MODELS)}")
    s = TideStudySettings(traces=args.traces, nodes=args.nodes, days=args.days, seed=args.seed, policy=args.policy,
                          sweeps=not args.no_sweeps, forecast_model=args.forecast_model,
                          cache_dir=None if args.no_cache else os.path.join(args.out, "forecast-cache"))
    check_settings(s)
    if not os.path.isdir(args.traces):
        raise InputError(f"--traces {args.traces}: no such directory (the real traces live in ../shared/data)")
    prepare_output_dir(args.out)  # before the simulation, not after
    study = run_tide_study(s, progress=progress)
    paths = write_tide_outputs(study, args.out)
    p = study.pool
    print(f"simulated {p.nodes} nodes x {args.days} days, {study.services} services from {len(study.traces)} "
          f"traces; online service needs {p.needed.min()}-{p.needed.max()} nodes; {len(study.runs)} policy settings",
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
