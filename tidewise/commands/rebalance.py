"""`tidewise rebalance` — one run of the serving loop's rebalance step, for review: which pods would
move off nodes whose forecast peak will be hot, and why every other pod on them stays. Prints the
plan as a table and writes it as JSON; evicts only with --apply (through the Eviction API, so that
disruption budgets hold). The serving loop built with the rebalance feature alone: no VPA, HPA or
node decision is made or written here (that is `tidewise serve`'s job); the forecasts are the ones
serve makes, so the plan is the one `serve --rebalance` would make."""
from __future__ import annotations

import argparse
import json
import sys

FEATURE = "rebalance"  # the one feature of this command's loop (autoscaler/features/rebalance.py)

HELP = """\
Read history and the cluster as `tidewise serve` does, forecast every pod's workload over
serve.rebalance.horizon (default 2h), find nodes whose forecast peak exceeds the high thresholds
and plan the moves (docs/rebalance.md). Dry-run unless --apply.

  tidewise rebalance --cluster-state D/cluster-state.yaml --source file --input D/history.parquet
  tidewise rebalance --source prometheus --apply            # evicts, in the cluster
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rebalance", help="plan (and with --apply make) moves of pods off nodes forecast to be hot",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--apply", action="store_true", help="evict the planned pods (default: dry-run, nothing sent)")
    p.add_argument("--cluster-state", metavar="FILE", help="read the cluster from this YAML (review only: not "
                                                           "with --apply)")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--source", choices=["file", "prometheus", "synthetic"], default="prometheus",
                   help="history source (default prometheus; settings in the config file's prometheus: section)")
    p.add_argument("--input", metavar="PATH", help="long history file for --source file")
    p.add_argument("--prometheus-url", help="Prometheus base URL (overrides the config file)")
    p.add_argument("--seed", type=int, default=7, help="seed of --source synthetic (default 7)")
    p.add_argument("--registry", metavar="DIR", help="model registry folder; default: stateless forecasts")
    p.add_argument("--registry-key", metavar="FILE", help="HMAC key file: refuse registry versions not signed with it")
    p.add_argument("--kill-switch", metavar="FILE", help="evict only while this file says `run` (fails closed)")
    p.add_argument("--step", default=None, help="history and forecast step (default 5m)")
    p.add_argument("--model", default=None, help="forecast model: auto (default) or one model name")
    p.add_argument("--now", help="decision time (ISO-8601 UTC); default: wall clock for Prometheus, the end of the "
                                 "history + one step for files")
    p.add_argument("--out", metavar="FILE", default="rebalance.json",
                   help="the plan as JSON: hot nodes, moves and their outcome, why each other pod stays "
                        "(default rebalance.json)")
    p.set_defaults(func=run)


def _serve_args(args: argparse.Namespace) -> argparse.Namespace:
    """The flags serve's helpers read, filled for this command (no sink, no metrics, one run)."""
    return argparse.Namespace(**{**vars(args), "interval": None, "recommender_name": None, "rebalance": True,
                                 "sink": "api", "out": None, "report": None, "once": True})


def run(args: argparse.Namespace) -> int:
    """The serving loop built with one feature, rebalance: one run, nothing written but its evictions."""
    from contracts.errors import InputError
    from tidewise.commands.serve import loop_inputs
    from tidewise.paths import check_output_path

    if args.apply and args.cluster_state:
        raise InputError("--apply evicts through the API: read the cluster from it too (drop --cluster-state)")
    check_output_path(args.out, what="--out")
    settings, _, source, clock = loop_inputs(_serve_args(args))
    from autoscaler.features import extra_kinds, features
    from autoscaler.input.cluster import FileCluster, load_cluster_state
    from autoscaler.output.eviction import Evictor
    from autoscaler.output.sinks import DryRunSink
    from autoscaler.routines.loop import ServingLoop

    kube = None
    if args.cluster_state:
        load_cluster_state(args.cluster_state)  # a malformed file is a usage error now
        cluster = FileCluster(args.cluster_state)
    else:
        from autoscaler.input.cluster import ApiCluster
        from autoscaler.kube import Kube

        kube = Kube.from_config(args.kubeconfig)
        # what serve reads: the loop forecasts what every feature would read, so the plan is serve's
        cluster = ApiCluster(kube, extra_kinds(features(settings)))  # type: ignore[assignment]
    evictor = Evictor(kube, dry_run=not args.apply, per_minute=settings.rebalance.per_minute)
    loop = ServingLoop(settings, source, cluster, DryRunSink(), registry_dir=args.registry, clock=clock,
                       evictor=evictor, only=(FEATURE,))
    from tidewise.progress import run_loop_once

    return _report(args, run_loop_once(loop, "rebalance, once: steps"))


def _report(args: argparse.Namespace, rep) -> int:
    """Table on stdout, JSON in --out; 1 when the run froze, the plan failed or an eviction failed."""
    from contracts.atomic import write_text_atomic

    result = rep.sections.get(FEATURE)  # routines/rebalance.RebalanceResult, when the plan was made
    doc = {"now": str(rep.now), "outcome": rep.outcome, "reason": rep.reason, "dry_run": not args.apply,
           **(result.as_dict() if result is not None else {"hot": {}, "moves": [], "kept": {}, "note": ""}),
           "skipped": rep.skipped}
    write_text_atomic(args.out, json.dumps(doc, indent=1, default=str) + "\n")
    problems = ([f"{rep.outcome}: {rep.reason}"] if rep.outcome == "frozen" else []) + \
        ([f"rebalance: {rep.skipped['rebalance']}"] if "rebalance" in rep.skipped else []) + \
        [f"{m['namespace']}/{m['pod']}: failed ({m['detail']})" for m in doc["moves"] if m["result"] == "failed"]
    print(f"tidewise rebalance: {len(doc['hot'])} hot nodes, {len(doc['moves'])} moves"
          f"{' (dry-run)' if not args.apply else ''}, {len(doc['kept'])} pods on hot nodes kept -> {args.out}")
    for node, why in sorted(doc["hot"].items()):
        print(f"  hot {node}: {why}")
    if doc["moves"]:
        print(f"  {'node':<16} {'pod':<40} {'to':<16} {'result':<12} reason")
        for m in doc["moves"]:
            print(f"  {m['node']:<16} {m['namespace'] + '/' + m['pod']:<40} {m['destination']:<16} "
                  f"{m['result']:<12} {m['reason']}")
    for line in problems:
        print(f"  not done: {line}", file=sys.stderr)
    return 1 if problems else 0
