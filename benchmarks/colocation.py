"""Colocation (issue 13): batch goodput, slowdown and evictions next to online services, per policy,
at three settings of the within-minute burst model and three seeds.

`tidewise simulate colocation` on the real traces of ../shared/data: 40 nodes x 32 cores, 7 days
at 1 minute, every policy and sweep setting, seeds 0-2, bursts none / calibrated / high (quick:
10 nodes x 2 days, seed 0). Forecasts (auto selection, one call per simulated day) are cached
between runs in the system temp folder.

    .venv/bin/python -m benchmarks.run --only colocation            # full (9 studies)
    .venv/bin/python -m benchmarks.run --only colocation --quick    # 10 nodes, 2 days, seed 0

`study_row(seed, bursts, nodes, days)` is one study as JSON-able numbers and `render(rows, ...)`
the section, so that the nine studies can also be run in parallel and rendered together.
"""
from __future__ import annotations

import os
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED_DATA = os.environ.get("SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
CACHE = os.path.join(tempfile.gettempdir(), "tidewise-colocation-forecasts")
BURSTS = ("none", "calibrated", "high")
SEEDS = (0, 1, 2)


def _pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"


def study_row(seed: int, bursts: str, nodes: int = 40, days: int = 7) -> dict:
    """One study's numbers (and its report for seed 0 in the temp folder)."""
    from studies.simulation.colocation.runner import run_study, write_outputs
    from studies.simulation.colocation.study import StudySettings, details_json

    s = StudySettings(traces=SHARED_DATA, nodes=nodes, days=days, seed=seed, bursts=bursts, cache_dir=CACHE)
    t0 = time.perf_counter()
    study = run_study(s)
    seconds = time.perf_counter() - t0
    if seed == 0:
        write_outputs(study, os.path.join(tempfile.gettempdir(), "tidewise-colocation-bench", bursts))
    d = details_json(study)
    return {"seed": seed, "bursts": bursts, "seconds": seconds, "runs": d["runs"], "verdict": d["verdict"],
            "cluster": {k: d["cluster"][k] for k in ("nodes", "services", "traces", "no_colocation_utilisation",
                                                     "mean_peak_over_mean_cores", "requested_share")},
            "burst_model": d["bursts"]["pooled"] | {"factors": sorted({round(v["factor"], 3) for v in
                                                                       d["bursts"]["traces"].values()})},
            "breakdown": d["tidewise_breakdown"]}


def run(quick: bool) -> str:
    nodes, days, seeds = (10, 2, (0,)) if quick else (40, 7, SEEDS)
    rows = [study_row(seed, b, nodes, days) for b in BURSTS for seed in seeds]
    return render(rows, nodes, days)


def render(rows: list[dict], nodes: int, days: int) -> str:
    lines = _intro(rows, nodes, days)
    lines += _verdicts(rows)
    lines += _misses(rows)
    lines += _ranking(rows)
    lines += _full_table(next(r for r in rows if r["seed"] == 0 and r["bursts"] == "calibrated"))
    return "\n".join(lines) + "\n"


def _intro(rows: list[dict], nodes: int, days: int) -> list[str]:
    c, m = rows[0]["cluster"], next(r for r in rows if r["bursts"] == "calibrated")["burst_model"]
    peaks = {b: [r["cluster"]["mean_peak_over_mean_cores"] for r in rows if r["bursts"] == b] for b in BURSTS}
    secs = [r["seconds"] for r in rows]
    return [
        "## Colocation (issue 13)\n",
        f"`.venv/bin/tidewise simulate colocation --traces ../shared/data --nodes {nodes} --days {days} --policy all "
        f"--seed S --bursts B` for S in {sorted({r['seed'] for r in rows})} and B in none, calibrated, high "
        f"(report of seed 0: `$TMPDIR/tidewise-colocation-bench/<B>/report.html`). {c['nodes']} nodes x 32 cores, "
        f"about {c['services']} online services replaying {len(c['traces'])} real traces (requests at "
        f"{_pct(c['requested_share'])} of allocatable, no-colocation utilisation {_pct(c['no_colocation_utilisation'])} "
        "for seed 0); batch jobs arrive at one cluster queue (Poisson, 0.8 x allocatable of work: never empty) and "
        "each policy places them. Shortfall = node-minutes whose online *peak inside the minute* did not fit beside "
        "the CPU batch held. Goodput = batch CPU less the work of evicted jobs; slowdown = (finish - first start) / "
        "nominal runtime of completed jobs.\n",
        f"Burst model (docs/colocation-simulator.md), estimated from the 1-minute traces' histories: "
        f"{m['windows']:,} five-minute windows, busiest minute over the window's mean: median "
        f"{_pct(m['p50_excess'])}, mean {_pct(m['mean_excess'])}, p99 {_pct(m['p99_excess'], 0)}, p99.9 "
        f"{_pct(m['p999_excess'], 0)}; median Hurst exponent {m['median_hurst']:.2f} (capped at 1 below the minute), "
        f"so calibrated factors {', '.join(f'{f:g}' for f in m['factors'])}; high: x {5 ** 0.5:.2f}. Mean node peak "
        "over the minute's mean (cores): " + ", ".join(f"{b} {sum(v) / len(v):.2f}" for b, v in peaks.items() if v)
        + ".\n",
        f"Wall time per study (one seed, one burst setting, {len(rows[0]['runs'])} policy settings, forecasts "
        f"cached): {min(secs):.0f}-{max(secs):.0f} s on this 2-core machine shared with other jobs (an upper "
        "bound).\n",
    ]


def _verdicts(rows: list[dict]) -> list[str]:
    """Per burst setting and seed: the best setting of tidewise and of the baselines within 0.1%."""
    lines = ["Best setting of each side within the 0.1% shortfall budget (most goodput); targets apply at "
             "`calibrated`:\n",
             "| bursts | seed | best tidewise | best baseline | goodput ratio | p95 slowdown (tw / base) "
             "| evictions (tw / base) | tidewise utilisation | targets met |",
             "|---|---:|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        v = r["verdict"]
        if "goodput_ratio" not in v:
            lines.append(f"| {r['bursts']} | {r['seed']} | — | — | | | | | no setting within the budget |")
            continue
        t, b = v["tidewise_best"], v["best_baseline"]
        met = [k for k, ok in v["targets"].items() if ok]
        lines.append(f"| {r['bursts']} | {r['seed']} | `{t['label']}` {t['goodput_core_hours']:,.0f} | "
                     f"`{b['label']}` {b['goodput_core_hours']:,.0f} | {v['goodput_ratio']:.3f} | "
                     f"{t['slowdown_p95']:.2f} / {b['slowdown_p95']:.2f} | {t['evictions']} / {b['evictions']} | "
                     f"{_pct(t['utilisation'])} | {'all' if len(met) == 4 else ', '.join(met) or 'none'} |")
    lines.append("")
    return lines


def _misses(rows: list[dict]) -> list[str]:
    """At `calibrated`, each target missed and by how much."""
    out = []
    for r in (r for r in rows if r["bursts"] == "calibrated" and "targets" in r["verdict"]):
        v = r["verdict"]
        t, b = v["tidewise_best"], v["best_baseline"]
        gaps = {"goodput": f"goodput {v['goodput_ratio']:.3f}x, {100 * (v['goodput_target'] - v['goodput_ratio']):.1f} "
                           "points short of 1.05x",
                "slowdown_p95": f"p95 slowdown {t['slowdown_p95']:.2f} over {b['slowdown_p95']:.2f}",
                "evictions": f"evictions {t['evictions']} over {v['eviction_target'] * b['evictions']:.0f}",
                "utilisation": f"utilisation {_pct(t['utilisation'])} under 65%"}
        missed = [gaps[k] for k, ok in v["targets"].items() if not ok]
        out.append(f"- Seed {r['seed']} at calibrated: " + ("every target met." if not missed else
                                                             "missed: " + "; ".join(missed) + "."))
    return out + [""] if out else []


def _ranking(rows: list[dict]) -> list[str]:
    """How the families rank by their best goodput within the budget, per burst setting (mean over seeds)."""
    lines = ["Ranking by best goodput within the budget (mean over seeds, core-hours; the setting that won "
             "most often):\n", "| bursts | tidewise | katalyst | koordinator |", "|---|---:|---:|---:|"]
    for b in BURSTS:
        cells = []
        for fam in ("tidewise", "katalyst", "koordinator"):
            best = []
            for r in (r for r in rows if r["bursts"] == b):
                ok = [(m["goodput_core_hours"], label) for label, m in r["runs"].items()
                      if label.split("@")[0] == fam and m["shortfall"] <= 0.001]
                if ok:
                    best.append(max(ok))
            if not best:
                cells.append("—")
                continue
            labels = [label for _, label in best]
            cells.append(f"{sum(g for g, _ in best) / len(best):,.0f} (`{max(set(labels), key=labels.count)}`)")
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _full_table(r: dict) -> list[str]:
    lines = [f"Every setting, seed {r['seed']}, bursts {r['bursts']}:\n",
             "| policy | utilisation | shortfall | goodput core-h | lost core-h | jobs | slowdown p50 / p95 "
             "| evictions | held back (cores) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, m in r["runs"].items():
        lines.append(f"| `{label}` | {_pct(m['utilisation'])} | {_pct(m['shortfall'], 4)} | "
                     f"{m['goodput_core_hours']:,.0f} | {m['lost_core_hours']:,.0f} | {m['jobs_completed']:,} | "
                     f"{m['slowdown_p50']:.2f} / {m['slowdown_p95']:.2f} | {m['evictions']} | "
                     f"{m['held_back_cores']:.2f} |")
    b = r["breakdown"].get("tidewise")
    if b:
        lines.append(f"\nTidewise's mean reserve {b['mean_reserve_cores']:.2f} cores per node; its forecast kept a job "
                     f"off the nodes with current room {b['deferred_by_forecast']:,.0f} times "
                     f"({b['placements']:,.0f} jobs placed).")
    lines.append("")
    return lines
