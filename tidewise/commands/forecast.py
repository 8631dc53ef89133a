"""`tidewise forecast` — the fixed forecast contract used by benchmarks and outside evaluators."""
from __future__ import annotations

import argparse
import sys

HELP = """\
Forecast every series of a long file.

Input: CSV, CSV.gz or Parquet with columns series,timestamp,value (timestamp ISO-8601, UTC unless
it carries an offset, or epoch s/ms/us/ns told apart by magnitude; extra label columns allowed;
gaps allowed). Output: CSV with columns
series,timestamp,q<quantile>...,model — one row per series and future step, starting one step
after the latest timestamp in the input, quantiles never crossing.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("forecast", help="forecast quantiles of every series in a long file",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, metavar="PATH", help="long history file (CSV, CSV.gz, Parquet)")
    p.add_argument("--output", required=True, metavar="PATH", help="forecast CSV to write (atomically)")
    p.add_argument("--horizon", default="24h", help="how far ahead (default 24h)")
    p.add_argument("--step", default="5m", help="step of the forecast grid; the input is resampled to it (default 5m)")
    p.add_argument("--quantiles", default="0.5,0.9,0.95,0.99", help="comma-separated, each in (0, 1) (default 0.5,0.9,0.95,0.99)")
    p.add_argument("--registry", metavar="DIR", help="use the trained models in this registry instead of fitting on the input")
    p.add_argument("--registry-key", metavar="FILE", help="HMAC key file: refuse registry versions not signed with it")
    p.add_argument("--model", default="auto", help="auto (default: chosen per series) or one model name")
    p.add_argument("--origin", help="first forecast timestamp (default: latest input timestamp + step)")
    p.add_argument("--allow-negative", action="store_true", default=None,
                   help="accept negative values in every series (default: only in series that are signed throughout)")
    p.add_argument("--duplicates", default="error", choices=["error", "mean", "last"],
                   help="what to do with conflicting values at one timestamp (default: error)")
    p.set_defaults(func=run)


def parse_quantiles(text: str) -> tuple[float, ...]:
    from predictor.errors import InputError

    try:
        qs = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"--quantiles {text!r}: use comma-separated numbers such as 0.5,0.9,0.95,0.99") from None
    if not qs or any(not 0 < q < 1 for q in qs) or len(set(qs)) != len(qs):
        raise InputError(f"--quantiles {text!r}: each must lie strictly between 0 and 1, without repeats")
    return qs


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from predictor.durations import parse_duration
    from predictor.errors import InputError
    from predictor.forecasting import ForecastRequest, forecast_history, forecasts_to_frame
    from predictor.history import load_history, write_long
    from predictor.models import MODELS
    from tidewise.progress import progress

    horizon = parse_duration(args.horizon, what="--horizon")
    step = parse_duration(args.step, what="--step")
    if horizon < step:
        raise InputError(f"--horizon {args.horizon} is shorter than --step {args.step}")
    quantiles = parse_quantiles(args.quantiles)
    if args.model != "auto" and args.model not in MODELS:
        raise InputError(f"--model {args.model!r}: use auto or one of {sorted(MODELS)}")
    origin = None
    if args.origin:
        try:
            origin = pd.Timestamp(args.origin).tz_localize("UTC") if pd.Timestamp(args.origin).tzinfo is None \
                else pd.Timestamp(args.origin).tz_convert("UTC")
        except ValueError:
            raise InputError(f"--origin {args.origin!r} does not parse: use ISO-8601 UTC") from None
    history = load_history(args.input, step, allow_negative=args.allow_negative, duplicates=args.duplicates)
    if not history.series:
        raise InputError(f"input {args.input} holds no values")
    req = ForecastRequest(horizon=horizon, step=step, quantiles=quantiles, model=args.model, origin=origin)
    if args.registry_key and not args.registry:
        raise InputError("--registry-key is only used with --registry DIR")
    if args.registry:
        from predictor.registry import forecast_with_registry, read_key

        key = read_key(args.registry_key) if args.registry_key else None
        forecasts = forecast_with_registry(args.registry, history, req, key=key)
    else:
        with progress("forecasting", len(history.series)) as advance:
            forecasts = forecast_history(history, req, progress=advance)
    frame = forecasts_to_frame(forecasts)
    write_long(frame, args.output)
    models = frame.groupby("model")["series"].nunique().to_dict() if len(frame) else {}
    gaps = sum(1 for g in history.gaps.values() if g.missing_steps)
    print(
        f"forecast {len(forecasts)} series x {req.steps} steps from {frame['timestamp'].min()} -> {args.output} "
        f"(models: {', '.join(f'{k} {v}' for k, v in sorted(models.items()))}; series with gaps: {gaps})",
        file=sys.stderr,
    )
    return 0
