"""Colocation (issue 6): utilisation and online shortfall of each policy on real traces.

`tidewise simulate colocation` on the real traces of ../shared/data: 40 nodes x 32 cores, 7 days
at 1 minute, every policy and sweep setting (quick: 10 nodes x 2 days). Forecasts (auto selection,
one call per simulated day) are cached between runs in the system temp folder.

    .venv/bin/python -m benchmarks.run --only colocation            # full
    .venv/bin/python -m benchmarks.run --only colocation --quick    # 10 nodes, 2 days
"""
from __future__ import annotations

import os
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED_DATA = os.environ.get("SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
CACHE = os.path.join(tempfile.gettempdir(), "tidewise-colocation-forecasts")


def _pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"


def run(quick: bool) -> str:
    from studies.simulation.runner import run_study, write_outputs
    from studies.simulation.study import StudySettings, details_json

    nodes, days = (10, 2) if quick else (40, 7)
    s = StudySettings(traces=SHARED_DATA, nodes=nodes, days=days, seed=0, cache_dir=CACHE)
    t0 = time.perf_counter()
    study = run_study(s)
    seconds = time.perf_counter() - t0
    out = os.path.join(tempfile.gettempdir(), "tidewise-colocation-bench")
    write_outputs(study, out)
    d = details_json(study)
    lines = _runs_table(d, nodes, days, seconds)
    lines += _verdict(d)
    lines += _equal_risk(d["verdict"])
    lines += _where_held_back(d)
    lines += ["", *_other_seeds(s, (1, 2) if not quick else ()), ""]
    return "\n".join(lines)


def _runs_table(d: dict, nodes: int, days: int, seconds: float) -> list[str]:
    """The command, the set-up in one paragraph, and one row per policy setting."""
    c = d["cluster"]
    cmd = (f".venv/bin/tidewise simulate colocation --traces ../shared/data --nodes {nodes} --days {days} "
           f"--policy all --seed 0 --out simulation-out")
    lines = [
        "## Colocation (issue 6)\n",
        f"`{cmd}` (report: `simulation-out/report.html`). {c['nodes']} nodes x {c['cores_per_node']:g} cores, "
        f"{c['services']} online services replaying {len(c['traces'])} real traces from ../shared/data "
        f"(Cloud Cluster Capacity, Donut KPIs, NAB, WorldCup98, NASA-KSC; each trace's last {days} whole days, "
        f"the days before them as training history), requests at {_pct(c['requested_share'])} of allocatable, "
        f"a seeded batch queue; 1-minute loop, quota applied one minute after the measurement. "
        f"No-colocation utilisation {_pct(c['no_colocation_utilisation'])}. Shortfall = share of node-minutes "
        f"where online demand was not fully served while batch held CPU. Run time {seconds:.0f} s "
        "(forecasts cached after the first run).\n",
        "| policy | utilisation | shortfall | batch core-hours | evictions | held back (cores) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, r in d["runs"].items():
        lines.append(f"| `{label}` | {_pct(r['utilisation'])} | {_pct(r['shortfall'], 4)} | "
                     f"{r['batch_core_hours']:.0f} | {r['evictions']} | {r['held_back_cores']:.2f} |")
    node_minutes = c["nodes"] * days * 1440
    lines.append(f"\nHeld back = allocatable - batch quota - online demand, mean cores per node-minute. "
                 f"{node_minutes:,} node-minutes: a shortfall of 0.001% is {node_minutes / 1e5:.0f} node-minutes, so "
                 "differences below ~0.005% are a handful of minutes and within noise.\n")
    lines.append("")
    return lines


def _verdict(d: dict) -> list[str]:
    """Targets 1 and 2 of issue 6, met or missed, and why the baseline keeps up."""
    v, lines = d["verdict"], []
    if "tidewise_default" in v:
        t = v["tidewise_default"]
        lines.append(f"- Target 1 (tidewise >= 65% utilisation at <= 0.1% shortfall): tidewise default "
                     f"{_pct(t['utilisation'])} at {_pct(t['shortfall'], 4)} — "
                     f"**{'met' if v['default_meets_utilisation'] else 'missed'}**.")
    if "lead" in v:
        lines.append(f"- Target 2 (>= 5 points above the best swept baseline at that shortfall): best tidewise "
                     f"`{v['tidewise_best']['label']}` {_pct(v['tidewise_best']['utilisation'])} vs best baseline "
                     f"`{v['best_baseline']['label']}` {_pct(v['best_baseline']['utilisation'])}: "
                     f"{100 * v['lead']:+.1f} points — **{'met' if v['meets_lead'] else 'missed'}**.")
        tb, bb = d["runs"][v["tidewise_best"]["label"]], d["runs"][v["best_baseline"]["label"]]
        lines.append(f"  The baseline leaves online {bb['held_back_cores']:.2f} cores beyond its demand, tidewise "
                     f"{tb['held_back_cores']:.2f}: with the quota re-set every minute, a reactive rule only has "
                     "to cover one minute's change in demand, a forecast-driven one the forecast's uncertainty; "
                     "at 1-minute resolution the traces' node-level minute-to-minute changes are small enough that "
                     f"the baseline stays within the budget ({_pct(bb['shortfall'], 4)}).")
    return lines


def _equal_risk(v: dict) -> list[str]:
    """Each tidewise setting within the budget against the best baseline that is at least as safe."""
    if not v.get("equal_risk"):
        return []
    lines = ["", "At equal risk — each tidewise setting within the budget against the best katalyst or "
             "koordinator setting whose shortfall is no higher:", "",
             "| tidewise setting | utilisation | shortfall | best baseline at no more shortfall | utilisation "
             "| shortfall | lead |", "|---|---:|---:|---|---:|---:|---:|"]
    for row in v["equal_risk"]:
        if row["baseline"] is None:
            lines.append(f"| `{row['tidewise']}` | {_pct(row['utilisation'])} | {_pct(row['shortfall'], 4)} "
                         "| none this safe | | | |")
        else:
            lines.append(f"| `{row['tidewise']}` | {_pct(row['utilisation'])} | {_pct(row['shortfall'], 4)} | "
                         f"`{row['baseline']}` | {_pct(row['baseline_utilisation'])} | "
                         f"{_pct(row['baseline_shortfall'], 4)} | {100 * row['lead']:+.1f} |")
    lines.append("")
    return lines


def _where_held_back(d: dict) -> list[str]:
    """Where tidewise's estimate sits above demand, and the series whose forecast is exceeded most."""
    lines = []
    if d["tidewise_breakdown"]:
        b = d["tidewise_breakdown"].get("tidewise")
        if b:
            lines.append(
                f"- Where tidewise holds CPU back (mean cores per node-minute, online demand "
                f"{b['online_demand_next_minute']:.2f}): the day-ahead q0.95 forecast sits "
                f"{b['forecast_quantile_over_demand']:.2f} above the demand that came, the 1-hour window's peak "
                f"another {b['window_peak_over_quantile']:.2f} above that, the nowcast moves it by "
                f"{b['nowcast_correction']:+.2f}, the reactive term adds {b['reactive_term']:.2f}: the estimate is "
                f"{b['estimate_over_demand']:.2f} above the next minute's demand, plus reserve + margin "
                f"{b['reserve_and_margin']:.2f}.")
    if d["forecast_coverage"]:
        cov = d["forecast_coverage"]
        worst = sorted(cov, key=lambda r: -r.get("exceed_q0.95", 0))[:5]
        lines.append("- Forecast q0.95 exceeded most often (share of 1-minute demand above it): " + ", ".join(
            f"`{r['series']}` {_pct(r['exceed_q0.95'])} ({r.get('model', '')})" for r in worst) + ".")
    return lines


def _other_seeds(base, seeds) -> list[str]:
    """The same study on other clusters and batch queues: does the verdict depend on one draw?"""
    from dataclasses import replace

    from studies.simulation.runner import run_study

    if not seeds:
        return []
    out = [f"Other seeds (other services, placements and batch queues; `--seed N`), best setting of each "
           f"policy within the 0.1% shortfall budget:\n",
           "| seed | no colocation | tidewise default | best tidewise | best katalyst | best koordinator | lead |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for seed in seeds:
        st = run_study(replace(base, seed=seed))
        by = {r.label: r for r in st.results}

        def best(fam: str) -> str:
            ok = [r for r in st.results if r.label.split("@")[0] == fam and r.shortfall <= 0.001]
            r = max(ok, key=lambda r: r.utilisation) if ok else None
            return f"{_pct(r.utilisation)} (`{r.label}`)" if r else "—"

        v = st.verdict()
        out.append(f"| {seed} | {_pct(by['none'].utilisation)} | {_pct(by['tidewise'].utilisation)} at "
                   f"{_pct(by['tidewise'].shortfall, 4)} | {best('tidewise')} | {best('katalyst')} | "
                   f"{best('koordinator')} | {100 * v.get('lead', float('nan')):+.1f} |")
    return out
