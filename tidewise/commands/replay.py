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
    h.add_argument("--quantile", type=float, help="forecast quantile the floor carries (default: the serve settings' hpa.quantile)")
    for sp in (v, h):
        sp.add_argument("--input", required=True, metavar="FILE", help="long CSV/Parquet history")
        sp.add_argument("--output", required=True, metavar="FILE", help="decisions CSV to write (atomically)")
        sp.add_argument("--report", metavar="FILE.html", help="also write a self-contained HTML report")
        sp.add_argument("--model", default="auto", help="auto (default: model chosen per series each UTC midnight) or one cheap model name")
        sp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from studies.replay.decisions import DailyChoiceForecaster, replay_hpa, replay_vpa_decisions, replay_vpa_default
    from autoscaler.logic.hpa import TooManyReplicas, check_replica_scale, simulate_reactive_hpa
    from studies.replay.inputs import load_replay_input
    from autoscaler.settings import HpaSettings, VpaSettings
    from predictor.durations import parse_duration
    from contracts.errors import InputError
    from predictor.history import write_long
    from predictor.models import MODELS
    from tidewise.paths import check_output_path, input_file
    from tidewise.progress import progress

    step = pd.Timedelta("5m")
    hpa_kind = args.kind == "hpa"
    if args.model != "auto" and args.model not in MODELS:
        raise InputError(f"--model {args.model!r}: use auto or one of {sorted(MODELS)}")
    if hpa_kind:
        if not 0 < args.target_utilization <= 1:
            raise InputError(f"--target-utilization {args.target_utilization}: use a number in (0, 1]")
        if not 0 <= args.tolerance <= 1:  # also refuses nan and inf
            raise InputError(f"--tolerance {args.tolerance}: use a number in [0, 1] (the HPA's default is 0.1)")
        startup = parse_duration(args.startup, what="--startup")
        stabilization = parse_duration(args.stabilization, what="--stabilization")
        settings = HpaSettings(startup=f"{int(startup.total_seconds())}s")
        if args.quantile is not None:
            if not 0 < args.quantile < 1:
                raise InputError(f"--quantile {args.quantile}: use a number in (0, 1)")
            settings.quantile = args.quantile
    else:
        every = parse_duration(args.every, what="--every")
        if every < step:
            raise InputError(f"--every {args.every}: at least {step} (the history step)")
    input_file(args.input)
    check_output_path(args.output, what="--output")
    if args.report:
        check_output_path(args.report, what="--report")
    data = load_replay_input(args.input, step, need_per_replica=hpa_kind)
    for key, per in data.per_replica.items():  # refused before any work: a unit mistake, not a decision
        try:
            check_replica_scale(data.history.series[key].to_numpy(dtype=float), per * args.target_utilization)
        except TooManyReplicas as exc:
            raise InputError(f"input {args.input}: series {key!r}: {exc}") from None
    result: dict[str, dict] = {}
    parts = []
    with progress(f"replaying {args.kind}", len(data.history.series)) as advance:
        for key, y in data.history.series.items():
            start, end = data.start[key], data.end[key]
            fc = DailyChoiceForecaster(key=key, model=args.model)
            if hpa_kind:
                per = data.per_replica[key]
                try:
                    demand, floor, serving, r0 = replay_hpa(
                        y, start, end, per, settings, args.target_utilization, fc, tolerance=args.tolerance,
                        stabilization_minutes=max(1, int(stabilization / pd.Timedelta("1min"))))
                except TooManyReplicas as exc:
                    raise InputError(f"input {args.input}: series {key!r}: {exc}") from None
                minutes = y.resample("1min").ffill()[start:end].index
                reactive = simulate_reactive_hpa(
                    demand, per, r0, target_utilization=args.target_utilization, tolerance=args.tolerance,
                    stabilization_minutes=max(1, int(stabilization / pd.Timedelta("1min"))),
                    startup_minutes=int(-(-startup // pd.Timedelta("1min"))))
                result[key] = {"minutes": minutes, "demand": demand, "floor": floor, "serving": serving,
                               "reference": reactive, "per": per}
                parts.append(pd.DataFrame({"series": key, "timestamp": minutes, "replicas": serving.astype(int)}))
            else:
                resource = "memory" if key.rsplit("/", 1)[-1] == "memory" else "cpu"
                dec = replay_vpa_decisions(y, start, end, VpaSettings(), fc, every, resource=resource)
                use = y[(y.index >= start) & (y.index < end)]
                result[key] = {"usage": use, "decisions": dec,
                               "reference": replay_vpa_default(y, start, end, every).reindex(use.index)}
                parts.append(dec.drop(columns="reason").assign(series=key))
            advance(1)
    cols = ["series", "timestamp", "replicas"] if hpa_kind else ["series", "timestamp", "target", "lower_bound", "upper_bound"]
    out = pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
    write_long(out, args.output)
    summary, per_series = scores(args.kind, result, args)
    if args.report:
        write_report(args.report, args.kind, result, summary, per_series, args)
    s = summary[0] if summary else {}
    print(f"replayed {args.kind} for {len(result)} series -> {args.output}: "
          + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items()),
          file=sys.stderr)
    return 0


def scores(kind: str, result: dict, args: argparse.Namespace):
    """Summary (Tidewise vs the reference) and per-series rows, with the scores of the issue."""
    import numpy as np

    from autoscaler.logic.hpa import hpa_scores
    from studies.replay.decisions import vpa_scores

    rows = []
    for key, r in result.items():
        if kind == "vpa":
            use = r["usage"]
            req = r["decisions"].set_index("timestamp")["target"].reindex(use.index, method="ffill")
            t, ref = vpa_scores(use, req), vpa_scores(use, r["reference"])
            rows.append({"series": key, "slack": t[0], "violation": t[1], "ref slack": ref[0], "ref violation": ref[1]})
        else:
            t = hpa_scores(r["demand"], r["serving"], r["per"], args.target_utilization, args.tolerance)
            ref = hpa_scores(r["demand"], r["reference"], r["per"], args.target_utilization, args.tolerance)
            rows.append({"series": key, "mean replicas": t[0], "over target": t[1],
                         "ref mean replicas": ref[0], "ref over target": ref[1]})
    if not rows:
        return [], rows
    cols = ("slack", "violation") if kind == "vpa" else ("mean replicas", "over target")
    mean = lambda c: float(np.nanmean([r[c] for r in rows]))  # noqa: E731
    ref_name = "stock VPA (p90 + 15%, 24 h half-life)" if kind == "vpa" else "reactive HPA"
    summary = [{"policy": "tidewise", **{c: mean(c) for c in cols}},
               {"policy": ref_name, **{c: mean(f"ref {c}") for c in cols}}]
    return summary, rows


def write_report(path: str, kind: str, result: dict, summary, per_series, args: argparse.Namespace) -> None:
    import pandas as pd

    from studies.replay.report import MAX_PLOTS, plot_lines, render
    from tidewise.progress import progress

    plots = []
    keys = list(result)[:MAX_PLOTS]
    with progress("plotting report", len(keys)) as advance:
        for key in keys:
            r = result[key]
            if kind == "vpa":
                use = r["usage"]
                dec = r["decisions"].set_index("timestamp")["target"].reindex(use.index, method="ffill")
                lines = [("usage", use, {"color": "#444", "lw": 0.7}),
                         ("tidewise request", dec, {"color": "#1f77b4", "lw": 1.2}),
                         ("stock VPA request", r["reference"], {"color": "#d62728", "lw": 1.0, "ls": "--"})]
                png = plot_lines(key, lines, "usage")
            else:
                idx = r["minutes"]
                need = pd.Series(r["demand"], index=idx) / (r["per"] * args.target_utilization)
                lines = [("demand / (per_replica x target)", need, {"color": "#444", "lw": 0.7}),
                         ("tidewise serving replicas", pd.Series(r["serving"], index=idx), {"color": "#1f77b4", "lw": 1.0}),
                         ("reactive HPA replicas", pd.Series(r["reference"], index=idx), {"color": "#d62728", "lw": 0.8, "ls": "--"})]
                png = plot_lines(key, lines, "replicas")
            plots.append((key, png))
            advance(1)
    meta = (f"{len(result)} series from {args.input}; the last 7 days are plotted; each decision uses only "
            "data before its time (model chosen each UTC midnight, refitted hourly).")
    render(path, f"Tidewise replay — {kind.upper()}", summary, per_series, plots, meta)
