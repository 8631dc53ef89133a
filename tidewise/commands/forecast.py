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
    p.add_argument("--horizon", default="24h", help="how far ahead, at most 35d (default 24h)")
    p.add_argument("--step", default="5m",
                   help="step of the forecast grid, 1m..1d; the input is resampled to it (default 5m)")
    p.add_argument("--quantiles", default="0.5,0.9,0.95,0.99", help="comma-separated, each in (0, 1) (default 0.5,0.9,0.95,0.99)")
    p.add_argument("--registry", metavar="DIR", help="use the trained models in this registry instead of fitting on the input")
    p.add_argument("--registry-key", metavar="FILE", help="HMAC key file: refuse registry versions not signed with it")
    p.add_argument("--model", default="auto", help="auto (default: chosen per series) or one model name")
    p.add_argument("--dask-scheduler", metavar="ADDRESS",
                   help="forecast in shards on this Dask scheduler (tcp://host:8786); with --registry every worker "
                        "must see the registry at the same path")
    p.add_argument("--shard-size", type=int, default=500, metavar="N", help="series per Dask task (default 500)")
    p.add_argument("--origin", help="first forecast timestamp (default: latest input timestamp + step)")
    p.add_argument("--allow-negative", action="store_true", default=None,
                   help="accept negative values in every series (default: only in series that are signed throughout)")
    p.add_argument("--duplicates", default="error", choices=["error", "mean", "last"],
                   help="what to do with conflicting values at one timestamp (default: error)")
    p.set_defaults(func=run)


def parse_quantiles(text: str) -> tuple[float, ...]:
    from contracts.errors import InputError

    try:
        qs = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"--quantiles {text!r}: use comma-separated numbers such as 0.5,0.9,0.95,0.99") from None
    if not qs or any(not 0 < q < 1 for q in qs) or len(set(qs)) != len(qs):
        raise InputError(f"--quantiles {text!r}: each must lie strictly between 0 and 1, without repeats")
    return qs


# Limits of the forecast grid, with their reasons: the models see at most a weekly season, so a
# forecast past 5 weeks repeats the same weeks while claiming knowledge it does not have; and one
# series' grid is horizon/step rows, so 50,000 rows (a week at 15 s) keeps memory per series bounded.
MAX_HORIZON = "35d"
MAX_STEPS = 50_000
MIN_STEP, MAX_STEP = "1m", "1d"  # below a scrape interval is noise; above a day there is no daily tide
MIN_VALUES = 2  # what every model needs to fit (predictor.models.base.check_series)


def check_grid(horizon_text: str, step_text: str):
    """(horizon, step) as Timedeltas, or InputError naming the flag and its limit."""
    import pandas as pd

    from contracts.errors import InputError
    from predictor.durations import parse_duration

    horizon = parse_duration(horizon_text, what="--horizon")
    step = parse_duration(step_text, what="--step")
    if not parse_duration(MIN_STEP) <= step <= parse_duration(MAX_STEP):
        raise InputError(f"--step {step_text}: use {MIN_STEP} to {MAX_STEP} (the models' seasons are daily and weekly)")
    if horizon < step:
        raise InputError(f"--horizon {horizon_text} is shorter than --step {step_text}")
    if horizon > parse_duration(MAX_HORIZON):
        raise InputError(f"--horizon {horizon_text}: at most {MAX_HORIZON} (the models know daily and weekly "
                         "seasons; further ahead they would only repeat them)")
    if horizon / step > MAX_STEPS:
        raise InputError(f"--horizon {horizon_text} at --step {step_text} is {int(horizon / step):,} steps per "
                         f"series; at most {MAX_STEPS:,}: use a longer --step")
    return horizon, step


