"""The hour-peak path's cost in a serving run (issue 24): every fresh series' raw quantiles at one new
origin (`predictor.pipeline.decision.raw_at_origin`), 20,000 series of 8 days (10,000 workloads x cpu
and memory), a model fitted on 40 synthetic tidal series. Serve pays it once per 5-minute origin.

    python -m benchmarks.tidal_cost
"""
import time, resource, numpy as np, pandas as pd
from predictor.models.decision_time import DecisionTimeGBM
from predictor.pipeline.calibration import PEAK_LEVELS
from predictor.pipeline.decision import raw_at_origin
STEP = pd.Timedelta("5min")
idx = pd.date_range("2024-01-01", periods=288 * 8, freq="5min", tz="UTC")
rng = np.random.default_rng(0)
base = 5 + 2 * np.sin(2 * np.pi * np.arange(len(idx)) / 288)
train = {f"t{k}": pd.Series(base * (1 + k % 7) + rng.gamma(2, 0.3, len(idx)), idx) for k in range(40)}
m = DecisionTimeGBM(PEAK_LEVELS, 12, features="hour_peak").fit_many(train, STEP)
series = {f"s{k}": pd.Series(base * (1 + k % 13) + rng.gamma(2, 0.3, len(idx)), idx) for k in range(20000)}
origin = idx[-1] + STEP
t, c = time.perf_counter(), time.process_time()
out = raw_at_origin(m, series, origin)
print(f"raw_at_origin, 20,000 series x 8 days: {time.perf_counter() - t:.1f} s wall, {time.process_time() - c:.1f} s CPU, "
      f"{len(out)} forecasts, max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
