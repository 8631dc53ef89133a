"""`tidewise demo` — the main job end to end on an embedded synthetic cluster, nothing else needed."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

HELP = """\
Generate a synthetic cluster (12 workloads in 3 namespaces on 4 nodes, 21 days at 5 minutes, with
daily and weekly tides, noise, bursts, a trend and gaps), then profile and forecast every workload
and write, under --out:
  history.parquet   the long history (series,timestamp,value + labels): usage, requests and replicas,
                    as `tidewise fetch --what cpu,memory,requests,replicas` writes it; the input of
                    `tidewise simulate colocation|tide|rebalance --history`
  forecasts.csv     the next 24 h of q0.5/q0.9/q0.95/q0.99 per series (the forecast contract)
  profiles.json     the service profile of every series
  report.html       a self-contained page with one plot per series
  cluster-state.yaml  the demo cluster as Kubernetes objects (VPAs naming `tidewise`, HPAs,
                    Deployments/ReplicaSets/StatefulSets, Pods, Nodes), for `tidewise serve --cluster-state`
  pods.yaml         its Pods alone (uids, owned by ReplicaSets/StatefulSets), for `enforce --pods-from file`
  sysfs/<node>/     each node's CPU and NUMA topology as a sysfs tree, for `enforce --sysfs-root`
  recommendations/  what one offline run of the serving loop would write (one YAML per object;
                    node/<node>.yaml carries the reclaim plan `enforce --reclaim-plan` reads)
  rebalance-config.yaml  settings for `tidewise --config F rebalance` over the --horizon
