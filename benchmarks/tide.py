"""Tide (issue 17): whole nodes lent to batch and handed back, per policy, on three seeds.

`tidewise simulate tide` on the real traces of ../shared/data: 40 nodes, 7 days at 1 minute, every
policy and sweep setting, seeds 0-2 (quick: 10 nodes x 2 days, seed 0), then seed 0 again with a
hand-back that takes 10 minutes instead of 3 (how the ranking moves with the model's one free
timing). The pool's hourly forecasts are cached between runs in the system temp folder.

    .venv/bin/python -m benchmarks.run --only tide            # full (3 seeds + 1 sensitivity run)
    .venv/bin/python -m benchmarks.run --only tide --quick    # 10 nodes, 2 days, seed 0
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED_DATA = os.environ.get("SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
CACHE = os.path.join(tempfile.gettempdir(), "tidewise-tide-forecasts")
SEEDS = (0, 1, 2)
SLOW_RETURN = 10  # minutes: the sensitivity run's hand-back


def study_row(seed: int, nodes: int = 40, days: int = 7, return_minutes: int | None = None) -> dict:
    """One study's numbers (and its report for seed 0 in the temp folder)."""
    from studies.simulation.tide_model import PoolSettings
    from studies.simulation.tide_study import TideStudySettings, details_json, run_tide_study, write_tide_outputs

    pool = PoolSettings() if return_minutes is None else PoolSettings(return_minutes=return_minutes)
    s = TideStudySettings(traces=SHARED_DATA, nodes=nodes, days=days, seed=seed, cache_dir=CACHE, pool=pool)
    t0 = time.perf_counter()
    study = run_tide_study(s)
    seconds = time.perf_counter() - t0
    if seed == 0 and return_minutes is None:
        write_tide_outputs(study, os.path.join(tempfile.gettempdir(), "tidewise-tide-bench"))
    d = details_json(study)
    need = study.pool.needed
    k = study.pool.settings.return_minutes
    rises = float(np.mean(need[k:] - need[:-k] >= 2))
    return {"seed": seed, "seconds": seconds, "runs": d["runs"], "verdict": d["verdict"], "pool": d["pool"],
            "return_minutes": k, "rise2_share": rises, "default": d["tidewise_default"],
            "breakdown": d["tidewise_breakdown"]}


def run(quick: bool) -> str:
    nodes, days, seeds = (10, 2, (0,)) if quick else (40, 7, SEEDS)
    rows = [study_row(seed, nodes, days) for seed in seeds]
    slow = study_row(0, nodes, days, return_minutes=SLOW_RETURN)
    return render(rows, slow, nodes, days)


def _best_zero_late(runs: dict[str, dict]) -> tuple[str, dict] | None:
    ok = [(k, r) for k, r in runs.items() if k.startswith("tidewise") and r["late_minutes"] == 0]
    return max(ok, key=lambda kr: kr[1]["node_hours_lent"]) if ok else None


def _verdict_row(label: str, row: dict) -> str:
    v = row["verdict"]
    if "targets" not in v:
        return f"| {label} | no watermark setting with no more late minutes | | | | | | |"
    t, w, ok, per = v["tidewise"], v["best_watermark"], v["targets"], v["pods_moved_per_100_node_hours"]
    best = _best_zero_late(row["runs"])
    best_txt = f"`{best[0]}` {best[1]['node_hours_lent']:.0f}" if best else "none"
    mark = {True: "met", False: "**missed**"}
    return (f"| {label} | {t['node_hours_lent']:.0f} / {t['late_minutes']} / {t['pods_moved_per_day']:.0f} | "
            f"`{w['label']}` {w['node_hours_lent']:.0f} / {w['late_minutes']} / {w['pods_moved_per_day']:.0f} | "
            f"{v['lend_ratio']:.2f}x ({mark[ok['lend']]}) | {mark[ok['zero_late']]} | "
            f"{per['tidewise']:.0f} vs {per['best_watermark']:.0f} ({mark[ok['pods_moved']]}) | "
            f"{t['goodput_core_hours']:.0f} vs {w['goodput_core_hours']:.0f} | {best_txt} |")


