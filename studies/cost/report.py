"""One cost report: read the inputs given, price them (`ledger`), and the outputs' machine-readable
forms. `tidewise report --cost` calls `build_report` then `page.write_outputs`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from autoscaler.input.cluster import load_cluster_state
from predictor.types import SeriesKey
from studies.cost.inputs import (HOUR, HourlySeries, read_results, read_usage, read_vpa_replay, requests_of,
                                 simulated_hours, span_hours)
from studies.cost.ledger import (Lever, Namespaces, hourly_costs, lent_lever, namespace_rows, price_usage, price_vpa,
                                 reclaimed_lever, total_per_day)
from studies.cost.prices import Prices

COLOCATION_NEEDS = ("batch_core_hours", "goodput_core_hours")
TIDE_NEEDS = ("node_hours_lent",)


@dataclass
class CostInputs:
    """The files a report prices (None: not given) and the tide nodes' size (cores, GiB)."""

    history: str | None = None
    cluster_state: str | None = None
    vpa_replay: str | None = None
    colocation: str | None = None
    tide: str | None = None
    node_size: tuple[float, float] | None = None


@dataclass
class CostReport:
    prices: Prices
    namespaces: list[dict[str, Any]]
    levers: list[Lever]
    hourly: pd.DataFrame  # money per hour across the cluster: used, requested, vpa_before, vpa_tidewise
    notes: list[str] = field(default_factory=list)  # series left out, and why
    windows: dict[str, str] = field(default_factory=dict)  # input -> the hours it covers

    def to_json(self) -> dict[str, Any]:
        p = self.prices
        return {"prices": {"currency": p.currency, "description": p.describe()},
                "namespaces": self.namespaces,
                "levers": [{"lever": lv.name, "measured": lv.measured, "saved": lv.saved, "hours": lv.hours,
                            "saved_per_day": lv.per_day, "saved_per_month": lv.per_month, "reason": lv.reason,
                            "rows": lv.rows} for lv in self.levers],
                "total_saved_per_day": total_per_day(self.levers),
                "windows": self.windows, "notes": self.notes}


def _node_size(inputs: CostInputs, tide: dict | None) -> tuple[float, float] | None:
    if inputs.node_size is not None or tide is None:
        return inputs.node_size
    # the simulator may name its node size beside the policies; the contract does not require it
    size = [tide.get("cores_per_node"), tide.get("memory_gib_per_node")]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in size):
        return float(size[0]), float(size[1])  # type: ignore[arg-type]
    return None


def _vpa_lever(ns: Namespaces, requests: dict[str, float] | None, priced: int, vpa: HourlySeries | None) -> Lever:
    name = "tidal requests (VPA)"
    if vpa is None:
        return Lever(name, None, "no --vpa-replay (write one with `tidewise replay vpa --output FILE`)")
    if requests is None:
        return Lever(name, None, "no --cluster-state: the requests before Tidewise are read from it")
    if not priced:
        return Lever(name, None, f"none of the {len(vpa.by_id)} replayed series has a workload with a request "
                                 "in the cluster state")
    rows = namespace_rows(ns, {})
    detail = [{"namespace": r["namespace"], "before": r["vpa_before_cost"], "tidewise": r["vpa_tidewise_cost"],
               "saved": r["vpa_saved"]} for r in rows if r["vpa_saved"] is not None]
    hours = span_hours(vpa)
    return Lever(name, sum(r["saved"] for r in detail),
                 f"{priced} series: request before x hours against Tidewise's hourly recommendation, "
                 f"each hour at its price, over the replay's {hours or 0:g} h", detail, hours)


def window(series: HourlySeries) -> str:
    """The hours a set of hourly series covers, as text: first hour, last hour, and how many."""
    hours = sorted(set().union(*(s.index for s in series.by_id.values()))) if series.by_id else []
    if not hours:
        return "no hours"
    return f"{hours[0]:%Y-%m-%d %H:%M} to {hours[-1] + HOUR:%Y-%m-%d %H:%M} UTC ({len(hours)} h)"


def _series_count(ids: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for sid in ids:
        ns = SeriesKey.parse(sid).namespace
        out[ns] = out.get(ns, 0) + 1
    return out


def build_report(prices: Prices, inputs: CostInputs) -> CostReport:
    """Read every input given (each checked before anything is priced) and price it."""
    usage = read_usage(inputs.history) if inputs.history else None
    vpa = read_vpa_replay(inputs.vpa_replay) if inputs.vpa_replay else None
    state = load_cluster_state(inputs.cluster_state) if inputs.cluster_state else None
    coloc = read_results(inputs.colocation, "--colocation", COLOCATION_NEEDS) if inputs.colocation else None
    tide = read_results(inputs.tide, "--tide", TIDE_NEEDS) if inputs.tide else None
    ids = sorted(set(usage.by_id if usage else ()) | set(vpa.by_id if vpa else ()))
    requests, missing = requests_of(state, ids) if state is not None else (None, {})
    ns = price_usage(prices, usage, requests) if usage else Namespaces()
    priced = price_vpa(prices, vpa, requests, ns, usage) if vpa is not None and requests is not None else 0
    notes = [f"{sid}: left out ({why})" for src in (usage, vpa) if src for sid, why in src.left_out.items()]
    notes += [f"{sid}: no request ({why})" for sid, why in missing.items()]
    levers = [_vpa_lever(ns, requests, priced, vpa),
              reclaimed_lever(prices, coloc, "no --colocation (the results.json of `tidewise simulate colocation`)",
                              simulated_hours(inputs.colocation) if inputs.colocation else None),
              lent_lever(prices, tide, "no --tide (the results.json of `tidewise simulate tide`)",
                         _node_size(inputs, tide), simulated_hours(inputs.tide) if inputs.tide else None)]
    windows = {name: window(src) for name, src in (("history", usage), ("vpa replay", vpa)) if src is not None}
    return CostReport(prices, namespace_rows(ns, _series_count(list(usage.by_id) if usage else [])), levers,
                      hourly_costs(ns), notes, windows)
