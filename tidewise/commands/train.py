"""`tidewise train` — backtest, choose and calibrate a model per series, save a registry version."""
from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from training.decision_time import DecisionTimeSettings

HELP = """\
Train every series of a history: rolling-origin backtests of the candidate forecasters (seasonal
naive daily/weekly, seasonal median, STL, decaying histogram, and one global gradient-boosted
quantile model shared by the fleet), a per-series choice by pinball loss at q0.95 (the mean of
seasonal median, STL and the global model unless one candidate is clearly better; no daily-seasonal
model for a series without a daily cycle), conformal calibration of the quantiles on the backtest
residuals, then a new version in the registry:
DIR/<version>/manifest.json + artifacts, and DIR/latest pointing at it.

No model needing more history than serving fetches (--serving-history, default 8d: serve's
loop.history_window) is chosen. Artifacts are JSON and NumPy arrays, never pickles; with
--registry-key FILE the manifest is signed (HMAC-SHA256) for forecast/report/serve to verify.

Incremental by default: series whose data did not change and whose recent error did not drift are
carried forward from the latest version. `--every 24h` keeps training on that schedule.

Decision-time models (on unless --no-decision-time): one global quantile model per decision of the
peak of the next --vpa-interval (VPA, default 1h: serve's in-place VPA decides once an interval) and
of the demand a start-up time ahead (HPA), from the latest samples;
backtested on the held-out days against the day-ahead forecast of the same targets (pinball per
quantile, coverage; printed and kept in the manifest) and stored in the version for serve.
"""


def register(sub: argparse._SubParsersAction) -> None:
    from tidewise.commands.fetch import add_prometheus_args

    p = sub.add_parser("train", help="backtest, select and calibrate models; write a registry version",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", choices=["file", "synthetic", "prometheus"], default="file",
                   help="where the history comes from (default file)")
    p.add_argument("--input", metavar="PATH", help="long history file for --source file (CSV, CSV.gz, Parquet)")
    p.add_argument("--registry", default="models", metavar="DIR", help="registry folder (default models/)")
    p.add_argument("--step", default="5m", help="step of the history (default 5m)")
    p.add_argument("--quantiles", default="0.5,0.9,0.95,0.99", help="quantiles to train (default 0.5,0.9,0.95,0.99)")
    p.add_argument("--folds", type=int, default=3, help="backtest days per series (default 3)")
    p.add_argument("--last", default="28d", help="history window for --source prometheus|synthetic (default 28d)")
    p.add_argument("--jobs", type=int, default=1, help="joblib processes for the per-series backtests (default 1; -1 = all cores)")
    p.add_argument("--dask-scheduler", metavar="ADDRESS",
                   help="train in shards on this Dask scheduler (tcp://host:8786): each shard plans its incremental "
                        "refits, backtests and chooses on a worker; one line per finished shard")
    p.add_argument("--shard-size", type=int, default=500, metavar="N", help="series per Dask task (default 500)")
    p.add_argument("--full", action="store_true", help="refit every series (default: incremental)")
    p.add_argument("--no-global", action="store_true", help="leave the global GBM out of the candidates")
    p.add_argument("--serving-history", default="8d", metavar="DURATION",
                   help="history the serving loop fetches (its loop.history_window, default 8d): no model needing "
                        "more is chosen, and the report's stored history spans this much")
    p.add_argument("--registry-key", metavar="FILE",
                   help="HMAC key file (e.g. a mounted Secret): sign the new version; the previous one must verify with it")
    p.add_argument("--no-decision-time", action="store_true",
                   help="fit no decision-time models (serve then decides from the day-ahead forecast only)")
    p.add_argument("--decision-backend", choices=("lightgbm", "hgb"), default="lightgbm",
                   help="decision-time model backend (default lightgbm; hgb = scikit-learn's HistGradientBoosting)")
    p.add_argument("--vpa-interval", default="1h", metavar="DURATION",
                   help="how often serve's in-place VPA decides: the VPA model forecasts the peak of the next "
                        "DURATION (default 1h; 30m: leaner requests at the same violation rate for ~1.8x the resizes, "
                        "BENCHMARKS.md); a multiple of --step under 12h")
    p.add_argument("--every", metavar="DURATION", help="keep running: train again every DURATION (e.g. 24h)")
    p.add_argument("--seed", type=int, default=7, help="seed of --source synthetic (default 7)")
    p.add_argument("--workloads", type=int, default=12, help="workloads of --source synthetic (default 12)")
    p.add_argument("--allow-negative", action="store_true", default=None,
                   help="accept negative values in every series of --input (default: only signed series)")
    add_prometheus_args(p)
    p.set_defaults(func=run)


