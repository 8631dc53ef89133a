"""Tidal requests benchmark (issue 24): Tidewise's VPA trade-off curve in both regimes, its violation
budget swept, against the stock VPA's curve, the seasonal rule and the foresight curves, on the dev
suite, overall and per workload class (tidal, flat, bursty).

Tidewise's decisions are the replay's own (`studies.replay`: the hour-peak model at each series'
budget level in place, the day plan or the stock rule on restart), run in-process so that one
fleet model serves every budget; they are scored with the reference scorer's functions
(../shared/eval/bench_decisions.py: `vpa_scores`, the stock VPA's histogram, the seasonal rule,
`vpa_foresight`, `slack_at_violation`), which is what `bench_decisions.py --project` does through
the command line. The figure is an SVG beside this module.

    python -m benchmarks.run --only tidal          # ~15 min on 2 cores
    python -m benchmarks.tidal --json OUT          # the same, printing the section
    python -m benchmarks.tidal --suite other       # on the series dev does not read (benchmarks.other_traces;
                                                   # prints the section, leaves the figure alone)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVAL = os.environ.get("SHARED_EVAL", os.path.join(ROOT, "..", "shared", "eval"))
FIGURE = "benchmarks/tidal-tradeoff.svg"
BUDGETS = (0.01, 0.03, 0.05, 0.1)
HOUR = pd.Timedelta("1h")
Scores = dict[str, tuple[float, float, float]]  # series -> (slack, violation, changes a day)


def scorer() -> Any:
    """The reference scorer's module (../shared/eval)."""
    if EVAL not in sys.path:
        sys.path.insert(0, EVAL)
    import bench_decisions

    return bench_decisions


Windows = dict[str, tuple[pd.Timestamp, pd.Timestamp]]


def suite(quick: bool, name: str = "dev") -> tuple[dict[str, pd.Series], Windows]:
    """The scorer's series of suite `name` (dev, or `benchmarks.other_traces`' other) and their windows
    (the non-negative ones it scores)."""
    bd = scorer()
    import suite as shared_suite

    if name == "other":
        from benchmarks.other_traces import other

        data = other()
    else:
        data = shared_suite.dev()
    windows = {k: w for k, s in data.items() if (w := bd.window(s)) and np.nanmin(s.to_numpy()) >= 0
               and np.nanpercentile(s[s.index < w[0]], 95) > 0}
    keys = sorted(windows)[:: 6] if quick else list(windows)
    return {k: data[k] for k in keys}, {k: windows[k] for k in keys}


def used(s: pd.Series, start: pd.Timestamp, end: pd.Timestamp) -> pd.Series:
    return s[start:end].iloc[:-1] if s.index[-1] >= end else s[start:end]


def workload_class(s: pd.Series, start: pd.Timestamp) -> str:
    """tidal (the hour of day explains half the hourly variance of the past), bursty (p99 over 3x
    the median), else flat — from the history before the window only."""
    past = s[s.index < start].dropna()
    hourly = past.resample("1h").mean().dropna()
    if len(hourly) >= 48 and hourly.var() > 0:
        profile = hourly.groupby(hourly.index.hour).transform("mean")
        if profile.var() / hourly.var() >= 0.5:
            return "tidal"
    med = float(np.median(past)) if len(past) else 0.0
    return "bursty" if med <= 0 or float(np.quantile(past, 0.99)) > 3 * med else "flat"


def references(data: dict[str, pd.Series], windows: dict) -> dict[str, dict[str, Any]]:
    """Per series: the stock frontier, the foresight curves, the seasonal rule (the scorer's)."""
    bd = scorer()
    out = {}
    for k, s in data.items():
        start, end = windows[k]
        use = used(s, start, end)
        hist = bd.vpa_histogram_requests(s, start, end, bd.VPA_PCTS)
        out[k] = {"frontier": {(p, m): bd.vpa_scores(use, (hist[p] * m).reindex(use.index))
                               for p in bd.VPA_PCTS for m in bd.VPA_MARGINS},
                  "foresight": {(b, v): bd.vpa_scores(use, bd.vpa_foresight(use, b, v))
                                for b in (24, 3) for v in bd.FORESIGHT_VIOLATIONS},
                  "rule": bd.vpa_scores(use, bd.vpa_seasonal_rule(s, start, end).reindex(use.index)),
                  "stock": bd.vpa_scores(use, (hist[0.9] * 1.15).reindex(use.index)),
                  "class": workload_class(s, start)}
    return out


def judged(point: tuple[float, float], refs: dict[str, dict[str, Any]], keys: list[str], blocks: int) -> dict[str, float]:
    """A (slack, violation) point against the mean curves of `keys`: slack / stock's at equal
    violation and the share of the gap to foresight (`blocks` a day) closed."""
    bd = scorer()
    frontier = [tuple(np.nanmean([refs[k]["frontier"][pm] for k in keys], axis=0)) for pm in refs[keys[0]]["frontier"]]
    bound = [tuple(np.nanmean([refs[k]["foresight"][(blocks, v)] for k in keys], axis=0)) for v in bd.FORESIGHT_VIOLATIONS]
    slack, violation = point
    stock = bd.slack_at_violation(frontier, violation)
    best = bd.slack_at_violation(bound, violation)
    gap = (stock - slack) / (stock - best) if stock > best else float("nan")
    return {"slack": slack, "violation": violation, "vs_stock": slack / stock, "gap_closed": gap}


