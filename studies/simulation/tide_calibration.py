"""The forecaster's own errors at each lead, as the tide policy saw them: the calibrated margin.

Each minute the policy observes the pool's requested cores (the minute that just ended) and
records, for every forecast whose horizon covers that minute, the error `observed - median
forecast` under the hour of lead it was made at (0-1 h, 1-2 h, ...). Only minutes already
observed are recorded, so a margin read at minute t holds no error from after t (tested by
changing the future). `margins()` is `autoscaler.logic.tide.forecast_margin` over the last
`window` minutes of errors per lead hour, refreshed when a new forecast arrives. The same is kept
for the need measured now used as a forecast `reaction` minutes ahead (how far it rose in the time
a hand-back takes): `rise()`, the floor's margin.
"""
from __future__ import annotations

import numpy as np

from autoscaler.logic.tide import forecast_margin
from studies.simulation.tide_forecasts import PoolForecasts

BUCKET = 60  # minutes of lead per bucket: the forecasts are hourly, their error grows with the hour of lead


class ForecastErrors:
    """Ring buffers of past errors per lead hour (cores), from observations only."""

    def __init__(self, forecasts: PoolForecasts, window: int, reaction: int, median: float = 0.5):
        self.forecasts, self.window, self.q = forecasts, window, forecasts.quantiles.index(median)
        n_buckets = -(-forecasts.values.shape[2] // BUCKET)
        self.errors = np.full((n_buckets, window), np.nan)
        self.count = np.zeros(n_buckets, dtype=np.int64)
        # the measured need as a forecast: its error over a reaction time (a hand-back decided now
        # serves `reaction` minutes later) is how far the need rose in that time
        self.reaction = reaction
        self.seen: list[float] = []
        self.rises = np.full(window, np.nan)
        self.n_rises = 0

    def observe(self, t: int, requested: float) -> None:
        """Minute t ended with `requested` cores: the error of every forecast made at or before t
        whose horizon reaches t."""
        self.seen.append(requested)
        if len(self.seen) > self.reaction:
            self.rises[self.n_rises % self.window] = requested - self.seen[-1 - self.reaction]
            self.n_rises += 1
            self.seen = self.seen[-self.reaction - 1:]
        fc = self.forecasts
        horizon = fc.values.shape[2]
        o = np.flatnonzero((fc.origins <= t) & (t - fc.origins < horizon))
        for i in o:
            lead = int(t - fc.origins[i])
            b = lead // BUCKET
            self.errors[b, self.count[b] % self.window] = requested - fc.values[i, self.q, lead]
            self.count[b] += 1

    def margins(self, quantile: float, min_count: int) -> np.ndarray:
        """Cores per lead hour (NaN where too few errors yet)."""
        return forecast_margin(list(self.errors), quantile, min_count)

    def rise(self, quantile: float, min_count: int) -> float:
        """Cores the measured need rose by within the reaction time at this quantile (NaN: too few)."""
        return float(forecast_margin([self.rises], quantile, min_count)[0])