def render(rows: list[dict], slow: dict, nodes: int, days: int) -> str:
    p, d = rows[0]["pool"], rows[0]["default"] or {}
    lines = [
        "## Tide (issue 17)\n",
        f"`.venv/bin/tidewise simulate tide --traces ../shared/data --nodes {nodes} --days {days} --policy all "
        f"--seed S` for S in {[r['seed'] for r in rows]} (report of seed 0: `$TMPDIR/tidewise-tide-bench/report.html`). "
        f"The colocation simulator's online services ({p['services']} for seed 0, {len(p['traces'])} real traces) "
        f"run under the HPA (target 70%, ~1-core pods, 5-minute scale-down window); their requests need "
        f"{p['needed_min']}-{p['needed_max']} of the {p['nodes']} nodes (mean {p['needed_mean']:.1f}, seed 0), so at "
        f"most {p['lendable_node_hours']:.0f} node-hours could be lent. A hand-back evicts the node's batch pods and "
        f"serves online {rows[0]['return_minutes']} minutes later; a lend drains the online side's mean pods per "
        f"node. Tidewise's default is the serving loop's (`autoscaler/logic/tide.py` `TideSettings`): lead "
        f"{d.get('lead_minutes')} min, quantile {d.get('quantile')}, min dwell {d.get('min_dwell_minutes')} min, "
        f"headroom {d.get('headroom')}, {d.get('max_moves')} moves a minute, on an hourly auto forecast of the "
        "pool's requested cores made from the past only.\n",
        "Per seed: tidewise's default against the watermark setting that lends most with no more late minutes "
        "(node-hours lent / late minutes / pods moved a day), the targets (lend >= 1.2x; zero late minutes; pods "
        "moved per 100 node-hours lent no more than the watermark's, i.e. per day at equal lending), goodput "
        "(core-hours) and the tidewise setting that lends most with zero late minutes.\n",
        "| seed | tidewise default | best watermark | lend ratio | zero late | pods moved / 100 node-h | goodput | "
        "best tidewise with 0 late |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [_verdict_row(str(r["seed"]), r) for r in rows]
    lines.append(_verdict_row(f"0, hand-back {slow['return_minutes']} min", slow))
    lines += ["", *_misses(rows), "", *_full_table(rows[0]),
              "", "Seconds per study (2 shared cores, upper bounds): "
                  + ", ".join(f"{r['seconds']:.0f}" for r in rows + [slow]) + "."]
    return "\n".join(lines) + "\n"


def _misses(rows: list[dict]) -> list[str]:
    ratios = [r["verdict"].get("lend_ratio", float("nan")) for r in rows]
    rise = [100 * r["rise2_share"] for r in rows]
    pods_ok = [r["seed"] for r in rows if r["verdict"].get("targets", {}).get("pods_moved")]
    pods_missed = [r["seed"] for r in rows if r["seed"] not in pods_ok]
    why = [r["breakdown"].get("tidewise", {}) for r in rows]
    now, new, rise_fc = (sum(b.get(f"return_minutes_{k}", 0) for b in why)
                         for k in ("need_now", "new_forecast", "forecast_rise"))
    best = [(_best_zero_late(r["runs"]) or ("", {"node_hours_lent": 0.0}))[1]["node_hours_lent"]
            / r["verdict"]["best_watermark"]["node_hours_lent"] for r in rows if "best_watermark" in r["verdict"]]
    text = (
        f"**What is missed and why.** Lending: tidewise's default lends {min(ratios):.2f}-{max(ratios):.2f}x the "
        "best watermark with no more late minutes, against the 1.2x target; its best swept setting with zero late "
        f"minutes {min(best):.2f}-{max(best):.2f}x. In this pool the reactive rule is not caught out: the online side's need "
        f"rises by 2 or more nodes within a hand-back ({rows[0]['return_minutes']} min) in only "
        f"{min(rise):.1f}-{max(rise):.1f}% of minutes (each trace keeps its own time of day, so 36 tides add up to "
        "a weak daily cycle with slow ramps), and a watermark handing back above 70-85% full keeps 6-21% of "
        "allocatable to absorb them. Tidewise's plan (the serving defaults) keeps the forecast's 0.9 quantile x "
        "1.25 headroom for lead + min dwell (3 h) ahead, and that forecast (of the sum of the services' 15-minute "
        "peaks, as serve sums its workloads') sits above the pool's 1-minute need: margin that is not lent. Its "
        "lower headrooms lend more but are late (table below); a slower hand-back "
        f"({SLOW_RETURN} min, last row) costs the tight watermarks late minutes first and brings the ratio closer "
        "to 1. ")
    if pods_missed:
        text += (f"Pods moved: met on seed(s) {pods_ok or 'none'}, missed on {pods_missed}: where the best watermark "
                 "is the wide band (`high=0.85`), it rides out short rises and moves fewer pods per node-hour than "
                 "tidewise, whose hand-backs follow its forecast (minutes with a hand-back over the seeds: "
                 f"{new} at a new hourly forecast, {rise_fc} as a forecast rise entered the lead window, {now} from "
                 "the need measured now); each hand-back is re-lent after the 2-hour dwell.")
    else:
        text += "Pods moved: met on every seed (the dwell and rate limit move fewer pods per node-hour lent)."
    return [text]


def _full_table(row: dict) -> list[str]:
    cols = ("node_hours_lent", "late_minutes", "pods_moved", "pods_moved_per_day", "goodput_core_hours",
            "lost_core_hours", "lends", "returns")
    out = [f"Every setting, seed {row['seed']}:\n", "| setting | " + " | ".join(c.replace("_", " ") for c in cols) + " |",
           "|---|" + "---|" * len(cols)]
    for label, r in row["runs"].items():
        out.append(f"| `{label}` | " + " | ".join(f"{r[c]:.0f}" if isinstance(r[c], float) else str(r[c])
                                                  for c in cols) + " |")
    return out