def mean_point(scores: Mapping[str, tuple[float, ...]], keys: list[str]) -> tuple[float, float]:
    v = np.array([scores[k][:2] for k in keys])
    return float(np.nanmean(v[:, 0])), float(np.nanmean(v[:, 1]))


def churn(scores: Scores, keys: list[str]) -> float:
    return float(np.nanmean([scores[k][2] for k in keys]))


def sweep(data: dict[str, pd.Series], windows: dict, budgets: tuple[float, ...],
          progress: Callable[[str], None]) -> tuple[dict[float, Scores], dict[float, Scores]]:
    """(in place, restart): budget -> series -> (slack, violation), Tidewise's replay decisions."""
    from autoscaler.settings import VpaSettings
    from studies.replay.day_plan import replay_restart
    from studies.replay.decisions import DailyChoiceForecaster, replay_vpa_decisions
    from studies.replay.hour_peak import HourPeakRequests, hour_peak_trainer

    bd = scorer()
    trainer = hour_peak_trainer(data, HOUR)
    day_ahead = {k: DailyChoiceForecaster(key=k) for k in data}  # memoised: shared by every budget
    inplace: dict[float, Scores] = {}
    restart: dict[float, Scores] = {}
    for b in budgets:
        t0 = time.perf_counter()
        settings = VpaSettings(window="1h", violation_budget=b)
        inplace[b], restart[b] = {}, {}
        for k, s in data.items():
            start, end = windows[k]
            use = used(s, start, end)
            dec = replay_vpa_decisions(s, start, end, settings, day_ahead[k], HOUR,
                                       requests=HourPeakRequests(k, trainer, b, HOUR))
            for out, d in ((inplace, dec), (restart, replay_restart(s, start, end, settings, 3, HOUR))):
                req = d.set_index("timestamp")["target"].reindex(use.index, method="ffill")
                out[b][k] = (*bd.vpa_scores(use, req), bd.vpa_churn(req))
        progress(f"budget {b:g}: {time.perf_counter() - t0:.0f} s")
    return inplace, restart


def figure(refs: dict[str, dict[str, Any]], inplace: dict[float, Scores], restart: dict[float, Scores], path: str) -> None:
    """Mean curves over the series: the stock VPA at each percentile (margins along a line), foresight
    hourly and 3 a day, the seasonal rule, Tidewise in place and on restart (budget along the line)."""
    from reports.pages import pyplot

    bd = scorer()
    plt = pyplot()
    plt.rcParams["svg.hashsalt"] = "tidewise"
    plt.rcParams["svg.fonttype"] = "none"
    keys = list(refs)
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, p in enumerate(bd.VPA_PCTS):
        pts = [mean_point({k: refs[k]["frontier"][(p, m)] for k in keys}, keys) for m in bd.VPA_MARGINS]
        ax.plot([v for _, v in pts], [sl for sl, _ in pts], color="#999", lw=0.8,
                label="stock VPA (p0.8-0.99, margins 1.0-1.4)" if i == 0 else None)
    for blocks, style in ((24, "-"), (3, "--")):
        pts = [mean_point({k: refs[k]["foresight"][(blocks, v)] for k in keys}, keys) for v in bd.FORESIGHT_VIOLATIONS]
        ax.plot([v for _, v in pts], [sl for sl, _ in pts], color="#2ca02c", ls=style, lw=1.2,
                label=f"foresight, {'hourly' if blocks == 24 else '3 changes a day'}")
    for name, marker in (("stock", "s"), ("rule", "^")):
        sl, v = mean_point({k: refs[k][name] for k in keys}, keys)
        ax.plot([v], [sl], marker, color="#d62728" if name == "stock" else "#9467bd", ms=8,
                label="stock VPA (p90 + 15%)" if name == "stock" else "seasonal rule")
    for label, runs, color in (("Tidewise in place", inplace, "#1f77b4"), ("Tidewise restart", restart, "#ff7f0e")):
        pts = [mean_point(runs[b], keys) for b in sorted(runs)]
        ax.plot([v for _, v in pts], [sl for sl, _ in pts], "o-", color=color, lw=1.5, ms=4,
                label=f"{label} (budget {min(runs):g}-{max(runs):g})")
    ax.set_xlabel("violation rate (share of 5-minute steps with usage over the request)")
    ax.set_ylabel("mean relative slack (request - usage) / request")
    ax.set_xlim(0, 0.15)
    ax.set_title("VPA trade-off on the dev suite (mean over series; lower-left is better)", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)


