"""Parsed reclaim plans and node forecasts, remembered by their annotation text.

A scheduler call for 500 nodes would otherwise parse 1,000 JSON annotations (~1 KiB each) every
time, though serve rewrites them at most every half hour: parsing is most of a call's cost. What is
remembered is only what does not depend on the time (the document and its checks); whether a plan
or forecast is still valid is checked against the clock on every call, so a remembered plan expires
exactly when the annotation says.

The memory is bounded by bytes, not entries (`max_bytes`: an annotation may be 256 KiB, so 20,000
entries could be 5 GiB): each entry counts its text and its parsed value (sizes.deep_size), and the
oldest entries are forgotten first once the bound is passed.
"""
from __future__ import annotations

import datetime as dt
import json
import threading
from typing import Any, Union

from extender.sizes import deep_size
from contracts.errors import InputError
from contracts.node_forecast import ForecastRefused, NodeForecast, check_forecast, parse_forecast
from contracts.reclaim import CLOCK_SKEW, PLAN_ANNOTATION, ReclaimPlan, plan_from_annotation, utc

MAX_BYTES = 64 * 2**20  # limits.Limits.annotation_bytes: 5,000 nodes' plans and forecasts need ~20 MiB

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

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0  # what the plans and forecasts kept take now
        self._lock = threading.Lock()  # the server's workers share one cache
        self._plans: dict[tuple[str, str | None], _Plan] = {}
        self._forecasts: dict[tuple[str, str | None], _Forecast] = {}
        self._sizes: dict[tuple[str, tuple[str, str | None]], int] = {}  # (memo, key) -> bytes, oldest first
        # (node, CNR resourceVersion) -> its NUMA zones (filter.Zone) or why they are unknown
        self.zones: dict[tuple[str, str], Any] = {}

    def _keep(self, which: str, memo: dict, key: tuple[str, str | None], value: Any) -> None:  # type: ignore[type-arg]
        """Remember `value` under `key`, forgetting the oldest entries of both memos past `max_bytes`."""
        size = deep_size((key, value))
        if size > self.max_bytes:
            return  # larger than the whole memory: parsed again next time
        with self._lock:
            if (which, key) in self._sizes:
                return  # another worker parsed the same text meanwhile
            memo[key] = value
            self._sizes[which, key] = size
            self.bytes += size
            while self.bytes > self.max_bytes:
                (old_which, old_key), old_size = next(iter(self._sizes.items()))
                del self._sizes[old_which, old_key]
                (self._plans if old_which == "plan" else self._forecasts).pop(old_key, None)
                self.bytes -= old_size

    def plan(self, node: str, text: str | None, now: dt.datetime) -> ReclaimPlan:
        """The node's plan valid at `now`; InputError why not (the messages `plan_from_annotation` gives)."""
        got = self._plans.get((node, text))
        if got is None:
            got = _parse_plan(text, node)
            self._keep("plan", self._plans, (node, text), got)
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
            try:
                got = parse_forecast(text, node)
            except ForecastRefused as exc:
                got = str(exc)
            self._keep("forecast", self._forecasts, (node, text), got)
        if isinstance(got, str):
            raise ForecastRefused(got)
        return check_forecast(got, now)
