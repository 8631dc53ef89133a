"""The colocation study's forecasts: each node's online demand as one series (`node_series`, the
forecast level by default), or every trace's forecast scaled to its services and summed per node
(`node_forecasts`), and how often the demand exceeded each forecast quantile (`forecast_coverage`).
The forecasts themselves are the harness's daily rolling-origin ones (`harness.forecasts`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from studies.simulation.colocation.policies import NodeForecasts
from studies.simulation.harness.cluster import Cluster
from studies.simulation.harness.forecasts import QUANTILES
from studies.simulation.harness.traces import DAY_MIN


def node_series(cluster: Cluster) -> dict[str, pd.Series]:
    """Each node's online demand on the forecasting grid, history and evaluation days: the sum of its
    services' step peaks (a node agent's `node/<name>/cpu` series, DESIGN.md's node-level key)."""
    out = {}
    for n in range(cluster.nodes):
        parts = [np.minimum(cluster.traces[s.trace].grid_series * s.scale, s.limit)
                 for s in cluster.services if s.node == n]
        if parts:
            # only where every service has data: before a shorter trace begins, a partial sum would
            # show the forecaster a level shift that never happened
            total = pd.concat(parts, axis=1).sum(axis=1, min_count=len(parts))
            out[f"node/node-{n:03d}/cpu"] = total.loc[total.first_valid_index():]
    return out


def node_forecasts(cluster: Cluster, per_trace: np.ndarray, models: dict[str, str],
                   quantiles: Sequence[float] = QUANTILES) -> NodeForecasts:
    """Scale each trace's forecast to its services (capped at their limits) and sum per node."""
    days = per_trace.shape[1]
    by_day = []
    for d in range(days):
        by_day.append({q: cluster.service_matrix(per_trace[:, d, j, :]) for j, q in enumerate(quantiles)})
    return NodeForecasts(tuple(quantiles), by_day, models)


def node_level_forecasts(cluster: Cluster, per_node: np.ndarray, models: dict[str, str],
                         quantiles: Sequence[float] = QUANTILES) -> NodeForecasts:
    """Forecasts of the node series themselves (nodes x days x quantiles x minutes)."""
    by_day = [{q: per_node[:, d, j, :] for j, q in enumerate(quantiles)} for d in range(per_node.shape[1])]
    return NodeForecasts(tuple(quantiles), by_day, models)


def forecast_coverage(names: Sequence[str], actual: np.ndarray, forecasts: np.ndarray,
                      quantiles: Sequence[float] = QUANTILES, unit: str = "cores") -> list[dict]:
    """Per series: how often its 1-minute demand exceeded each forecast quantile, and by how much.

    `actual` is series x minutes, `forecasts` series x days x quantiles x minutes. This is where a
    forecast-driven policy loses: where q0.95 is exceeded far more than 5% of minutes, the reactive
    term catches up after the fact; where it sits far above the demand, batch is kept out.
    """
    rows = []
    days = min(forecasts.shape[1], actual.shape[1] // DAY_MIN)
    j95 = list(quantiles).index(0.95) if 0.95 in quantiles else len(quantiles) - 1
    for i, name in enumerate(names):
        a = actual[i, :days * DAY_MIN]
        row: dict = {"series": name}
        for j, q in enumerate(quantiles):
            fc = np.concatenate([forecasts[i, d, j, :DAY_MIN] for d in range(days)])
            row[f"exceed_q{q:g}"] = float(np.mean(a > fc + 1e-12))
        fc = np.concatenate([forecasts[i, d, j95, :DAY_MIN] for d in range(days)])
        row[f"mean_miss_q{quantiles[j95]:g} ({unit})"] = float(np.maximum(a - fc, 0.0).mean())
        row[f"mean_over_q{quantiles[j95]:g} ({unit})"] = float(np.maximum(fc - a, 0.0).mean())
        row["mean_demand"] = float(a.mean())
        rows.append(row)
    return rows
