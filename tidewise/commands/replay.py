"""`tidewise replay vpa|hpa` — what Tidewise would have decided on your history, from the past only."""
from __future__ import annotations

import argparse
import sys

VPA_HELP = """\
Replay Tidewise's VPA recommender on a history.

Input: long CSV/Parquet series,timestamp,value[,start] — value is a container's usage (CPU cores,
or bytes for series whose id ends in /memory); start (ISO-8601 UTC, the same on every row of a
series) is the first decision time; without it the last 7 days of each series are replayed.
Output CSV: series,timestamp,target,lower_bound,upper_bound — one row per series per decision
time from start to the end of the data, every --every. Each decision uses only rows with a
timestamp before the decision time.
"""
HPA_HELP = """\
Replay Tidewise's predictive HPA on a history.

Input: long CSV/Parquet series,timestamp,value,per_replica[,start] — value is the service's total
demand, per_replica the demand one replica serves at 100% utilisation. Output CSV:
series,timestamp,replicas at 1-minute resolution from start to the end: the replicas serving at
each minute, from a simulation of the Kubernetes HPA (tolerance, scale-down stabilisation,
start-up delay) with Tidewise's predictive minReplicas floor. A replica asked for at minute t
serves from t + startup; decisions at minute t use only data before t.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="what Tidewise would have decided on a history (VPA or HPA)",
                       description="Replay Tidewise's decisions on your own history, next to the reference.")
    kinds = p.add_subparsers(dest="kind", metavar="vpa|hpa", required=True)
    v = kinds.add_parser("vpa", help="replay the VPA recommender", description=VPA_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("--every", default="1h", help="decision interval (default 1h)")
    h = kinds.add_parser("hpa", help="replay the predictive HPA", description=HPA_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    h.add_argument("--target-utilization", type=float, default=0.7, help="HPA target utilisation (default 0.7)")
    h.add_argument("--startup", default="2m", help="pod start-up time (default 2m)")
    h.add_argument("--tolerance", type=float, default=0.1, help="HPA tolerance (default 0.1)")
    h.add_argument("--stabilization", default="5m", help="HPA scale-down stabilisation window (default 5m)")
    h.add_argument("--quantile", type=float, help="forecast quantile the floor carries (default: serve settings, 0.9)")
    for sp in (v, h):
        sp.add_argument("--input", required=True, metavar="FILE", help="long CSV/Parquet history")
        sp.add_argument("--output", required=True, metavar="FILE", help="decisions CSV to write (atomically)")
        sp.add_argument("--report", metavar="FILE.html", help="also write a self-contained HTML report")
        sp.add_argument("--model", default="auto", help="forecaster refitted each midnight: auto (default) or one model name")
        sp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from autoscaler.replay.forecasts import daily_forecasts, origins_for
    from autoscaler.replay.inputs import load_replay_input
    from autoscaler.settings import HpaSettings, VpaSettings
    from predictor.durations import parse_duration
    from predictor.errors import InputError
    from predictor.history import write_long
    from tidewise.progress import progress

    step = pd.Timedelta("5m")
    hpa_kind = args.kind == "hpa"
    if hpa_kind:
        if not 0 < args.target_utilization <= 1:
            raise InputError(f"--target-utilization {args.target_utilization}: use a number in (0, 1]")
        if args.tolerance < 0:
            raise InputError(f"--tolerance {args.tolerance}: must be >= 0")
        startup = parse_duration(args.startup, what="--startup")
        stabilization = parse_duration(args.stabilization, what="--stabilization")
    else:
        every = parse_duration(args.every, what="--every")
    from predictor.models import MODELS

    if args.model != "auto" and args.model not in MODELS:
        raise InputError(f"--model {args.model!r}: use auto or one of {sorted(MODELS)}")
    data = load_replay_input(args.input, step, need_per_replica=hpa_kind)
    hpa_settings = HpaSettings(startup=args.startup) if hpa_kind else None
    if hpa_kind and args.quantile is not None:
        if not 0 < args.quantile < 1:
            raise InputError(f"--quantile {args.quantile}: use a number in (0, 1)")
        hpa_settings.quantile = args.quantile
    quantiles = tuple(sorted({0.5, 0.9, 0.95, 0.99} | ({hpa_settings.quantile} if hpa_kind else set())))
    n_origins = len({o for k in data.history.series for o in origins_for(data.start[k], data.end[k])})
    with progress("fitting daily forecasts", n_origins) as advance:
        forecasts = daily_forecasts(data.history, data.start, data.end, quantiles, model=args.model, progress=advance)
    with progress(f"replaying {args.kind}", len(data.history.series)) as advance:
        if hpa_kind:
            from autoscaler.replay.hpa import HpaRules, replay_hpa

            rules = HpaRules(args.target_utilization, args.tolerance, stabilization, startup)
            result = replay_hpa(data.history.series, data.start, data.per_replica, forecasts, rules, hpa_settings, advance)
            out = result.replicas
        else:
            from autoscaler.replay.vpa import replay_vpa

            result = replay_vpa(data.history.series, data.start, data.end, every, forecasts, VpaSettings(), progress=advance)
            out = result.decisions
    write_long(out, args.output)
    summary, per_series = scores(args.kind, data, result, args)
    if args.report:
        write_report(args.report, args.kind, data, result, summary, per_series, args)
    s = summary[0] if summary else {}
    print(f"replayed {args.kind} for {len(data.history.series)} series -> {args.output}: "
          + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items()),
          file=sys.stderr)
    return 0


def scores(kind, data, result, args):
    """Summary (Tidewise vs the reference) and per-series rows, with the scores of the issue."""
    import numpy as np

    rows = []
    if kind == "vpa":
        from autoscaler.replay.vpa import requests_on, vpa_scores

        for key, y in data.history.series.items():
            use = y[y.index >= data.start[key]]
            t = vpa_scores(use, requests_on(use, result.decisions[result.decisions.series == key]))
            r = vpa_scores(use, requests_on(use, result.reference[result.reference.series == key]))
            rows.append({"series": key, "slack": t[0], "violation": t[1], "ref slack": r[0], "ref violation": r[1]})
        cols = ("slack", "violation")
    else:
        from autoscaler.logic.hpa import hpa_scores

        for key in data.history.series:
            d = result.replicas[result.replicas.series == key]
            ref = result.reference[result.reference.series == key]
            from autoscaler.replay.hpa import demand_per_minute

            demand = demand_per_minute(data.history.series[key], data.start[key]).to_numpy(dtype=float)
            t = hpa_scores(demand, d["replicas"].to_numpy(dtype=float), data.per_replica[key], args.target_utilization, args.tolerance)
            r = hpa_scores(demand, ref["replicas"].to_numpy(dtype=float), data.per_replica[key], args.target_utilization, args.tolerance)
            rows.append({"series": key, "mean replicas": t[0], "over target": t[1], "ref mean replicas": r[0], "ref over target": r[1]})
        cols = ("mean replicas", "over target")
    if not rows:
        return [], rows
    mean = lambda c: float(np.nanmean([r[c] for r in rows]))  # noqa: E731
    ref_name = "stock VPA (p90 + 15%, 24 h half-life)" if kind == "vpa" else "reactive HPA"
    summary = [{"policy": "tidewise", **{c: mean(c) for c in cols}},
               {"policy": ref_name, **{c: mean(f"ref {c}") for c in cols}}]
    return summary, rows


def write_report(path, kind, data, result, summary, per_series, args):
    import pandas as pd

    from autoscaler.replay.report import plot_lines, render
    from tidewise.progress import progress

    plots = []
    with progress("plotting report", min(len(data.history.series), 100)) as advance:
        for i, (key, y) in enumerate(data.history.series.items()):
            if i >= 100:
                break
            if kind == "vpa":
                use = y[y.index >= data.start[key]]
                dec = result.decisions[result.decisions.series == key].set_index("timestamp")
                ref = result.reference[result.reference.series == key].set_index("timestamp")
                lines = [("usage", use, {"color": "#444", "lw": 0.7}),
                         ("tidewise request", dec["target"].reindex(use.index, method="ffill"), {"color": "#1f77b4", "lw": 1.2}),
                         ("stock VPA request", ref["target"].reindex(use.index, method="ffill"), {"color": "#d62728", "lw": 1.0, "ls": "--"})]
                png = plot_lines(key, lines, "usage")
            else:
                per = data.per_replica[key]
                d = result.replicas[result.replicas.series == key].set_index("timestamp")["replicas"]
                ref = result.reference[result.reference.series == key].set_index("timestamp")["replicas"]
                need = y[y.index >= data.start[key]] / (per * args.target_utilization)
                lines = [("demand / (per_replica x target)", need, {"color": "#444", "lw": 0.7}),
                         ("tidewise serving replicas", d.astype(float), {"color": "#1f77b4", "lw": 1.0}),
                         ("reactive HPA replicas", ref.astype(float), {"color": "#d62728", "lw": 0.8, "ls": "--"})]
                png = plot_lines(key, lines, "replicas")
            plots.append((key, png))
            advance(1)
    meta = (f"{len(data.history.series)} series from {args.input}; last {min(7, 7)} days shown per plot; "
            "each decision uses only data before its time; forecasts refitted at each UTC midnight.")
    render(path, f"Tidewise replay — {kind.upper()}", summary, per_series, plots, meta)
