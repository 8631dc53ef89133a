"""`tidewise report` — the self-contained HTML forecast report of a registry."""
from __future__ import annotations

import argparse
import sys

HELP = """\
Write one self-contained HTML file (plots embedded, no network) for a registry version: a fleet
table (class, seasonality strength, chosen model, backtest skill against daily seasonal naive,
coverage of q0.95) and one plot per workload (recent history, forecast band, peak windows).

The history comes from the registry's stored recent window, or from --input when given.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write the HTML forecast report of a registry",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--registry", default="models", metavar="DIR", help="registry folder (default models/)")
    p.add_argument("--out", default="report.html", metavar="PATH", help="HTML file to write (default report.html)")
    p.add_argument("--input", metavar="PATH", help="history file to forecast from (default: the registry's stored recent history)")
    p.add_argument("--horizon", default="24h", help="forecast horizon shown (default 24h)")
    p.add_argument("--registry-key", metavar="FILE", help="HMAC key file: refuse a version not signed with it")
    p.add_argument("--max-plots", type=int, default=200, help="plot at most this many series (default 200)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from contracts.errors import InputError
    from predictor.durations import parse_duration
    from training.fleet_report import write_registry_report

    from tidewise.paths import check_output_path, existing_registry

    horizon = parse_duration(args.horizon, what="--horizon")
    existing_registry(args.registry)
    check_output_path(args.out, what="--out")
    if args.max_plots < 0:
        raise InputError("--max-plots must be 0 or more")
    key = None
    if args.registry_key:
        from predictor.registry import read_key

        key = read_key(args.registry_key)
    summary = write_registry_report(args.registry, args.out, input_path=args.input, horizon=horizon,
                                    max_plots=args.max_plots, key=key)
    print(summary, file=sys.stderr)
    return 0
