"""Parsed reclaim plans and node forecasts, remembered by their annotation text.

A scheduler call for 500 nodes would otherwise parse 1,000 JSON annotations (~1 KiB each) every
time, though serve rewrites them at most every half hour: parsing is most of a call's cost. What is
remembered is only what does not depend on the time (the document and its checks); whether a plan
or forecast is still valid is checked against the clock on every call, so a remembered plan expires
exactly when the annotation says.
"""
from __future__ import annotations

import datetime as dt
import json
from typing import Any, Union

from contracts.errors import InputError
from contracts.node_forecast import ForecastRefused, NodeForecast, check_forecast, parse_forecast
from contracts.reclaim import CLOCK_SKEW, PLAN_ANNOTATION, ReclaimPlan, plan_from_annotation, utc

MAX_ENTRIES = 20_000  # 5,000 nodes x (plan + forecast) x 2 generations; past it the memory starts over

# a refusal is kept as its message and raised anew each time (a raised instance would grow its traceback)
_Plan = Union[ReclaimPlan, str]
_Forecast = Union[NodeForecast, str]


def _parse_plan(text: str | None, node: str) -> _Plan:
    """The plan checked as of its own generation time (every check but the clock's), or the refusal."""
    try:
        generated = utc(json.loads(text or "{}")["generated_at"])
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        generated = dt.datetime.now(dt.timezone.utc)  # unparseable: plan_from_annotation says why below
    try:
        return plan_from_annotation(text, node, generated)
    except InputError as exc:
        return str(exc)


class AnnotationCache:
    """`plan(node, text, now)` and `forecast(node, text, now)`: parsed once per distinct text."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._plans: dict[tuple[str, str | None], _Plan] = {}
        self._forecasts: dict[tuple[str, str | None], _Forecast] = {}
        # (node, CNR resourceVersion) -> its NUMA zones (filter.Zone) or why they are unknown
        self.zones: dict[tuple[str, str], Any] = {}

    def _room(self, memo: dict) -> None:  # type: ignore[type-arg]
        if len(memo) >= self.max_entries:
            memo.clear()  # rare (a fleet rewrote its annotations twice over): start again rather than grow

    def plan(self, node: str, text: str | None, now: dt.datetime) -> ReclaimPlan:
        """The node's plan valid at `now`; InputError why not (the messages `plan_from_annotation` gives)."""
        got = self._plans.get((node, text))
        if got is None:
            self._room(self._plans)
            got = self._plans[node, text] = _parse_plan(text, node)
        if isinstance(got, str):
            raise InputError(got)
        generated = utc(got.window_start)
        until = generated + dt.timedelta(seconds=got.window_seconds)
        what = f"node {node} annotation {PLAN_ANNOTATION}"
        if generated > now + CLOCK_SKEW:
            raise InputError(f"{what}: generated_at {got.window_start} is in the future (clock skew?)")
        if now >= until:
            raise InputError(f"{what}: expired at {until.strftime('%Y-%m-%dT%H:%M:%SZ')} (is `tidewise serve` running?)")
        return got

    def forecast(self, node: str, text: str | None, now: dt.datetime) -> NodeForecast:
        """The node's forecast usable at `now`; ForecastRefused why not."""
        got = self._forecasts.get((node, text))
        if got is None:
            self._room(self._forecasts)
            try:
                got = parse_forecast(text, node)
            except ForecastRefused as exc:
                got = str(exc)
            self._forecasts[node, text] = got
        if isinstance(got, str):
            raise ForecastRefused(got)
        return check_forecast(got, now)
