"""The flags and checks every `tidewise simulate` study shares (colocation, tide, rebalance): where
the real traces are, the cluster's size and seed, which policy, the output folder and the forecasts."""
from __future__ import annotations

import argparse
import os


def add_study_args(c: argparse.ArgumentParser, *, nodes: int, nodes_help: str, days: int, seed_help: str,
                   policies: list[str], out: str, model_help: str, cache_help: str) -> None:
    c.add_argument("--traces", default=os.path.join("..", "shared", "data"), metavar="DIR",
                   help="folder of real traces laid out like ../shared/data (default ../shared/data)")
    c.add_argument("--nodes", type=int, default=nodes, metavar="N", help=f"{nodes_help} (default {nodes})")
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
    """The flag checks before any work: a known forecasting model, at least one node and day."""
    from contracts.errors import InputError
    from predictor.models import MODELS

    if args.forecast_model != "auto" and args.forecast_model not in MODELS:
        raise InputError(f"--forecast-model {args.forecast_model!r}: use auto or one of {sorted(MODELS)}")
    if args.nodes < 1 or args.days < 1:
        raise InputError(f"--nodes {args.nodes} and --days {args.days}: each must be at least 1")


def check_traces(args: argparse.Namespace) -> None:
    """After every flag is checked (a bad flag is named even where the traces are missing): the traces folder."""
    from contracts.errors import InputError

    if not os.path.isdir(args.traces):
        raise InputError(f"--traces {args.traces}: no such directory (the real traces live in ../shared/data)")


def cache_dir(args: argparse.Namespace) -> str | None:
    return None if args.no_cache else os.path.join(args.out, "forecast-cache")