def check_series_lengths(history, path: str, horizon) -> list[str]:
    """InputError for a series too short to fit any model; warnings (returned and logged) for
    series whose history is shorter than the horizon or than a day: their forecast cannot carry
    a daily tide, and the model column names the fallback that ran."""
    import logging

    import pandas as pd

    from contracts.errors import InputError
    from predictor.durations import format_duration

    short, span_min = [], None
    for key, y in history.series.items():
        values = y.dropna()
        if len(values) < MIN_VALUES:
            raise InputError(f"input {path}: series {key!r} has {len(values)} value(s); forecasting needs at least "
                             f"{MIN_VALUES}: give more history or leave the series out")
        span = values.index[-1] - values.index[0] + history.step
        if span < max(horizon, pd.Timedelta("1D")):
            short.append(key)
            span_min = span if span_min is None else min(span_min, span)
    warnings = []
    if short:
        need = format_duration(max(horizon, pd.Timedelta("1D")))
        warnings.append(
            f"{len(short)} series have less history than {need} (shortest {format_duration(span_min)}, "
            f"e.g. {short[0]!r}): no daily tide can be learnt, their forecast comes from a fallback model (see the "
            "model column); give at least 2 days of history, 2 weeks for weekly seasons")
        logging.getLogger("tidewise.forecast").warning(warnings[-1])
    return warnings


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from contracts.errors import InputError
    from predictor.durations import parse_duration
    from predictor.forecast_output import summary, write_forecasts
    from predictor.pipeline.forecasting import ForecastRequest, forecast_history
    from predictor.history import load_history
    from predictor.models import MODELS
    from tidewise.paths import check_output_path, existing_registry, input_file
    from tidewise.progress import progress

    horizon, step = check_grid(args.horizon, args.step)
    quantiles = parse_quantiles(args.quantiles)
    if args.model != "auto" and args.model not in MODELS:
        raise InputError(f"--model {args.model!r}: use auto or one of {sorted(MODELS)}")
    origin = None
    if args.origin:
        try:
            origin = pd.Timestamp(args.origin).tz_localize("UTC") if pd.Timestamp(args.origin).tzinfo is None \
                else pd.Timestamp(args.origin).tz_convert("UTC")
        except (ValueError, OverflowError):
            raise InputError(f"--origin {args.origin!r} does not parse: use ISO-8601 UTC") from None
    input_file(args.input)
    check_output_path(args.output, what="--output", inputs=[("--input", args.input)])
    if args.registry:
        existing_registry(args.registry)
    history = load_history(args.input, step, allow_negative=args.allow_negative, duplicates=args.duplicates)
    if not history.series:
        raise InputError(f"input {args.input} holds no values")
    warnings = check_series_lengths(history, args.input, horizon)
    if origin is not None:
        last = max(y.index[-1] for y in history.series.values())
        furthest = parse_duration(MAX_HORIZON)
        if not last - furthest <= origin <= last + furthest:
            raise InputError(f"--origin {args.origin}: at most {MAX_HORIZON} from the input's latest timestamp {last}")
    req = ForecastRequest(horizon=horizon, step=step, quantiles=quantiles, model=args.model, origin=origin)
    if args.registry_key and not args.registry:
        raise InputError("--registry-key is only used with --registry DIR")
    forecasts = _forecasts(args, history, req)
    write_forecasts(forecasts, args.output)
    first, models = summary(forecasts)
    gaps = sum(1 for g in history.gaps.values() if g.missing_steps)
    print(
        f"forecast {len(forecasts)} series x {req.steps} steps from {first} -> {args.output} "
        f"(models: {', '.join(f'{k} {v}' for k, v in sorted(models.items()))}; series with gaps: {gaps})",
        file=sys.stderr,
    )
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def _forecasts(args: argparse.Namespace, history, req) -> list:
    """On a Dask cluster (--dask-scheduler), from the registry, or fitted here on the input."""
    from predictor.pipeline.forecasting import forecast_history
    from tidewise.progress import progress

    if getattr(args, "dask_scheduler", None):
        from tidewise.dask_cluster import forecast_on_cluster

        return forecast_on_cluster(args, history, req)
    if args.registry:
        from predictor.registry import read_key
        from predictor.pipeline.serving import forecast_with_registry

        key = read_key(args.registry_key) if args.registry_key else None
        return forecast_with_registry(args.registry, history, req, key=key)
    with progress("forecasting", len(history.series)) as advance:
        return forecast_history(history, req, progress=advance)
