"""Pricing, pure: hourly amounts and simulator results in, money per namespace and per lever out.

Every amount is priced hour by hour at the price of that hour (peak or off-peak, `prices`), so a
workload that asks for its peak only at the peak pays the peak price only then; capacity lent to
batch (reclaimed cores, lent nodes) is idle night capacity and is priced at the off-peak price.
A lever whose inputs are absent is "not measured", with the reason, never zero.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from predictor.types import SeriesKey
from studies.cost.inputs import HourlySeries
from studies.cost.prices import Prices

DEFAULT_POLICY = "tidewise"  # the simulators' label of Tidewise at its default setting
MONTH_HOURS = 730.0  # a month as cloud bills count it: 8,760 h a year / 12
NAMESPACE_COLUMNS = ("namespace", "series", "used_core_hours", "used_gib_hours", "used_cost",
                     "requested_core_hours", "requested_gib_hours", "requested_cost", "idle_cost",
                     "vpa_before_cost", "vpa_used_cost", "vpa_tidewise_cost", "vpa_saved")


@dataclass
class Lever:
    """One way Tidewise saves: its headline amount (None: not measured) over the `hours` its input
    covers (a replay's window, a simulation's days; None: unknown), how it was measured or why not,
    and its detail rows (per namespace or per simulated policy). Levers are compared and added per
    day and per month, never as totals over different spans."""

    name: str
    saved: float | None
    reason: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    hours: float | None = None

    @property
    def measured(self) -> bool:
        return self.saved is not None

    @property
    def per_day(self) -> float | None:
        """The saving per 24 h of its input's span (None: not measured, or the span is unknown)."""
        if self.saved is None or not self.hours:
            return None
        return self.saved / self.hours * 24.0

    @property
    def per_month(self) -> float | None:
        return None if self.per_day is None else self.per_day / 24.0 * MONTH_HOURS


def total_per_day(levers: list[Lever]) -> float | None:
    """The levers' savings added per day (those with a rate; None when none has one)."""
    rates = [lv.per_day for lv in levers if lv.per_day is not None]
    return sum(rates) if rates else None


def _resource(sid: str) -> str:
    return SeriesKey.parse(sid).resource


def priced(prices: Prices, sid: str, amounts: pd.Series) -> pd.Series:
    """Money per hour of one series' hourly amounts (cores or GiB held for that hour)."""
    index = pd.DatetimeIndex(amounts.index)
    return pd.Series(amounts.to_numpy(dtype=float) * prices.per_hour(_resource(sid), index), index=index)


def _add(into: dict[str, float], key: str, value: float) -> None:
    into[key] = into.get(key, 0.0) + value


def _hours(sid: str, amounts: pd.Series) -> tuple[str, float]:
    return ("core_hours" if _resource(sid) == "cpu" else "gib_hours"), float(amounts.sum())


@dataclass
class Namespaces:
    """Per namespace: used, requested and the VPA lever; and money per hour across the cluster."""

    rows: dict[str, dict[str, float]] = field(default_factory=dict)
    hourly: dict[str, list[pd.Series]] = field(default_factory=dict)

    def add(self, sid: str, column: str, amounts: pd.Series, money: pd.Series, hourly: bool = True) -> None:
        row = self.rows.setdefault(SeriesKey.parse(sid).namespace, {})
        if column in ("used", "requested"):
            unit, total = _hours(sid, amounts)
            _add(row, f"{column}_{unit}", total)
        _add(row, f"{column}_cost", float(money.sum()))
        if hourly:
            self.hourly.setdefault(column, []).append(money)


def price_usage(prices: Prices, usage: HourlySeries, requests: dict[str, float] | None) -> Namespaces:
    """Used (the history's hourly means) and requested (the request held over the same hours)."""
    out = Namespaces()
    for sid, amounts in usage.by_id.items():
        out.add(sid, "used", amounts, priced(prices, sid, amounts))
        if requests is not None and sid in requests:
            held = pd.Series(requests[sid], index=amounts.index)
            out.add(sid, "requested", held, priced(prices, sid, held))
    return out


