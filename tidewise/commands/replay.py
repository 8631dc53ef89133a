"""`tidewise replay vpa|hpa` — what Tidewise would have decided on your history, from the past only."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autoscaler.settings import VpaSettings
    from studies.replay.runner import ReplaySettings

VPA_HELP = """\
Replay Tidewise's VPA recommender on a history.

Input: long CSV/Parquet series,timestamp,value[,start] — value is a container's usage (CPU cores,
or bytes for series whose id ends in /memory); start (ISO-8601 UTC, the same on every row of a
series) is the first decision time; without it the last 7 days of each series are replayed.
Output CSV: series,timestamp,target,lower_bound,upper_bound[,hpa_target] — one row per series per
decision time from start to the end of the data, every --every. Each decision uses only rows with a
timestamp before the decision time.

Two regimes (--resize). in-place (the default; pods resize without a restart): a new request every
--every, the hour-peak model's forecast of the interval's peak at each series' violation-budget
level (--violation-budget, default 0.05: the share of 5-minute steps with usage over the request;
the level walks from a week before start). restart (every change restarts a pod): each UTC day
planned at midnight in at most --max-changes-per-day blocks, or the stock rule's target held for
the day, whichever cost less on the series' last week; the request never changes more often.
With --hpa-target-utilization U an HPA on the workload's CPU utilisation keeps its scale point:
hpa_target x target stays at U x the first request, within --hpa-target-bounds, or the request
is held.
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
    # the options of both kinds, accepted before `vpa|hpa` and after it (tidewise.arguments.accept_after)
    shared = [p.add_argument(
        "--decision-model", choices=("day-ahead", "gbm", "lightgbm"),
        help="forecast the decisions read: decision-time (quantiles of the next interval's peak from the latest "
             "samples; one global model fitted on the input's past: lightgbm, the default of both kinds as in "
             "serve, or gbm = scikit-learn's) or the day-ahead forecast (day-ahead)")]
    c = p.add_argument_group("choice by cost (VPA; hpa ignores these)")
    shared += [
        c.add_argument("--choose-by-cost", action="store_true",
                       help="opt-in: each UTC day, per series, serve the cheapest of the forecast, the stock VPA rule "
                            "and a flat p95 of the last week, scored on the series' last --cost-window"),
        c.add_argument("--cost-window", help="recent past the candidates are scored on (default 2d)"),
        c.add_argument("--violation-budget", type=float,
                       help="share of 5-minute steps usage may exceed the request (default 0.05, the stock VPA's "
                            "rate); the hour-peak level and the day plan are calibrated to it, and choose-by-cost "
                            "rules out candidates over it"),
        c.add_argument("--violation-weight", type=float, help="cost of one unit of violation rate, in slack (default 2.5)"),
        c.add_argument("--change-weight", type=float, help="cost of one request change a day, in slack (default 0.01)")]
    kinds = p.add_subparsers(dest="kind", metavar="vpa|hpa", required=True)
    v = kinds.add_parser("vpa", help="replay the VPA recommender", description=VPA_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("--every", default="1h",
                   help="decision interval (default 1h; in place, 30m gives ~10%% less slack at the same violation "
                        "rate for ~1.8x the resizes, BENCHMARKS.md)")
    v.add_argument("--resize", choices=("in-place", "restart"), default="in-place",
                   help="how a change reaches the pod: in-place (default: a new request every --every) or "
                        "restart (a day plan in at most --max-changes-per-day blocks, or the stock rule)")
    v.add_argument("--max-changes-per-day", type=int, default=3, metavar="N",
                   help="restart: request changes a UTC day at most, the one at midnight included (default 3)")
    v.add_argument("--hpa-target-utilization", type=float, metavar="U",
                   help="an HPA scales the workload on CPU utilisation U (e.g. 0.7): add the hpa_target column "
                        "that keeps its scale point (U x the first request) as the request moves")
    v.add_argument("--hpa-target-bounds", default="0.5,0.9", metavar="LO,HI",
                   help="the HPA target utilisations allowed (default 0.5,0.9); outside them the request is held")
    v.add_argument("--hold", help="opt-in: apply the VPA updater's rule (the request in force changes only when it "
                                  "leaves [lowerBound, upperBound], a decrease after 4h) with targets covering "
                                  "this window, e.g. 8h: about two changes a day instead of ten")
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
    from tidewise.arguments import accept_after

    accept_after(p, shared)


def run(args: argparse.Namespace) -> int:
    from contracts.atomic import all_or_none
    from predictor.history import write_long
    from studies.replay.decisions import STEP
    from studies.replay.inputs import load_replay_input
    from studies.replay.runner import check_replicas, replay_all, write_report
    from studies.replay.scores import budget_line, scores
    from tidewise.paths import check_output_path, input_file
    from tidewise.progress import progress

    s = settings_from(args)
    input_file(args.input)
    check_output_path(args.output, what="--output", inputs=[("--input", args.input)])
    if args.report:
        check_output_path(args.report, what="--report", inputs=[("--input", args.input)],
                          outputs=[("--output", args.output)])
    data = load_replay_input(args.input, STEP, need_per_replica=s.kind == "hpa",
                             read_as="cpu" if s.kind == "vpa" else None)
    if s.kind == "hpa":
        check_replicas(data, s.target_utilization, args.input)
    result, out = replay_all(data, s, args.input, progress)
    summary, per_series = scores(s.kind, result, s.target_utilization, s.tolerance)
    with all_or_none({"--output": args.output, "--report": args.report}):  # both land, or neither
        write_long(out, args.output)
        if args.report:
            write_report(args.report, s, result, summary, per_series, args.input, progress)
    first = summary[0] if summary else {}
    budget = budget_line(per_series)
    print(f"replayed {args.kind} for {len(result)} series -> {args.output}: "
          + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in first.items())
          + (f"; {budget}" if budget else ""), file=sys.stderr)
    return 0


