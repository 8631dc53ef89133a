"""The forecaster's own errors at each lead, as the tide policy saw them: the calibrated margin.

A thin adapter of `autoscaler.logic.tide_calibration.ErrorLedger` (serve's tide step keeps the same
ledger) over the simulator's precomputed `PoolForecasts`: each minute the policy observes the pool's
requested cores (the minute that just ended); the median of every forecast whose origin is at most
that minute is handed to the ledger then, and the ledger records `observed - median forecast` under
the hour of lead (0-1 h, 1-2 h, ...). Only minutes already observed are recorded, so a margin read
at minute t holds no error from after t (tested by changing the future). `rise()` is how far the
need measured now rose within `reaction` minutes (a hand-back's time): the floor's margin.
"""
from __future__ import annotations

import numpy as np

from autoscaler.logic.tide_calibration import ErrorLedger
from studies.simulation.tide.forecasts import PoolForecasts

BUCKET = 60  # minutes of lead per bucket: the forecasts are hourly, their error grows with the hour of lead


class ForecastErrors:
    """The pool's ledger (minutes), fed from its forecasts as they become known."""

    def __init__(self, forecasts: PoolForecasts, window: int, reaction: int, median: float = 0.5):
        self.forecasts, self.q = forecasts, forecasts.quantiles.index(median)
        self.ledger = ErrorLedger(BUCKET, -(-forecasts.values.shape[2] // BUCKET), window, reaction)
        self.known = 0  # forecasts handed to the ledger (origins increase)

    def observe(self, t: int, requested: float) -> None:
        """Minute t ended with `requested` cores: the error of every forecast made at or before t
        whose horizon reaches t."""
        fc = self.forecasts
        while self.known < len(fc.origins) and fc.origins[self.known] <= t:
            self.ledger.forecast(float(fc.origins[self.known]), 1.0, fc.values[self.known, self.q])
            self.known += 1
        self.ledger.observe(t, requested)

    def margins(self, quantile: float, min_count: int) -> np.ndarray:
        """Cores per lead hour (NaN where too few errors yet)."""
        return self.ledger.margins(quantile, min_count)

    def rise(self, quantile: float, min_count: int) -> float:
        """Cores the measured need rose by within the reaction time at this quantile (NaN: too few)."""
        return self.ledger.rise(quantile, min_count)