def price_vpa(prices: Prices, vpa: HourlySeries, requests: dict[str, float], into: Namespaces,
              usage: HourlySeries | None = None) -> int:
    """Tidal requests: each hour, the request before (the cluster state's) against Tidewise's
    recommendation for that hour, both priced at that hour's price; and the usage of those same
    series in those same hours (`vpa_used`: what the two requests compare with, over the replay's
    window, not the history's). Returns the series priced."""
    n = 0
    for sid, targets in vpa.by_id.items():
        if sid not in requests:
            continue
        before = pd.Series(requests[sid], index=targets.index)
        into.add(sid, "vpa_before", before, priced(prices, sid, before))
        into.add(sid, "vpa_tidewise", targets, priced(prices, sid, targets))
        used = usage.by_id.get(sid) if usage is not None else None
        if used is not None:
            used = used[used.index.isin(targets.index)]
            into.add(sid, "vpa_used", used, priced(prices, sid, used), hourly=False)
        n += 1
    return n


def _group(column: str) -> str:
    return "vpa_before" if column == "vpa_saved" else column.rsplit("_", 1)[0]


def namespace_rows(ns: Namespaces, series: dict[str, int]) -> list[dict[str, Any]]:
    """One row per namespace with every column; None where the namespace had nothing to price it
    from (no request in the cluster state, no replay), never zero."""
    rows = []
    for name in sorted(ns.rows):
        got = ns.rows[name]
        row: dict[str, Any] = {"namespace": name, "series": series.get(name, 0)}
        for col in NAMESPACE_COLUMNS[2:]:
            # hours of a resource the namespace has no series of are unknown, not zero
            row[col] = got.get(col) if col.endswith("_hours") else \
                got.get(col, 0.0) if f"{_group(col)}_cost" in got else None
        if row["requested_cost"] is not None and row["used_cost"] is not None:
            row["idle_cost"] = row["requested_cost"] - row["used_cost"]
        if row["vpa_before_cost"] is not None:
            row["vpa_saved"] = row["vpa_before_cost"] - row["vpa_tidewise_cost"]
        rows.append(row)
    return rows


def hourly_costs(ns: Namespaces) -> pd.DataFrame:
    """Money per hour across the cluster, one column per priced amount (used, requested, ...); NaN
    in hours an amount does not cover (the replay's window is shorter than the history's)."""
    cols = {k: pd.concat(v).groupby(level=0).sum() for k, v in ns.hourly.items() if v}
    return pd.DataFrame(cols).sort_index()


def _headline(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return next((r for r in rows if r["policy"] == DEFAULT_POLICY), max(rows, key=lambda r: r["value"]))


def reclaimed_lever(prices: Prices, results: dict | None, why_not: str, hours: float | None = None) -> Lever:
    """Colocation: batch's useful core-hours on reclaimed capacity (goodput: evicted work is worth
    nothing) at the off-peak cpu price, over the `hours` simulated; the headline is Tidewise's
    default setting."""
    name = "reclaimed cores (colocation)"
    if results is None:
        return Lever(name, None, why_not)
    rows = [{"policy": label, "batch_core_hours": float(m["batch_core_hours"]),
             "goodput_core_hours": float(m["goodput_core_hours"]),
             "value": float(m["goodput_core_hours"]) * prices.cpu_offpeak}
            for label, m in results["policies"].items()]
    top = _headline(rows)
    return Lever(name, top["value"], f"{top['policy']}: {top['goodput_core_hours']:.1f} goodput core-hours x "
                                     f"{prices.cpu_offpeak:g} off-peak (cpu only: the simulator lends no memory)"
                                     + _over(hours), rows, hours)


def _over(hours: float | None) -> str:
    return f", over {hours:g} simulated h" if hours else ", over a span the results do not name (no details.json)"


def lent_lever(prices: Prices, results: dict | None, why_not: str, node: tuple[float, float] | None,
               hours: float | None = None) -> Lever:
    """Tide: node-hours lent to batch x the node's cores and GiB, at the off-peak prices, over the
    `hours` simulated."""
    name = "lent nodes (tide)"
    if results is None:
        return Lever(name, None, why_not)
    if node is None:
        return Lever(name, None, "node size unknown: pass --node-size CORES,GIB (the tide results.json names none)")
    cores, gib = node
    per_node_hour = cores * prices.cpu_offpeak + gib * prices.memory_offpeak
    rows = [{"policy": label, "node_hours_lent": float(m["node_hours_lent"]),
             "late_minutes": m.get("late_minutes"), "pods_moved": m.get("pods_moved"),
             "value": float(m["node_hours_lent"]) * per_node_hour}
            for label, m in results["policies"].items()]
    top = _headline(rows)
    return Lever(name, top["value"], f"{top['policy']}: {top['node_hours_lent']:.1f} node-hours x "
                                     f"({cores:g} cores x {prices.cpu_offpeak:g} + {gib:g} GiB x "
                                     f"{prices.memory_offpeak:g}) off-peak" + _over(hours), rows, hours)
