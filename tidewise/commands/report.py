"""`tidewise report` — the self-contained HTML forecast report of a registry."""
from __future__ import annotations

import argparse
import sys

HELP = """\
Write one self-contained HTML file (plots embedded, no network) for a registry version: a fleet
table (class, seasonality strength, chosen model, backtest skill against daily seasonal naive,
coverage of q0.95) and one plot per workload (recent history, forecast band, peak windows).

The history comes from the registry's stored recent window, or from --input when given.

With --cost PRICES.yaml it writes the cost report instead (no registry read): what Tidewise saved,
priced per namespace at peak and off-peak prices per core-hour and GiB-hour, from whichever of
--history, --cluster-state, --vpa-replay, --colocation and --tide are given (a lever whose input is
absent is "not measured", with the reason). Writes --out (HTML) and, beside it, .json and .csv.
A commented prices file to start from: `tidewise docs prices.example.yaml > prices.yaml`
(installed with the package; `tidewise docs --path prices.example.yaml` prints where). See
`tidewise docs cost-report`.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write the HTML forecast report of a registry, or (--cost) what Tidewise saved, priced",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--registry", default="models", metavar="DIR", help="registry folder (default models/)")
    p.add_argument("--out", default="report.html", metavar="PATH", help="HTML file to write (default report.html)")
    p.add_argument("--input", metavar="PATH", help="history file to forecast from (default: the registry's stored recent history)")
    p.add_argument("--horizon", default="24h", help="forecast horizon shown (default 24h)")
    p.add_argument("--registry-key", metavar="FILE", help="HMAC key file: refuse a version not signed with it")
    p.add_argument("--max-plots", type=int, default=200, help="plot at most this many series (default 200)")
    c = p.add_argument_group("cost report (--cost; docs/cost-report.md)")
    c.add_argument("--cost", metavar="PRICES.yaml", help="price what Tidewise saved (a commented example: "
                                                          "`tidewise docs prices.example.yaml > prices.yaml`)")
    c.add_argument("--history", metavar="FILE", help="long usage history (series,timestamp,value): used")
    c.add_argument("--cluster-state", metavar="FILE", help="cluster YAML/JSON (as serve reads): requests")
    c.add_argument("--vpa-replay", metavar="FILE", help="`tidewise replay vpa --output` CSV: Tidewise's requests")
    c.add_argument("--colocation", metavar="FILE", help="results.json of `tidewise simulate colocation`")
    c.add_argument("--tide", metavar="FILE", help="results.json of `tidewise simulate tide`")
    c.add_argument("--node-size", metavar="CORES,GIB", help="size of a tide node (default: from --tide's file)")
    p.set_defaults(func=run)


def run_cost(args: argparse.Namespace) -> int:
    from contracts.atomic import all_or_none
    from contracts.errors import InputError
    from studies.cost.page import sibling_paths, summary_lines, write_outputs
    from studies.cost.prices import load_prices
    from studies.cost.report import CostInputs, build_report

    from tidewise.paths import check_output_path, input_file

    prices = load_prices(args.cost)
    given = CostInputs(history=args.history, cluster_state=args.cluster_state, vpa_replay=args.vpa_replay,
                       colocation=args.colocation, tide=args.tide, node_size=node_size(args.node_size))
    if not (given.history or given.vpa_replay or given.colocation or given.tide):
        raise InputError("--cost needs at least one of --history, --vpa-replay, --colocation, --tide to price")
    if args.out.lower().endswith((".json", ".csv")):
        raise InputError(f"--out {args.out}: give the page's path (e.g. cost.html); the .json and .csv go beside it")
    for flag, path in (("--history", args.history), ("--vpa-replay", args.vpa_replay)):
        if path:
            input_file(path, flag)
    outputs = {"--out" if what == "report" else f"--out's {what}": path for what, path in sibling_paths(args.out).items()}
    for what, path in outputs.items():
        check_output_path(path, what=what, inputs=[
            ("--cost", args.cost), ("--history", args.history), ("--vpa-replay", args.vpa_replay),
            ("--cluster-state", args.cluster_state), ("--colocation", args.colocation), ("--tide", args.tide)])
    report = build_report(prices, given)
    with all_or_none(outputs):  # the page, its .json and .csv: all three, or none
        paths = write_outputs(report, args.out)
    print("\n".join(summary_lines(report)), file=sys.stderr)
    print(f"wrote {paths['report']}, {paths['json']}, {paths['csv']}", file=sys.stderr)
    return 0


def node_size(text: str | None) -> tuple[float, float] | None:
    """--node-size CORES,GIB (e.g. 32,128)."""
    from contracts.errors import InputError

    if text is None:
        return None
    try:
        cores, gib = (float(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"--node-size {text!r}: give CORES,GIB, e.g. --node-size 32,128") from None
    if not (cores > 0 and gib > 0) or float("inf") in (cores, gib):
        raise InputError(f"--node-size {text!r}: cores and GiB must be finite and > 0, e.g. 32,128")
    return cores, gib


def run(args: argparse.Namespace) -> int:
    from contracts.errors import InputError
    from predictor.durations import parse_duration
    from training.fleet_report import write_registry_report

    from tidewise.paths import check_output_path, existing_registry
    from tidewise.progress import progress

    if args.cost:
        return run_cost(args)
    horizon = parse_duration(args.horizon, what="--horizon")
    existing_registry(args.registry)
    check_output_path(args.out, what="--out", inputs=[("--input", args.input)])
    if args.max_plots < 0:
        raise InputError("--max-plots must be 0 or more")
    key = None
    if args.registry_key:
        from predictor.registry import read_key

        key = read_key(args.registry_key)
    summary = write_registry_report(args.registry, args.out, input_path=args.input, horizon=horizon,
                                    max_plots=args.max_plots, key=key, progress=progress)
    print(summary, file=sys.stderr)
    return 0
