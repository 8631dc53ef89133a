"""Replay benchmark (issues 7 and 12): `tidewise replay vpa|hpa` scored by the reference scorer,
with each reference's whole trade-off curve and Tidewise's settings on it.

Runs ../shared/eval/bench_decisions.py on the `dev` suite once per Tidewise setting (VARIANTS) with
`--project "<venv>/tidewise replay [flags]"`: the scorer writes each series' history with its
`start`, calls the command and scores the output against its own stock-VPA and reactive-HPA
references at every setting of theirs, so these numbers are the outside evaluator's. The figure
(an SVG beside this module, referenced from BENCHMARKS.md) puts every run on the references' curves.

    python -m benchmarks.run --only replay          # every variant, ~20 min each on 2 shared cores
    python -m benchmarks.replay LABEL=SCORER.json ...  # the section from scorer --json files already made
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Mapping

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVAL = os.environ.get("SHARED_EVAL", os.path.join(ROOT, "..", "shared", "eval"))
FIGURE = "benchmarks/replay-tradeoff.svg"  # relative to the checkout, as BENCHMARKS.md links it
# (label, flags after `tidewise replay`): the default and each opt-in setting the issue measures
# (the default reads day-ahead forecasts for the VPA and decision-time ones for the HPA, as serve)
VARIANTS = [("tidewise (default)", ""), ("tidewise --choose-by-cost", "--choose-by-cost"),
            ("tidewise --decision-model gbm", "--decision-model gbm"),
            ("tidewise --decision-model day-ahead", "--decision-model day-ahead")]
TARGETS = "issue 12: VPA <= 0.80x slack at equal violation and <= 3 changes/day; HPA <= 0.50x over-target at <= 1.10x replicas"


def score(flags: str, quick: bool) -> tuple[dict[str, Any], float]:
    """One scorer run of `tidewise replay FLAGS` (its --json report, seconds taken)."""
    exe = os.path.join(os.path.dirname(sys.executable), "tidewise")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "decisions.json")
        cmd = [sys.executable, "bench_decisions.py", "dev", "--project", f"{exe} replay {flags}".strip(), "--json", out]
        if quick:
            cmd += ["--max-series", "4"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=EVAL, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"bench_decisions failed ({flags or 'default'}): {r.stderr[-2000:]}")
        with open(out) as fh:
            return json.load(fh), time.perf_counter() - t0


def figure(reports: Mapping[str, Mapping[str, Any]], path: str) -> None:
    """VPA and HPA trade-off panels as one small SVG (fixed hash salt and no date: re-runs diff cleanly)."""
    from studies.replay.tradeoff import plot_tradeoff, scorer_curves
    from reports.pages import pyplot

    plt = pyplot()
    plt.rcParams["svg.hashsalt"] = "tidewise"
    plt.rcParams["svg.fonttype"] = "none"  # text as text, not glyph paths: a third of the size
    policies = next(iter(reports.values()))["policies"]
    runs = {label: rep["policies"] for label, rep in reports.items()}
    fig, (left, right) = plt.subplots(2, 1, figsize=(9, 9))  # stacked: each legend sits beside its panel
    plot_tradeoff(left, scorer_curves("vpa", policies, runs), "VPA: slack against violation (lower-left is better)")
    plot_tradeoff(right, scorer_curves("hpa", policies, runs), "HPA: over-target share against replicas (lower-left is better)")
    right.set_ylim(0, None)
    try:
        fig.savefig(path, format="svg", bbox_inches="tight", metadata={"Date": None})
    finally:
        plt.close(fig)


def _timing(took: Mapping[str, float]) -> str:
    if all(v != v for v in took.values()):  # NaN: drawn from saved reports (`main`)
        return "Rows from saved scorer reports (each run ~20-45 min on 2 shared cores)."
    return ("Minutes per run (both commands, 2 shared cores: upper bounds): "
            + ", ".join(f"{k} {v / 60:.0f}" for k, v in took.items()) + ".")


def _f(v: Any, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) else "—"


def section(reports: Mapping[str, Mapping[str, Any]], took: Mapping[str, float]) -> str:
    """The Markdown section for one scorer report per Tidewise setting (label -> report)."""
    first = next(iter(reports.values()))
    p = first["policies"]
    ref_vpa, ref_hpa = p["vpa_default"], p["hpa_reactive"]
    lines = [
        "## Replay: `tidewise replay vpa|hpa` scored by the reference scorer (issues 7, 12)",
        "",
        f"Reproduce: `cd ../shared/eval && python bench_decisions.py dev --project \"tidewise replay [flags]\" --json OUT` "
        f"per row (or `python -m benchmarks.run --only replay`; `python -m benchmarks.replay LABEL=OUT ...` redraws "
        f"from saved reports). {first['series']} series of the `dev` suite (non-negative ones; data: ../shared/data), "
        f"each replayed over its last min(7, days − 6) days from the past only. {_timing(took)} Targets ({TARGETS}).",
        "",
        "| VPA | slack | violation | changes/day | slack / stock at equal violation |",
        "|---|---|---|---|---|",
        f"| stock VPA (decaying histogram, 24 h half-life, p90 x1.15) | {ref_vpa['slack']:.3f} | {ref_vpa['violation']:.4f} | "
        f"{_f(ref_vpa.get('changes_per_day'), '.2f')} | 1.00 |",
        f"| perfect foresight (each hour's max) | {p['vpa_perfect_foresight']['slack']:.3f} | 0 | — | — |",
    ]
    for label, rep in reports.items():
        v = rep["policies"].get("project_vpa")
        if not v:
            continue
        lines.append(f"| {label} | {_f(v.get('slack'), '.3f')} | {_f(v.get('violation'), '.4f')} | "
                     f"{_f(v.get('changes_per_day'), '.2f')} | {_f(v.get('slack_vs_reference_at_equal_violation'), '.3f')} |")
    lines += ["", "| HPA | mean replicas | over-target | replicas / reactive | over-target / reactive at equal replicas |",
              "|---|---|---|---|---|",
              f"| reactive HPA (target 0.7, tolerance 0.1, 5 min stabilisation, 2 min start-up) | "
              f"{ref_hpa['mean_replicas']:.2f} | {ref_hpa['over_target']:.4f} | 1.00 | 1.00 |",
              f"| perfect foresight (replicas = demand) | {p['hpa_perfect_foresight']['mean_replicas']:.2f} | 0 | "
              f"{p['hpa_perfect_foresight']['mean_replicas'] / ref_hpa['mean_replicas']:.3f} | 0 |"]
    for label, rep in reports.items():
        h = rep["policies"].get("project_hpa")
        if not h:
            continue
        lines.append(f"| {label} | {_f(h.get('mean_replicas'), '.2f')} | {_f(h.get('over_target'), '.4f')} | "
                     f"{_f(h.get('replicas_vs_reactive'), '.3f')} | {_f(h.get('over_target_vs_reactive_at_equal_replicas'), '.3f')} |")
    lines += ["", f"![Trade-off curves: the stock VPA at percentiles 0.8-0.99 x margins 1.0-1.4 and the reactive HPA at "
              f"targets 0.75-0.45, perfect foresight, and each Tidewise setting]({FIGURE})", "",
              "Each grey line is the stock VPA at one percentile, margins 1.0 to 1.4 along it; the HPA line is the "
              "reactive HPA at target utilisations 0.75 to 0.45 scored against the real 0.7. A point below a curve "
              "is better than the reference at the same cost. `--choose-by-cost` is VPA only (its HPA row is the "
              "default's). The decisions are the serving loop's (`studies/replay/decisions.py` over "
              "`autoscaler/logic`).", ""]
    return "\n".join(lines)


def run(quick: bool) -> str:
    if not os.path.isdir(EVAL):
        raise RuntimeError(f"the reference scorers are expected at {EVAL}")
    reports, took = {}, {}
    for label, flags in VARIANTS[:2] if quick else VARIANTS:
        reports[label], took[label] = score(flags, quick)
    figure(reports, os.path.join(ROOT, FIGURE))
    return section(reports, took)


def main(argv: list[str]) -> int:
    """Print the section (and redraw the figure) from LABEL=scorer.json arguments."""
    reports = {}
    for arg in argv:
        label, _, path = arg.partition("=")
        with open(path) as fh:
            reports[label] = json.load(fh)
    figure(reports, os.path.join(ROOT, FIGURE))
    print(section(reports, {label: float("nan") for label in reports}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