def _row(label: str, j: dict[str, float], changes: float | None = None) -> str:
    c = "" if changes is None else f"{changes:.2f}"
    return (f"| {label} | {j['slack']:.3f} | {j['violation']:.3f} | {j['vs_stock']:.3f} | "
            f"{j['gap_closed']:.2f} | {c} |")


def section(refs: dict[str, dict[str, Any]], inplace: dict[float, Scores], restart: dict[float, Scores],
            took: float, quick: bool, name: str = "dev") -> str:
    keys = list(refs)
    head = ["| policy | slack | violation | slack / stock at equal violation | gap closed | changes a day |",
            "|---|---|---|---|---|---|"]
    command = "python -m benchmarks.run --only tidal" if name == "dev" else f"python -m benchmarks.tidal --suite {name}"
    lines = ["## Tidal requests: the VPA's trade-off in both regimes (issue 24)", "",
             f"Reproduce: `{command}` (the decisions of `tidewise replay vpa --resize "
             "in-place|restart --violation-budget B`, in-process so one fleet model serves every budget, scored with "
             f"`../shared/eval/bench_decisions.py`'s functions). {len(keys)} series of `{name}`"
             + (" (quick: every 6th)" if quick else "") + f"; {took / 60:.0f} min. Gap closed: the share of the gap "
             "between the stock VPA and foresight at the same violation rate (hourly foresight in place, 3 changes a "
             "day on restart)."
             + (" The outside evaluator's own run of the command is in the section below the figure." if name == "dev"
                else ""), "",
             *([f"![trade-off curves]({FIGURE})", ""] if name == "dev" else []), "All series:", "", *head]
    lines.append(_row("stock VPA (p90 + 15%)", judged(mean_point({k: refs[k]["stock"] for k in keys}, keys), refs, keys, 24)))
    lines.append(_row("seasonal rule", judged(mean_point({k: refs[k]["rule"] for k in keys}, keys), refs, keys, 24)))
    for b in sorted(inplace):
        lines.append(_row(f"Tidewise in place, budget {b:g}", judged(mean_point(inplace[b], keys), refs, keys, 24),
                          churn(inplace[b], keys)))
    for b in sorted(restart):
        lines.append(_row(f"Tidewise restart, budget {b:g}", judged(mean_point(restart[b], keys), refs, keys, 3),
                          churn(restart[b], keys)))
    lines += ["", "Per workload class (from each series' history before its window: tidal when the hour of day "
              "explains half the hourly variance, bursty when p99 is over 3x the median, else flat), at budget 0.05; "
              "each class judged against its own curves:", "", "| class | series | policy | slack | violation | "
              "slack / stock | gap closed | changes a day |", "|---|---|---|---|---|---|---|---|"]
    b = 0.05 if 0.05 in inplace else sorted(inplace)[len(inplace) // 2]
    for cls in ("tidal", "flat", "bursty"):
        ks = [k for k in keys if refs[k]["class"] == cls]
        if not ks:
            continue
        for label, point, blocks, ch in (
                ("seasonal rule", mean_point({k: refs[k]["rule"] for k in ks}, ks), 24, None),
                ("in place", mean_point(inplace[b], ks), 24, churn(inplace[b], ks)),
                ("restart", mean_point(restart[b], ks), 3, churn(restart[b], ks))):
            j = judged(point, refs, ks, blocks)
            lines.append(f"| {cls} | {len(ks)} | {label} | {j['slack']:.3f} | {j['violation']:.3f} | "
                         f"{j['vs_stock']:.3f} | {j['gap_closed']:.2f} | {'' if ch is None else f'{ch:.2f}'} |")
    return "\n".join(lines) + "\n"


def measure(quick: bool, name: str = "dev") -> tuple[str, dict[str, Any]]:
    """(the section, the per-budget means), the figure drawn beside this module for `dev`."""
    t0 = time.perf_counter()
    data, windows = suite(quick, name)
    refs = references(data, windows)
    inplace, restart = sweep(data, windows, (0.02, 0.05, 0.1) if quick else BUDGETS,
                             lambda m: print(m, file=sys.stderr, flush=True))
    if name == "dev":
        figure(refs, inplace, restart, os.path.join(ROOT, FIGURE))
    keys = list(refs)
    means = {"in_place": {str(b): judged(mean_point(v, keys), refs, keys, 24) for b, v in inplace.items()},
             "restart": {str(b): judged(mean_point(v, keys), refs, keys, 3) for b, v in restart.items()}}
    return section(refs, inplace, restart, time.perf_counter() - t0, quick, name), means


def run(quick: bool) -> str:
    return measure(quick)[0]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--suite", choices=("dev", "other"), default="dev",
                    help="dev (default), or other: the series dev does not read (benchmarks.other_traces)")
    ap.add_argument("--json", help="also write the per-budget means here")
    a = ap.parse_args(argv)
    text, means = measure(a.quick, a.suite)
    print(text)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(means, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
