"""Foresight at a policy's own interval (issue 24, BENCHMARKS.md "Deciding more often"): the reference
scorer judges an in-place VPA against hourly foresight, so a policy that decides every 30 or 15
minutes closes more of that gap by granularity alone. This prices a (slack, violation) point of the
replay against the foresight of its own interval — each interval's request the (1 - violation)
quantile of its own usage, the scorer's `vpa_foresight` at a finer floor — and against the stock
VPA's frontier, with the scorer's functions (`vpa_scores`, `vpa_histogram_requests`,
`slack_at_violation`) on its dev series.

    python -m benchmarks.foresight_interval --point 30m 0.383 0.050 --point 15m 0.340 0.051

prints, per point, slack / stock at equal violation and the gap closed against hourly foresight and
against the foresight of the point's interval (a few seconds).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from benchmarks.tidal import scorer, suite, used
from predictor.durations import format_duration


def foresight(use: pd.Series, every: pd.Timedelta, violation: float) -> pd.Series:
    """Each `every` window at the (1 - violation) quantile of its own usage (its maximum at 0)."""
    groups = use.groupby(use.index.floor(every))
    peaks = groups.quantile(1.0 - violation) if violation else groups.max()
    return peaks.reindex(use.index, method="ffill")


def curves(intervals: list[pd.Timedelta]) -> tuple[list[tuple[float, float]], dict[pd.Timedelta, list[tuple[float, float]]]]:
    """The mean stock frontier and, per interval, the mean foresight curve over the dev series."""
    bd = scorer()
    data, windows = suite(quick=False)
    frontier: dict[tuple[float, float], list] = {}
    bound: dict[tuple[pd.Timedelta, float], list] = {}
    for k, s in data.items():
        start, end = windows[k]
        use = used(s, start, end)
        hist = bd.vpa_histogram_requests(s, start, end, bd.VPA_PCTS)
        for p in bd.VPA_PCTS:
            for m in bd.VPA_MARGINS:
                frontier.setdefault((p, m), []).append(bd.vpa_scores(use, (hist[p] * m).reindex(use.index)))
        for every in intervals:
            for v in bd.FORESIGHT_VIOLATIONS:
                bound.setdefault((every, v), []).append(bd.vpa_scores(use, foresight(use, every, v)))

    def mean(points: list) -> tuple[float, float]:
        a = np.array(points, dtype=float)
        return float(np.nanmean(a[:, 0])), float(np.nanmean(a[:, 1]))

    return ([mean(p) for p in frontier.values()],
            {e: [mean(bound[(e, v)]) for v in bd.FORESIGHT_VIOLATIONS] for e in intervals})


def gap(stock: float, best: float, slack: float) -> float:
    return (stock - slack) / (stock - best) if stock > best else float("nan")


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
    hour = pd.Timedelta("1h")
    bd = scorer()
    frontier, bounds = curves(sorted({hour, *(e for e, _, _ in points)}))
    print("| interval | slack | violation | slack / stock | gap (hourly foresight) | gap (own-interval foresight) |")
    print("|---|---|---|---|---|---|")
    for every, slack, violation in points:
        stock = bd.slack_at_violation(frontier, violation)
        hourly = bd.slack_at_violation(bounds[hour], violation)
        own = bd.slack_at_violation(bounds[every], violation)
        print(f"| {format_duration(every)} | {slack:.3f} | {violation:.3f} | {slack / stock:.3f} | {gap(stock, hourly, slack):.3f} "
              f"| {gap(stock, own, slack):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