def load_source_history(args: argparse.Namespace, step):
    import pandas as pd

    from contracts.errors import InputError
    from predictor.durations import parse_duration

    if args.source == "file":
        from predictor.history import load_history

        if not args.input:
            raise InputError("--source file needs --input PATH (a long series,timestamp,value file)")
        return load_history(args.input, step, allow_negative=args.allow_negative)
    window = parse_duration(args.last, what="--last")
    if args.source == "synthetic":
        from predictor.history import history_from_frame
        from predictor.sources.synthetic import generate_cluster

        cluster = generate_cluster(seed=args.seed, workloads=args.workloads, days=window / pd.Timedelta(days=1), step=step)
        return history_from_frame(cluster.history(), step, source="synthetic")
    from predictor.sources.prometheus import PrometheusSource
    from tidewise.commands.fetch import prometheus_settings

    end = pd.Timestamp.now(tz="UTC").floor(step)
    history = PrometheusSource(prometheus_settings(args)).fetch(end - window, end, step)
    for name, why in history.failed.items():
        print(f"warning: {name}: {why}", file=sys.stderr)
    return history


def without_short_series(history, args: argparse.Namespace):
    """A series with fewer values than any model needs is refused from a file (exit 2, as `forecast`
    does: the user can fix the file) and skipped with a warning from Prometheus or synthetic data (a
    pod that just started must not stop the fleet's nightly training; it is trained once it has history)."""
    from contracts.errors import InputError
    from tidewise.commands.forecast import MIN_VALUES

    short = {k: int(y.count()) for k, y in history.series.items() if y.count() < MIN_VALUES}
    if not short:
        return history
    first = sorted(short)[0]
    if args.source == "file":
        raise InputError(f"--input {args.input}: series {first!r} has {short[first]} value(s)"
                         + (f" ({len(short)} such series)" if len(short) > 1 else "")
                         + f"; training needs at least {MIN_VALUES}: give more history or leave the series out")
    print(f"warning: skipped {len(short)} series with fewer than {MIN_VALUES} values (e.g. {first!r}): "
          "nothing to fit yet; they are trained once they have history", file=sys.stderr)
    history.series = {k: y for k, y in history.series.items() if k not in short}
    return history


