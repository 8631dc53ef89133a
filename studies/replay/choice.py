"""Choice by cost in the VPA replay (`tidewise replay --choose-by-cost`): the serving loop's
`autoscaler.logic.choice_by_cost` over one series, with its ledger filled from before the replayed
window (`cost_window` before the first UTC midnight), so the first replayed day already has a past
to score candidates on, as a serve process that has run for a while does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import pandas as pd

from autoscaler.logic.choice_by_cost import Candidate, CostLedger, candidates, choose_by_cost, serve_choice
from autoscaler.settings import VpaSettings
from predictor.durations import DAY, to_timedelta
from predictor.types import Forecast


class Forecasts(Protocol):
    def forecast(self, y: pd.Series, origin: pd.Timestamp, horizon: pd.Timedelta) -> Forecast: ...


@dataclass
class ReplayChooser:
    """The choice for one series: `warm_up` once, then `pick` at each decision time in order."""

    key: str
    settings: VpaSettings
    window_steps: int  # forecast steps the target covers (the settings' window)
    ledger: CostLedger = field(default_factory=CostLedger)

    def _found(self, y: pd.Series, t: pd.Timestamp, fc: Forecast) -> list[Candidate]:
        return candidates(fc, self.window_steps, y[y.index < t], t, self.settings, fc.model,
                          self.ledger.needed(self.key, t))

    def warm_up(self, y: pd.Series, start: pd.Timestamp, forecasts: Forecasts, every: pd.Timedelta,
                horizon: pd.Timedelta) -> None:
        """Record every candidate's request from `cost_window` before `start`'s midnight to `start`
        (each from the samples before its time), never before the series has a day of history."""
        keep = to_timedelta(self.settings.cost_window) + DAY
        first = y.first_valid_index()
        if first is None:
            return
        begin = max(start.floor(DAY) - to_timedelta(self.settings.cost_window), first.ceil(DAY) + DAY)
        for t in pd.date_range(begin, start, freq=every, inclusive="left"):
            self.ledger.record(self.key, t, self._found(y, t, forecasts.forecast(y, t, horizon)), keep)

    def pick(self, y: pd.Series, t: pd.Timestamp, fc: Forecast) -> tuple[Candidate | None, str]:
        """(the candidate serving at `t`, None for the settings' forecast point; the reason's step)."""
        found = self._found(y, t, fc)
        return serve_choice(choose_by_cost(self.ledger, self.key, found, y[y.index < t], t, self.settings), found)
