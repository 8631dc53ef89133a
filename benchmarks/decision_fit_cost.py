"""CPU seconds of one fleet fit of the VPA's hour-peak model per backend (BENCHMARKS.md, "LightGBM for the
decision-time models"): `DecisionTimeGBM.fit_many` with the hour-peak features at the levels a violation
budget walks in, on the serving benchmarks' synthetic fleet (`benchmarks.fleet`: CPU and memory of each
workload), at the model's row cap and at a small fleet's size.

    python -m benchmarks.decision_fit_cost [--workloads 17] [--days 35] [--levels 9]

prints a table (a minute at the defaults).
"""
from __future__ import annotations

import argparse
import time

import pandas as pd

from benchmarks.fleet import offline_fleet
from predictor.models.decision_time import BACKENDS, DecisionTimeGBM
from predictor.pipeline.calibration import PEAK_LEVELS

STEP = pd.Timedelta("5min")


def fit_seconds(series: dict[str, pd.Series], backend: str, max_rows: int, levels: tuple[float, ...]
                ) -> tuple[float, int]:
    """(CPU seconds of one fit, its training rows)."""
    model = DecisionTimeGBM(levels, 12, backend, features="hour_peak", max_rows=max_rows)
    t = time.process_time()
    model.fit_many(series, STEP)
    return time.process_time() - t, model.n_rows_


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.decision_fit_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", type=int, default=17, help="workloads of the fleet, two series each (default 17)")
    ap.add_argument("--days", type=int, default=35, help="days of each (default 35, what a replay fit reads)")
    ap.add_argument("--levels", type=int, default=len(PEAK_LEVELS),
                    help=f"fit the first N of the model's {len(PEAK_LEVELS)} levels (default all)")
    a = ap.parse_args(argv)
    levels = tuple(PEAK_LEVELS[: max(1, a.levels)])
    big = dict(offline_fleet(a.workloads, 1, a.days)[1].series)
    short = min(a.days, 10)
    small = {k: y[-short * 288:] for k, y in list(big.items())[:2]}  # a small fleet: 2 series, 10 days
    print(f"one fit of the hour-peak model ({len(levels)} levels), CPU seconds")
    print("| fleet | backend | rows | CPU s | per level |")
    print("|---|---|---|---|---|")
    for name, series, rows in ((f"{len(big)} series x {a.days} d", big, 30000), (f"2 series x {short} d", small, 30000)):
        for backend in BACKENDS:
            sec, n = fit_seconds(series, backend, rows, levels)
            print(f"| {name} | {backend} | {n} | {sec:.2f} | {sec / len(levels):.3f} |")


if __name__ == "__main__":
    main()
