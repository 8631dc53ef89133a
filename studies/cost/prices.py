"""The prices file: peak and off-peak prices per core-hour and GiB-hour, and which hours are peak.

    currency: USD
    timezone: Europe/Paris      # IANA name; the peak window is read on this clock (default UTC)
    peak_hours: "08:00-22:00"   # [start, end) local time; "22:00-06:00" wraps past midnight
    cpu: {peak: 0.040, offpeak: 0.010}      # per core-hour
    memory: {peak: 0.0050, offpeak: 0.0012}  # per GiB-hour

A mistake in it is a usage error naming the key and the fix, before anything is read or written.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd
import yaml

from contracts.errors import InputError

RESOURCES = ("cpu", "memory")
UNITS = {"cpu": "core-hour", "memory": "GiB-hour"}
KEYS = ("currency", "timezone", "peak_hours", *RESOURCES)
_CLOCK = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True)
class Prices:
    """Prices per unit-hour by resource and period; `peak` is the [start, end) window in minutes
    after local midnight (start > end wraps past midnight)."""

    currency: str
    timezone: str
    peak_start: int
    peak_end: int
    cpu_peak: float
    cpu_offpeak: float
    memory_peak: float
    memory_offpeak: float

    def is_peak(self, hours: pd.DatetimeIndex) -> np.ndarray:
        """Whether each hour (UTC timestamps of its start) begins inside the local peak window."""
        local = hours.tz_convert(self.timezone)
        minute = np.asarray(local.hour * 60 + local.minute)
        if self.peak_start <= self.peak_end:
            return (minute >= self.peak_start) & (minute < self.peak_end)
        return (minute >= self.peak_start) | (minute < self.peak_end)

    def per_hour(self, resource: str, hours: pd.DatetimeIndex) -> np.ndarray:
        """The price of one unit-hour (core-hour or GiB-hour) of `resource` in each hour."""
        peak, offpeak = (self.cpu_peak, self.cpu_offpeak) if resource == "cpu" else \
            (self.memory_peak, self.memory_offpeak)
        return np.where(self.is_peak(hours), peak, offpeak)

    def offpeak(self, resource: str) -> float:
        return self.cpu_offpeak if resource == "cpu" else self.memory_offpeak

    def describe(self) -> str:
        window = f"{self.peak_start // 60:02d}:{self.peak_start % 60:02d}-{self.peak_end // 60:02d}:" \
                 f"{self.peak_end % 60:02d}"
        return (f"peak {window} {self.timezone}: cpu {self.cpu_peak:g}/{self.cpu_offpeak:g} {self.currency} per "
                f"core-hour, memory {self.memory_peak:g}/{self.memory_offpeak:g} per GiB-hour (peak/off-peak)")


# A price per core-hour or GiB-hour above this is a unit mistake (a cloud core-hour costs about 0.01
# to 0.1, a month of one about 30): refused with the bound named, and far from where sums overflow.
MAX_PRICE = 1e6


def _fail(path: str, key: str, fix: str) -> InputError:
    return InputError(f"--cost {path}: {key}: {fix}")


def _price(path: str, section: Any, resource: str, period: str) -> float:
    key = f"{resource}.{period}"
    value = section.get(period)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _fail(path, key, f"{value!r} is not a price; give a number >= 0 per {UNITS[resource]}, "
                               f"e.g. {resource}: {{peak: 0.04, offpeak: 0.01}}")
    if value > MAX_PRICE:
        raise _fail(path, key, f"{value:g} per {UNITS[resource]} is above {MAX_PRICE:,.0f}, no market's price; "
                               f"give the price of one {UNITS[resource]}, e.g. {resource}: {{peak: 0.04, offpeak: 0.01}}")
    return float(value)


class _Loader(yaml.SafeLoader):
    """`yaml.safe_load`, plus: a key given twice in one mapping is refused (YAML keeps the last one
    silently, so a second `cpu:` would change the prices unseen), and numbers in exponent form
    without a dot or sign (1e-3, 1.0e308: JSON and YAML 1.2 floats) are numbers, not strings."""

    path = ""


def _mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise InputError(f"--cost {loader.path}: {key}: given twice (lines {seen[key]} and {line}); keep one")
        if isinstance(key, (str, int, float, bool)):
            seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"),
                              list("-+0123456789."))


def _section(path: str, doc: dict, resource: str) -> tuple[float, float]:
    section = doc.get(resource)
    if not isinstance(section, dict):
        raise _fail(path, resource, f"missing or not a mapping; give {resource}: {{peak: P, offpeak: Q}} "
                                    f"per {UNITS[resource]}")
    extra = sorted(set(map(str, section)) - {"peak", "offpeak"})
    if extra:
        raise _fail(path, f"{resource}.{extra[0]}", "unknown key; use peak and offpeak")
    return _price(path, section, resource, "peak"), _price(path, section, resource, "offpeak")


def _window(path: str, text: Any) -> tuple[int, int]:
    parts = text.split("-") if isinstance(text, str) else []
    clocks = [_CLOCK.match(p.strip()) for p in parts]
    if len(parts) != 2 or not all(clocks):
        raise _fail(path, "peak_hours", f"{text!r} is not a window; give \"HH:MM-HH:MM\" local time, "
                                        "e.g. \"08:00-22:00\" (\"22:00-06:00\" wraps past midnight)")
    start, end = (int(m.group(1)) * 60 + int(m.group(2)) for m in clocks if m)
    if start == end:
        raise _fail(path, "peak_hours", f"{text!r} is empty; give a window with start != end")
    return start, end


def _zone(path: str, name: Any) -> str:
    try:
        ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        raise _fail(path, "timezone", f"{name!r} is not an IANA time zone; e.g. UTC or Europe/Paris") from None
    return str(name)


def parse_prices(doc: Any, path: str) -> Prices:
    """A parsed prices document, checked key by key (the first mistake is the one reported)."""
    if not isinstance(doc, dict):
        raise _fail(path, "(top level)", "not a mapping; see docs/cost-report.md for the keys "
                                         f"({', '.join(KEYS)})")
    extra = sorted(set(map(str, doc)) - set(KEYS))
    if extra:
        raise _fail(path, extra[0], f"unknown key; the keys are {', '.join(KEYS)}")
    currency = doc.get("currency")
    if not isinstance(currency, str) or not currency.strip():
        raise _fail(path, "currency", f"{currency!r}: give the currency's name, e.g. currency: USD")
    start, end = _window(path, doc.get("peak_hours"))
    cpu, memory = _section(path, doc, "cpu"), _section(path, doc, "memory")
    return Prices(currency=currency.strip(), timezone=_zone(path, doc.get("timezone", "UTC")),
                  peak_start=start, peak_end=end, cpu_peak=cpu[0], cpu_offpeak=cpu[1],
                  memory_peak=memory[0], memory_offpeak=memory[1])


def load_prices(path: str) -> Prices:
    """Read and check the prices file (YAML; JSON is YAML too)."""
    if os.path.isdir(path) or not os.path.exists(path):
        raise InputError(f"--cost {path}: no such file; give a prices YAML (a commented example: "
                         "`tidewise docs prices.example.yaml > prices.yaml`)")
    try:
        with open(path, encoding="utf-8") as fh:
            loader = _Loader(fh)
            loader.path = path
            try:
                doc = loader.get_single_data()
            finally:
                loader.dispose()
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"--cost {path} is not valid YAML ({first}); fix the syntax "
                         "(a commented example: `tidewise docs prices.example.yaml`)") from None
    return parse_prices(doc, path)
