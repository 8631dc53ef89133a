"""`--dask-scheduler ADDRESS` for `tidewise train` and `tidewise forecast`: connect (a missing
`dask` extra is exit 2, an unreachable scheduler exit 1), shard the history the command read, and
print one line per finished shard while the bar counts series."""
from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any, Callable, Iterator

SHARD_HELP = "series per Dask task with --dask-scheduler (default 500)"


@contextlib.contextmanager
def dask_client(address: str | None) -> Iterator[Any]:
    """A connected `dask.distributed.Client`, closed on exit; None when no address was given."""
    if not address:
        yield None
        return
    from contracts.errors import InputError, SourceError

    try:
        from dask.distributed import Client
    except ImportError:
        raise InputError("--dask-scheduler needs dask.distributed: pip install 'tidewise[dask]'") from None
    try:
        client = Client(address, timeout="10s")
    except OSError as exc:
        raise SourceError(f"--dask-scheduler {address}: cannot connect ({exc})") from None
    try:
        yield client
    finally:
        client.close()


def check_shard_size(args: argparse.Namespace) -> int:
    from contracts.errors import InputError

    size = int(getattr(args, "shard_size", 500))
    if size < 1:
        raise InputError(f"--shard-size {size}: give at least 1 series per shard (default 500)")
    return size


def shard_printer(total: int, advance: Callable[[int], None]) -> Callable[[Any], None]:
    """Progress per shard: the bar advances by the shard's series and a line names the shard."""

    def report(shard: Any) -> None:
        advance(shard.series)
        print(shard.line(total), file=sys.stderr, flush=True)

    return report


def forecast_on_cluster(args: argparse.Namespace, history: Any, req: Any) -> list[Any]:
    """`tidewise forecast --dask-scheduler`: every shard forecast on the cluster from the whole
    history's origin; with --registry every worker reads the registry at the same path."""
    import dataclasses
    import os

    from tidewise.progress import progress
    from training.sharded import forecast_sharded, split_history

    key = None
    if args.registry_key:
        from predictor.registry import read_key

        key = read_key(args.registry_key)
    if req.origin is None:
        req = dataclasses.replace(req, origin=history.end + req.step)
    shards = split_history(history, check_shard_size(args))
    registry = os.path.abspath(args.registry) if args.registry else None
    with dask_client(args.dask_scheduler) as client, progress("forecasting", len(history.series)) as advance:
        return forecast_sharded(shards, req, client, registry=registry, key=key,
                                progress=shard_printer(len(shards), advance))