def settings_from(args: argparse.Namespace) -> "ReplaySettings":
    """The command line's knobs, checked (exit 2 with the flag named on a bad one)."""
    from autoscaler.settings import HpaSettings, VpaSettings
    from contracts.errors import InputError
    from predictor.durations import format_duration, parse_duration
    from predictor.models import MODELS
    from studies.replay.decisions import STEP
    from studies.replay.runner import ReplaySettings

    if args.model != "auto" and args.model not in MODELS:
        raise InputError(f"--model {args.model!r}: use auto or one of {sorted(MODELS)}")
    from predictor.models.decision_time import backend_problem
    from studies.replay.decision_time import BACKEND, decision_model_for

    decision = decision_model_for(args.kind, getattr(args, "decision_model", None))
    problem = backend_problem(BACKEND[decision]) if decision else None
    if problem:
        raise InputError(f"--decision-model {decision}: {problem}; install libgomp1 (Debian) or use --decision-model gbm")
    if args.kind == "vpa":
        every = parse_duration(args.every, what="--every")
        if every < STEP:
            raise InputError(f"--every {args.every}: at least {format_duration(STEP)} (the history step)")
        vpa = VpaSettings(window="1h")  # the hourly target, applied every hour (the scored default)
        if getattr(args, "hold", None):
            if parse_duration(args.hold, what="--hold") < every:
                raise InputError(f"--hold {args.hold}: at least the decision interval --every {args.every}")
            vpa = VpaSettings(window=args.hold, follow_bounds=True)
        choice_settings(args, vpa)
        return ReplaySettings("vpa", args.model, every=every, decision_model=decision, vpa=vpa,
                              resize=getattr(args, "resize", "in-place"), max_changes=max_changes(args), hpa_pair=hpa_pairing(args))
    if not 0 < args.target_utilization <= 1:
        raise InputError(f"--target-utilization {args.target_utilization}: use a number in (0, 1]")
    if not 0 <= args.tolerance <= 1:  # also refuses nan and inf
        raise InputError(f"--tolerance {args.tolerance}: use a number in [0, 1] (the HPA's default is 0.1)")
    startup = parse_duration(args.startup, what="--startup")
    stabilization = parse_duration(args.stabilization, what="--stabilization")
    hpa = HpaSettings(startup=f"{int(startup.total_seconds())}s")
    if args.quantile is not None:
        if not 0 < args.quantile < 1:
            raise InputError(f"--quantile {args.quantile}: use a number in (0, 1)")
        hpa.quantile = args.quantile
    return ReplaySettings("hpa", args.model, target_utilization=args.target_utilization, tolerance=args.tolerance,
                          startup=startup, stabilization=stabilization, hpa=hpa, decision_model=decision)


def max_changes(args: argparse.Namespace) -> int:
    """--max-changes-per-day, checked."""
    from contracts.errors import InputError

    n = getattr(args, "max_changes_per_day", 3)
    if not 1 <= n <= 288:
        raise InputError(f"--max-changes-per-day {n}: use a whole number from 1 to 288")
    return int(n)


def hpa_pairing(args: argparse.Namespace) -> "tuple[float, float, float] | None":
    """(U, LO, HI) of the HPA a VPA replay pairs with (--hpa-target-utilization, --hpa-target-bounds),
    checked; None without --hpa-target-utilization."""
    from contracts.errors import InputError

    u = getattr(args, "hpa_target_utilization", None)
    bounds = getattr(args, "hpa_target_bounds", "0.5,0.9")
    try:
        lo, hi = (float(b) for b in bounds.split(","))
    except ValueError:
        raise InputError(f"--hpa-target-bounds {bounds!r}: give two utilisations LO,HI, e.g. 0.5,0.9") from None
    if not 0 < lo <= hi <= 1:
        raise InputError(f"--hpa-target-bounds {bounds!r}: use 0 < LO <= HI <= 1")
    if u is None:
        return None
    if not lo <= u <= hi:  # also refuses nan
        raise InputError(f"--hpa-target-utilization {u}: use a number within --hpa-target-bounds {lo:g}..{hi:g}")
    return float(u), lo, hi


def choice_settings(args: argparse.Namespace, vpa: "VpaSettings") -> None:
    """Set the choice-by-cost knobs given on the command line on `vpa` (exit 2 on a bad one)."""
    from contracts.errors import InputError
    from predictor.durations import parse_duration

    vpa.choose_by_cost = bool(getattr(args, "choose_by_cost", False))
    if getattr(args, "cost_window", None):
        if parse_duration(args.cost_window, what="--cost-window") < parse_duration("1h"):
            raise InputError(f"--cost-window {args.cost_window}: at least 1h (a day or more scores a daily tide)")
        vpa.cost_window = args.cost_window
        vpa.cost_min_past = min(vpa.cost_min_past, args.cost_window, key=parse_duration)
    from autoscaler.logic.budget import check_budget

    if getattr(args, "violation_budget", None) is not None:  # the one budget check serve's config also passes
        try:
            vpa.violation_budget = check_budget(args.violation_budget, "--violation-budget")
        except ValueError as exc:
            raise InputError(str(exc)) from None
    checks = (("violation_weight", "--violation-weight", 0.0, 1e6), ("change_weight", "--change-weight", 0.0, 1e6))
    for name, flag, lo, hi in checks:
        value = getattr(args, name, None)
        if value is None:
            continue
        if not lo <= value <= hi:  # also refuses nan
            raise InputError(f"{flag} {value}: use a number in [{lo:g}, {hi:g}]")
        setattr(vpa, name, value)
