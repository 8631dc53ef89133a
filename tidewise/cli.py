"""`tidewise` — one subcommand per job. Each subcommand lives in `tidewise/commands/<name>.py`
with `register(subparsers)` (argparse only) and imports its package lazily in `run`, so that
`tidewise forecast` never imports `kubernetes`."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from tidewise import __version__

# Subcommand modules, in the order `--help` lists them.
COMMANDS = [
    "fetch",
    "forecast",
    "profile",
    "demo",
    "train",
    "report",
    "replay",
    "serve",
    "extender",
    "rebalance",
    "enforce",
    "simulate",
    "docs",
]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
# the project's own packages: one of them missing is a broken install, not a missing dependency
PACKAGES = ("contracts", "predictor", "training", "autoscaler", "extender", "node_enforcer", "studies", "tidewise",
            "reports")


def build_parser() -> argparse.ArgumentParser:
    from tidewise.commands.docs import where

    parser = argparse.ArgumentParser(
        prog="tidewise",
        description=(
            "Forecast the daily and weekly tide of Kubernetes workloads' CPU and memory and turn it "
            "into decisions: VPA requests, predictive HPA replicas and reclaimable node resources."
        ),
        epilog=f"Run `tidewise COMMAND --help` for a command's options. Docs: {where()}.",
    )
    parser.add_argument("--version", action="version", version=f"tidewise {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    parser.add_argument("--config", metavar="FILE", help="YAML settings file (`tidewise docs readme`, 'Configuration')")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"tidewise.commands.{name}").register(sub)
    from tidewise.arguments import accept_after

    # `tidewise serve --config FILE -v` as `tidewise --config FILE -v serve`
    accept_after(parser, [a for a in parser._actions if a.dest in ("verbose", "config")])
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    from tidewise.arguments import count, empty_path

    empty = empty_path(parser, args)
    if empty:  # before any work: `train --registry ''` would otherwise train, then fail to write
        print(f"tidewise {args.command}: error: {empty}", file=sys.stderr)
        return EXIT_USAGE
    args.verbose = count(args, "verbose")
    logging.basicConfig(
        level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.verbose < 2:
        # retries are reported by our own error line; urllib3's per-retry warnings are noise
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    from tidewise.paths import new_folders

    with new_folders() as made:
        code = _run(args)
        if code == EXIT_USAGE:  # refused: no empty output folder left behind
            made.remove_empty()
    return code


def _run(args: argparse.Namespace) -> int:
    """The subcommand, its errors as one line and an exit code (2: the input, 1: the run)."""
    from contracts.errors import InputError, TidewiseError
    from tidewise.config import load_config

    try:
        args.settings = load_config(args.config)
        return int(args.func(args) or EXIT_OK)
    except InputError as exc:
        print(f"tidewise {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TidewiseError as exc:
        print(f"tidewise {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"tidewise {args.command}: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        # the node agent's image installs only what `tidewise enforce` needs (pyproject's `agent` list)
        missing = (exc.name or "").split(".")[0]
        if not missing or missing in PACKAGES:
            raise
        print(f"tidewise {args.command}: error: the Python package {missing} is not installed here; this command "
              "needs the full install (`pip install tidewise`, or the tidewise image: the tidewise-agent image "
              "runs `tidewise enforce` only)", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    raise SystemExit(main())
