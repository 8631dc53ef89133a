"""`tidewise profile` — service profiles (weekly tide, peak/trough windows, class) as JSON."""
from __future__ import annotations

import argparse
import sys

HELP = """\
Profile every series of a long file: weekly tidal curve (weekday x quarter-hour P50 and P95), peak
and trough windows (UTC), peak-to-trough ratio, seasonality strength (ACF at 1 day and 1 week),
burstiness, trend, usage per unit of business traffic where a traffic series exists, and a class:
tidal, flat, bursty, trending or insufficient-history, with the reason.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="service profiles of every series as JSON",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, metavar="PATH", help="long history file (CSV, CSV.gz, Parquet)")
    p.add_argument("--output", metavar="PATH", help="JSON file to write (default: standard output)")
    p.add_argument("--step", default="5m", help="resample the input to this step (default 5m)")
    p.add_argument("--allow-negative", action="store_true", default=None, help="accept negative values")
    p.add_argument("--duplicates", default="error", choices=["error", "mean", "last"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from contracts.atomic import write_text_atomic
    from predictor.durations import parse_duration
    from predictor.history import load_history
    from predictor.profile import build_profiles

    from tidewise.paths import check_output_path, input_file
    from tidewise.progress import progress

    step = parse_duration(args.step, what="--step")
    input_file(args.input)
    if args.output:
        check_output_path(args.output, what="--output", inputs=[("--input", args.input)])
    history = load_history(args.input, step, allow_negative=args.allow_negative, duplicates=args.duplicates)
    with progress("profiling", len(history.series)) as advance:
        profiles = build_profiles(history, progress=advance)
    text = json.dumps({k: p.to_dict() for k, p in profiles.items()}, indent=1, allow_nan=False)
    if args.output:
        write_text_atomic(args.output, text + "\n")
    else:
        sys.stdout.write(text + "\n")
    counts: dict[str, int] = {}
    for p in profiles.values():
        counts[p.profile_class] = counts.get(p.profile_class, 0) + 1
    print(f"profiled {len(profiles)} series: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
          file=sys.stderr)
    return 0