The summary ends with a dry-run rebalance of the demo cluster and one node agent's plan.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the whole job on a synthetic cluster and write a report",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="demo-out", metavar="DIR",
                   help="output folder, created if missing (its parent must exist; default demo-out)")
    p.add_argument("--seed", type=int, default=7, help="generator seed (default 7)")
    p.add_argument("--workloads", type=int, default=12, help="number of workloads (default 12)")
    p.add_argument("--namespaces", type=int, default=3)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--days", type=float, default=21, help="days of history (default 21)")
    p.add_argument("--horizon", default="24h", help="forecast horizon (default 24h)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from contracts.errors import InputError
    from studies.demo import generate_demo, profile_and_forecast, usage_history, write_demo_outputs
    from predictor.durations import parse_duration
    from tidewise.paths import prepare_output_dir
    from tidewise.progress import progress

    # upper bounds keep the demo a demo (21 days x 12 workloads is ~150,000 rows; these are 1,000 times that)
    if not (1 <= args.workloads <= 10_000 and 1 <= args.nodes <= 1_000 and 1 <= args.namespaces <= 1_000):
        raise InputError("--workloads must be 1..10000, --namespaces and --nodes 1..1000")
    if not 2 <= args.days <= 365:  # also refuses nan and inf
        raise InputError(f"--days {args.days:g}: use 2 to 365 (at least 2 days for a daily tide)")
    horizon = parse_duration(args.horizon, what="--horizon")
    t0 = time.perf_counter()
    prepare_output_dir(args.out)  # the folder, not a chain of them: its parent must exist
    err = Console(stderr=True)
    err.print(f"[bold]tidewise demo[/]: {args.workloads} workloads, {args.namespaces} namespaces, "
              f"{args.nodes} nodes, {args.days:g} days at 5 min -> {args.out}/")
    cluster, history, rows = generate_demo(args.out, args.seed, args.workloads, args.namespaces, args.nodes,
                                           args.days)
    usage = usage_history(history)  # what is profiled and forecast; serve reads the whole history, as from the file
    err.print(f"generated {len(history.series)} series ({len(usage.series)} of usage, the others requests and "
              f"replicas), {rows:,} samples, {len(history.gaps)} with gaps ({time.perf_counter() - t0:.1f} s)")
    profiles, forecasts = profile_and_forecast(args.out, usage, horizon, progress)
    _write_report(args.out, usage, forecasts, profiles,
                  meta=f"{args.workloads} workloads in {args.namespaces} namespaces on {args.nodes} nodes; "
                       f"{args.days:g} days of 5-minute history; forecasts for the next {args.horizon}.")
    with progress("serving loop, once, offline (dry-run file sink)", 1) as advance:
        served = write_demo_outputs(cluster, history, args.out, rebalance_horizon=args.horizon)
        advance(1)
    print_summary(cluster, history, profiles, forecasts, args.horizon)
    print(f"serving loop: {served['outcome']}; {len(served['files'])} objects would change -> "
          f"{args.out}/recommendations/ (cluster: {args.out}/cluster-state.yaml)", file=sys.stderr)
    print(rebalance_line(served), file=sys.stderr)
    print(enforcement_line(served), file=sys.stderr)
    print(f"wrote {args.out}/history.parquet, forecasts.csv, profiles.json, report.html, cluster-state.yaml, "
          f"pods.yaml, sysfs/, recommendations/, rebalance-config.yaml in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


def rebalance_line(served: dict[str, Any]) -> str:
    """One line: what `tidewise rebalance` plans on the demo cluster (dry-run), and how to rerun it."""
    r, out = served["rebalance"], os.path.dirname(served["cluster_state"])
    kept = sorted(set(r["kept"].values()))
    return (f"rebalance (dry-run, {r['outcome']}): {len(r['hot'])} hot node(s)"
            + "".join(f" [{n}: {why}]" for n, why in sorted(r["hot"].items()))
            + f", {len(r['moves'])} move(s), {len(r['kept'])} pod(s) kept" + (f" ({'; '.join(kept)})" if kept else "")
            + f" -- tidewise --config {served['rebalance_config']} rebalance --cluster-state {served['cluster_state']}"
              f" --source file --input {out}/history.parquet")


def enforcement_line(served: dict[str, Any]) -> str:
    """One line: the node agent's plan for the first node, from its reclaim plan as serve wrote it
    (recommendations/node/<node>.yaml, read by `enforce --reclaim-plan`), its pods (pods.yaml) and its
    topology (sysfs/<node>/, read by `enforce --sysfs-root` with the agent's own reader), at the demo's
    decision time, dry-run: the policy alone (the demo has no cgroups to diff)."""
    import yaml

    from contracts.errors import TidewiseError
    from contracts.reclaim import check_plan_in_force, plan_document
    from node_enforcer.collect.pods import read_pods_file
    from node_enforcer.collect.reclaim import load_reclaim_plan
    from node_enforcer.collect.topology import read_topology
    from node_enforcer.model.topology import format_cpulist
    from node_enforcer.policy.plan import plan

    files = sorted(f for f in served["files"] if f"{os.sep}node{os.sep}" in f)
    if not files:
        return "enforcement plan: none (the serving loop wrote no Node, so no reclaim plan)"
    with open(files[0], encoding="utf-8") as fh:
        node_obj = yaml.safe_load(fh)
    node = node_obj["metadata"]["name"]
    sysfs = os.path.join(served["sysfs"], node)
    try:
        reclaim = load_reclaim_plan(files[0], node)
        check_plan_in_force(reclaim, served["now"].to_pydatetime(), files[0], start_key="generated_at")
        topology = read_topology(sysfs)
    except (TidewiseError, ValueError) as exc:  # the demo's last line says so rather than end in a traceback
        return f"enforcement plan for node {node}: not made ({exc})"
    pods = read_pods_file(served["pods"], node)
    a = plan(topology, pods, reclaim)
    pools = ", ".join(f"{k} {format_cpulist(a.pools[k]) or '-'} ({len(a.pools[k])})" for k in ("reserve", "share", "reclaim"))
    return (f"enforcement plan (dry-run, node {node}, {topology.summary()}): {len(a.pods)} pod(s) placed; pools {pools}"
            f"; from its reclaim plan lending {reclaim.reclaimed_millicpu}m CPU and "
            f"{reclaim.reclaimed_memory_bytes / 2**30:.1f} GiB until {plan_document(reclaim)['valid_until']} -- "
            f"tidewise enforce --once --dry-run --node {node} --pods-from file --pods {served['pods']} "
            f"--reclaim-plan {files[0]} --sysfs-root {sysfs} (after that time it refuses the plan and lends nothing)")


def print_summary(cluster: Any, history: Any, profiles: dict, forecasts: list, horizon: str) -> None:
    """The table on stdout: per workload its class, peak window, CPU now and the forecast peaks."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Tidewise demo — next {horizon}")
    for col in ("workload", "class (cpu)", "peak window", "cpu now", "cpu q0.95 max", "mem q0.95 max", "model (cpu)"):
        table.add_column(col, justify="left" if col in ("workload", "class (cpu)", "peak window", "model (cpu)") else "right")
    by_id = {f.series: f for f in forecasts}
    for w in cluster.workloads:
        cpu_id, mem_id = w.key("cpu").id, w.key("memory").id
        p = profiles[cpu_id]
        window = f"{p.peak_window['start']}–{p.peak_window['end']}" if p.peak_window else "-"
        cpu_fc, mem_fc = by_id.get(cpu_id), by_id.get(mem_id)
        table.add_row(
            f"{w.namespace}/{w.name}", p.profile_class, window,
            f"{history.series[cpu_id].dropna().iloc[-1]:.2f}",
            f"{cpu_fc.quantile(0.95).max():.2f}" if cpu_fc else "-",
            f"{mem_fc.quantile(0.95).max() / 2**30:.2f} GiB" if mem_fc else "-",
            cpu_fc.model if cpu_fc else "-",
        )
    out = Console()
    if not out.is_terminal:
        out = Console(width=130)
    out.print(table)


def _write_report(out_dir: str, history: Any, forecasts: list, profiles: dict, meta: str) -> None:
    """report.html: one plot per forecast, with its profile's class and peak window (the forecast
    report of `training`, which the studies' demo module may not import)."""
    import os

    from training.report import render_report

    render_report(os.path.join(out_dir, "report.html"), history, forecasts,
                  {k: p.to_dict() for k, p in profiles.items()}, title="Tidewise demo: synthetic cluster", meta=meta)
