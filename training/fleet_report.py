"""`tidewise report`: forecast from a registry version and render the fleet report."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

import pandas as pd

from predictor.errors import InputError
from predictor.pipeline.forecasting import ForecastRequest
from predictor.registry import load_recent, load_version
from predictor.pipeline.serving import forecast_version
from training.decision_time import summary_lines
from training.report import render_report


def fallback_note(fc) -> str | None:
    """Why a forecast ran another model than the stored choice (None when it did not)."""
    return next((n for n in fc.notes if "fell back to" in n), None) if fc is not None else None


def fleet_rows(reg, profiles: dict[str, dict], forecasts=()) -> list[dict]:
    """One row per series: class, seasonality, chosen model, the model that ran for this report
    (and why, when it differs), backtest skill and coverage."""
    by_series = {f.series: f for f in forecasts}
    rows = []
    for key, e in sorted(reg.series.items()):
        fc = by_series.get(key)
        prof = profiles.get(key) or {}
        scores = e.get("scores") or {}
        chosen = scores.get(e.get("model"), {})
        rows.append({
            "series": key,
            "class": prof.get("class"),
            "seasonality_day": prof.get("seasonality_day", e.get("acf_day")),
            "seasonality_week": prof.get("seasonality_week", e.get("acf_week")),
            "model": e.get("model"),
            "ran": fc.model if fc is not None else None,
            "fallback": fallback_note(fc),
            "skill": e.get("skill"),
            "coverage": e.get("coverage"),
            "pinball": chosen.get("pinball_dq"),
        })
    return rows


def write_registry_report(registry_dir: str, out: str, *, input_path: str | None = None,
                          horizon: pd.Timedelta = pd.Timedelta(days=1), max_plots: int = 200,
                          key: bytes | None = None,
                          progress: Callable[[str, int], ContextManager[Any]] | None = None) -> str:
    """Write the report of the latest verified version; returns a one-line summary. `progress(description,
    total)` (e.g. `tidewise.progress.progress`) yields an `advance(n)`: told once the forecasts are made
    and after each plot."""
    stage = progress or (lambda description, total: contextlib.nullcontext(lambda n=1: None))
    reg = load_version(registry_dir, key=key, decision_models=False)  # the report shows their backtest only
    step = pd.Timedelta(seconds=int(reg.manifest["step_seconds"]))
    if input_path:
        from predictor.history import load_history

        history = load_history(input_path, step)
    else:
        recent = load_recent(reg)
        if recent is None:
            raise InputError(f"registry version {reg.version} stores no recent history; pass --input PATH")
        history = recent
    # the stored recent window may be coarser than the models' step: forecast at the step it has
    req = ForecastRequest(horizon=horizon, step=history.step, quantiles=reg.quantiles)
    if history.step != step:
        history = _refine(history, step)
        req = ForecastRequest(horizon=horizon, step=step, quantiles=reg.quantiles)
    with stage(f"forecasting {len(history.series)} series", 1) as advance:
        forecasts = forecast_version(reg, history, req)
        advance(1)
    profiles = reg.profiles or {}
    rows = fleet_rows(reg, profiles, forecasts)
    skills = [r["skill"] for r in rows if isinstance(r.get("skill"), (int, float))]
    covs = [r["coverage"] for r in rows if isinstance(r.get("coverage"), (int, float))]
    meta = (f"registry version {reg.version}, data {reg.manifest['data_window']['start']} – "
            f"{reg.manifest['data_window']['end']}, {len(rows)} series; median skill "
            f"{pd.Series(skills).median() if skills else float('nan'):.3f}, mean coverage "
            f"{pd.Series(covs).mean() if covs else float('nan'):.3f}")
    decision = summary_lines((reg.manifest.get("training") or {}).get("decision_time") or {})
    if decision:  # the decision-time models' backtest against the day-ahead forecast (training/decision_time.py)
        meta += ". " + "; ".join(decision)
    with stage("plotting report", min(max_plots, len(forecasts))) as advance:
        render_report(out, history, forecasts, profiles, title="Tidewise forecast report", fleet=rows, meta=meta,
                      max_plots=max_plots, on_plot=advance)
    fell = sum(1 for r in rows if r.get("fallback"))
    return (f"report of {len(rows)} series ({len(forecasts)} forecasts) from {reg.version} -> {out}"
            + (f"; {fell} series ran a fallback model (see the table's 'model that ran')" if fell else ""))


def _refine(history, step: pd.Timedelta):
    """Upsample a coarse stored history to the models' step (linear, within the stored range)."""
    from predictor.history import History

    series = {k: y.resample(step).interpolate() if len(y) > 1 else y for k, y in history.series.items()}
    return History({k: s.asfreq(step) for k, s in series.items()}, step)
