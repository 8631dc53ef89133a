"""Foresight at a policy's own interval (issue 24, BENCHMARKS.md "Deciding more often"): the reference
scorer judges an in-place VPA against hourly foresight, so a policy that decides every 30 or 15
minutes closes more of that gap by granularity alone. This prices a (slack, violation) point of the
replay against the foresight of its own interval — each interval's request the (1 - violation)
quantile of its own usage, the scorer's `vpa_foresight` at a finer floor — and against the stock
VPA's frontier: `benchmarks.tidal`'s references and `judged` (the scorer's functions on its dev
series), with the own-interval curve added beside the scorer's hourly one.

    python -m benchmarks.foresight_interval --point 30m 0.383 0.050 --point 15m 0.340 0.051

prints, per point, slack / stock at equal violation and the gap closed against hourly foresight and
against the foresight of the point's interval (a few seconds).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import pandas as pd

from benchmarks.tidal import judged, references, scorer, suite, used
from predictor.durations import format_duration


def foresight(use: pd.Series, every: pd.Timedelta, violation: float) -> pd.Series:
    """Each `every` window at the (1 - violation) quantile of its own usage (its maximum at 0)."""
    groups = use.groupby(use.index.floor(every))
    peaks = groups.quantile(1.0 - violation) if violation else groups.max()
    return peaks.reindex(use.index, method="ffill")


def with_foresight(refs: dict[str, dict[str, Any]], data: dict[str, pd.Series], windows: dict,
                   every: pd.Timedelta) -> None:
    """Adds each series' foresight curve at `every` to `benchmarks.tidal.references`' own, keyed
    (every, violation) beside its (blocks a day, violation) ones, so that `judged` prices a point on it."""
    bd = scorer()
    for k, r in refs.items():
        use = used(data[k], *windows[k])
        for v in bd.FORESIGHT_VIOLATIONS:
            r["foresight"][(every, v)] = bd.vpa_scores(use, foresight(use, every, v))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.foresight_interval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--point", nargs=3, action="append", metavar=("INTERVAL", "SLACK", "VIOLATION"), default=[],
                    help="a policy's interval (e.g. 30m) and its mean slack and violation from the scorer")
    a = ap.parse_args(argv)
    try:
        points = [(pd.Timedelta(e), float(sl), float(v)) for e, sl, v in a.point]
    except ValueError as e:
        print(f"--point: {e}; give e.g. --point 30m 0.383 0.050", file=sys.stderr)
        return 2
    if not points:
        ap.error("give at least one --point INTERVAL SLACK VIOLATION")
    data, windows = suite(quick=False)
    refs = references(data, windows)
    keys = list(refs)
    for every in {e for e, _, _ in points}:
        with_foresight(refs, data, windows, every)
    print("| interval | slack | violation | slack / stock | gap (hourly foresight) | gap (own-interval foresight) |")
    print("|---|---|---|---|---|---|")
    for every, slack, violation in points:
        hourly = judged((slack, violation), refs, keys, 24)  # the scorer's hourly foresight
        own = judged((slack, violation), refs, keys, every)  # type: ignore[arg-type]  # keyed by the interval
        print(f"| {format_duration(every)} | {slack:.3f} | {violation:.3f} | {hourly['vs_stock']:.3f} "
              f"| {hourly['gap_closed']:.3f} | {own['gap_closed']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
