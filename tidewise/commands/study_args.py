"""The flags and checks every `tidewise simulate` study shares (colocation, tide, rebalance): where
the services come from (the public traces, the user's own history that `tidewise fetch` wrote, or,
by default where the traces are missing, the demo's), the cluster's size and seed, which policy,
the output folder and the forecasts."""
from __future__ import annotations

import argparse
import os
import sys

DEFAULT_TRACES = os.path.join("..", "shared", "data")
# what `make demo` (`tidewise demo --out demo-out`) writes in the checkout: the default source when
# the traces are not beside it, as on a fresh clone (its requests and replicas as `fetch` writes them)
DEMO_HISTORY = os.path.join("demo-out", "history.parquet")


def add_study_args(c: argparse.ArgumentParser, *, nodes: int, nodes_help: str, days: int, seed_help: str,
                   policies: list[str], out: str, model_help: str, cache_help: str) -> None:
    c.set_defaults(default_nodes=nodes)
    c.add_argument("--traces", metavar="DIR",
                   help=f"folder of real traces laid out like {DEFAULT_TRACES} (default {DEFAULT_TRACES}; where it "
                        f"is missing, the demo's history {DEMO_HISTORY}, as --history, once `make demo` wrote it)")
    c.add_argument("--history", metavar="FILE",
                   help="your own history instead of the traces: the long file `tidewise fetch` wrote "
                        "(.parquet, .csv, .csv.gz); each workload's pods become the online services. "
                        f"The demo's ({DEMO_HISTORY}) works too")
    c.add_argument("--step", default="5m",
                   help="grid the --history file is read on, as `tidewise fetch --step` wrote it (default 5m)")
    c.add_argument("--nodes", type=int, metavar="N",
                   help=f"{nodes_help} (default {nodes}; with --history the fewest that hold its requests)")
    c.add_argument("--days", type=int, default=days,
                   help=f"simulated days: each trace's last whole days (default {days})")
    c.add_argument("--seed", type=int, default=0, help=seed_help)
    c.add_argument("--policy", default="all", choices=["all"] + policies,
                   help="which policy to run, with its sweep (default all)")
    c.add_argument("--out", default=out, metavar="DIR",
                   help=f"output folder, created if missing (its parent must exist; default {out})")
    c.add_argument("--forecast-model", default="auto",
                   help=f"forecasting model for tidewise: auto ({model_help}, default) or one model name")
    c.add_argument("--no-sweeps", action="store_true", help="run each policy's default setting only")
    c.add_argument("--no-cache", action="store_true", help=f"do not read or write DIR/forecast-cache ({cache_help})")


def check_study_args(args: argparse.Namespace) -> None:
    """The flag checks before any work: a known forecasting model, at least one node and day; and the
    default source (the demo's history where neither --traces, --history nor the traces are there)."""
    from contracts.errors import InputError
    from predictor.models import MODELS

    args.fit_nodes = args.nodes is None
    # the source before the study's settings are made from the flags (source_settings); said in check_traces
    args.demo_fallback = args.traces is None and args.history is None and not os.path.isdir(DEFAULT_TRACES) \
        and os.path.isfile(DEMO_HISTORY)
    if args.demo_fallback:
        args.history = DEMO_HISTORY
    if args.nodes is None:
        args.nodes = args.default_nodes
    if args.forecast_model != "auto" and args.forecast_model not in MODELS:
        raise InputError(f"--forecast-model {args.forecast_model!r}: use auto or one of {sorted(MODELS)}")
    if args.nodes < 1 or args.days < 1:
        raise InputError(f"--nodes {args.nodes} and --days {args.days}: each must be at least 1")


def check_traces(args: argparse.Namespace) -> None:
    """After every flag is checked (a bad flag is named even where the traces are missing): the traces
    folder; with --history, only that --traces is not given too (the file and --step are read and
    checked by `harness.history.read_history`, before the output folder is made)."""
    from contracts.errors import InputError

    if args.history is not None:  # --step and the file itself: harness.history.read_history
        if args.traces is not None:
            raise InputError(f"--history {args.history} and --traces {args.traces}: give one of them")
        if args.demo_fallback:
            print(f"no traces in {DEFAULT_TRACES}: reading the demo's history, --history {DEMO_HISTORY} "
                  "(--traces DIR for the public traces)", file=sys.stderr)
        return
    if args.traces is None:
        if not os.path.isdir(DEFAULT_TRACES):
            raise InputError(f"no traces in {DEFAULT_TRACES} and no {DEMO_HISTORY}: run `make demo` first (it "
                             f"writes {DEMO_HISTORY}, read by default then), or pass --history FILE (your own "
                             "history, written by `tidewise fetch --what cpu,requests,replicas --output FILE`) or "
                             "--traces DIR (the public traces)")
        args.traces = DEFAULT_TRACES
    if not os.path.isdir(args.traces):
        raise InputError(f"--traces {args.traces}: no such directory; pass the public traces' folder "
                         "(../shared/data) or --history FILE (your own history, written by `tidewise fetch`)")


def source_settings(args: argparse.Namespace) -> dict:
    """The study settings' fields that say where the services come from (the traces default to
    ../shared/data where check_traces has not run yet)."""
    return {"traces": args.traces or DEFAULT_TRACES, "history": args.history, "history_step": args.step,
            "fit_nodes": args.fit_nodes and args.history is not None}


def cache_dir(args: argparse.Namespace) -> str | None:
    return None if args.no_cache else os.path.join(args.out, "forecast-cache")