def train_once(args: argparse.Namespace) -> int:
    from contracts.errors import InputError
    from predictor.durations import parse_duration
    from tidewise.commands.forecast import parse_quantiles
    from tidewise.progress import progress
    from training.decision_time import summary_lines
    from training.pipeline import TrainSettings, train

    step = parse_duration(args.step, what="--step")
    if args.folds < 1:
        raise InputError(f"--folds {args.folds}: at least 1 backtest day is needed")
    if args.jobs == 0:
        raise InputError("--jobs 0: use 1 (in-process), N processes, or -1 for all cores")
    from tidewise.dask_cluster import check_shard_size, dask_client

    shard_size = check_shard_size(args)
    serving_history = parse_duration(args.serving_history, what="--serving-history")
    if serving_history < step:
        raise InputError(f"--serving-history {args.serving_history}: shorter than --step {args.step}; "
                         "give what serve fetches (default 8d)")
    decision = decision_settings(args, step)  # a bad --vpa-interval or backend: exit 2 before the history is read
    key = None
    if args.registry_key:
        from predictor.registry import read_key

        key = read_key(args.registry_key)
    from tidewise.paths import registry_to_write

    registry_to_write(args.registry)  # a file there, or a missing parent: exit 2 before the backtests
    history = without_short_series(load_source_history(args, step), args)
    if not history.series:
        raise InputError(f"--source {args.source} returned no series to train on")
    settings = TrainSettings(quantiles=parse_quantiles(args.quantiles), folds=args.folds, jobs=args.jobs,
                             incremental=not args.full, use_global=not args.no_global,
                             serving_history=serving_history, key=key, decision_time=decision)
    t = time.perf_counter()
    with dask_client(args.dask_scheduler) as client, progress("training", len(history.series)) as advance:
        if client is None:
            result = train(history, args.registry, settings, progress=advance)
        else:
            result = train_on_cluster(history, args.registry, settings, client, shard_size, advance)
    models = ", ".join(f"{k} {v}" for k, v in result.models.items())
    print(f"trained {len(result.refitted)} series, carried {len(result.carried)} forward "
          f"(global model {'refitted' if result.global_refit else 'carried'}) in {time.perf_counter() - t:.0f} s "
          f"-> {result.registry}/{result.version} (models: {models})", file=sys.stderr)
    for line in summary_lines(result.decision_time):
        print(line, file=sys.stderr)
    for series, why in sorted(result.failed.items())[:10]:
        print(f"warning: {series}: backtest failed ({why}); stored the no-backtest default", file=sys.stderr)
    return 0


def train_on_cluster(history, registry: str, settings, client, shard_size: int, advance):
    """`--dask-scheduler`: the history in shards of `shard_size` series, trained on the workers;
    the global model (unless --no-global) is fitted here first, on every series."""
    from tidewise.dask_cluster import shard_printer
    from training.sharded import fit_global_models, split_history, train_sharded

    if settings.decision_time.enabled:
        print("note: a sharded run fits no decision-time models (they learn from the whole fleet at once); "
              "serve decides from the day-ahead forecast for this version", file=sys.stderr)
    shards = split_history(history, shard_size)
    return train_sharded(shards, registry, settings, client, step=history.step,
                         global_models=fit_global_models(history, settings), progress=shard_printer(len(shards), advance))


def decision_settings(args: argparse.Namespace, step: pd.Timedelta) -> DecisionTimeSettings:
    """The decision-time part of the run, checked before any history is read: --vpa-interval a
    multiple of the step under half a day (what the hour-peak features can forecast), lightgbm
    loadable (LightGBM needs the system's OpenMP runtime)."""
    from contracts.errors import InputError
    from predictor.durations import format_duration, parse_duration
    from predictor.features.hour_peak import max_span
    from predictor.models.decision_time import DEFAULT_BACKEND, backend_problem
    from training.decision_time import DecisionTimeSettings

    backend = getattr(args, "decision_backend", DEFAULT_BACKEND)
    raw = getattr(args, "vpa_interval", "1h")
    interval = parse_duration(raw, what="--vpa-interval")
    if interval < step or interval % step or interval / step >= max_span(step):
        raise InputError(f"--vpa-interval {raw}: use a multiple of the step {format_duration(step)} "
                         "under 12h (e.g. 30m or 1h)")
    problem = backend_problem(backend)
    if problem:
        raise InputError(f"--decision-backend {backend}: {problem}; install libgomp1 (Debian) or use hgb")
    return DecisionTimeSettings(enabled=not getattr(args, "no_decision_time", False), backend=backend,
                                vpa_window=interval)


def run(args: argparse.Namespace) -> int:
    if not args.every:
        return train_once(args)
    from predictor.durations import parse_duration
    from training.schedule import run_every

    period = parse_duration(args.every, what="--every").total_seconds()
    run_every(period, lambda: train_once(args), say=lambda line: print(line, file=sys.stderr, flush=True))
    return 0
