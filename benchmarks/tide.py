"""Tide (issue 17): whole nodes lent to batch and handed back, per policy, on five seeds.

`tidewise simulate tide` on the real traces of ../shared/data: 40 nodes, 7 days at 1 minute, every
policy and sweep setting, seeds 0-2 (where the default was developed) and seeds 3-4 (held out: run
once with the final default, nothing changed after). Quick: 10 nodes x 2 days, seed 0. Each row is
read against the oracle (perfect foresight) and the reactive bound: the measured need plus the
week's largest rise within a hand-back known in hindsight. The pool's hourly forecasts are cached
between runs in the system temp folder.

    .venv/bin/python -m benchmarks.run --only tide            # full (5 seeds)
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
HELD_OUT = (3, 4)


def reactive_bound(needed: np.ndarray, nodes: int, reaction: int) -> tuple[float, int]:
    """(node-hours, margin): lending with the online side at the need measured now plus the week's
    largest rise within `reaction` minutes (known only in hindsight), moved instantly: the most a
    policy with a fixed margin over the measured need lends with zero late minutes."""
    need = np.minimum(needed, nodes)
    ahead = np.concatenate([need, np.full(reaction, need[-1])])
    rise = int((np.lib.stride_tricks.sliding_window_view(ahead, reaction + 1).max(axis=1)[:len(need)] - need).max())
    return float(np.clip(nodes - need - rise, 0, None).sum() / 60.0), rise


def study_row(seed: int, nodes: int = 40, days: int = 7, return_minutes: int | None = None) -> dict:
    """One study's numbers (and its report for seed 0 in the temp folder)."""
    from studies.simulation.tide.model import PoolSettings
    from studies.simulation.tide.report import write_tide_outputs
    from studies.simulation.tide.study import TideStudySettings, details_json, run_tide_study

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
    bound, rise = reactive_bound(need, nodes, k + 1)
    return {"seed": seed, "seconds": seconds, "runs": d["runs"], "verdict": d["verdict"], "pool": d["pool"],
            "return_minutes": k, "rise2_share": rises, "default": d["tidewise_default"],
            "breakdown": d["tidewise_breakdown"], "reactive_bound": bound, "max_rise": rise}


def run(quick: bool) -> str:
    nodes, days, seeds, held = (10, 2, (0,), ()) if quick else (40, 7, SEEDS, HELD_OUT)
    rows = [study_row(seed, nodes, days) for seed in seeds]
    held_rows = [study_row(seed, nodes, days) for seed in held]
    return render(rows, held_rows, nodes, days)


def _best_zero_late(runs: dict[str, dict]) -> tuple[str, dict] | None:
    ok = [(k, r) for k, r in runs.items() if k.startswith("tidewise") and r["late_minutes"] == 0]
    return max(ok, key=lambda kr: kr[1]["node_hours_lent"]) if ok else None


def _verdict_row(label: str, row: dict) -> str:
    v = row["verdict"]
    if "targets" not in v:
        return f"| {label} | no watermark setting with no more late minutes |" + " |" * 8
    t, w, ok, per = v["tidewise"], v["best_watermark"], v["targets"], v["pods_moved_per_100_node_hours"]
    best = _best_zero_late(row["runs"])
    best_txt = f"`{best[0]}` {best[1]['node_hours_lent']:.0f}" if best else "none"
    serve = row["runs"].get("tidewise-serve", {})
    wm = w["node_hours_lent"]
    oracle = v.get("oracle_node_hours_lent", float("nan"))
    mark = {True: "met", False: "**missed**"}
    return (f"| {label} | {t['node_hours_lent']:.0f} / {t['late_minutes']} / {t['pods_moved_per_day']:.0f} | "
            f"`{w['label']}` {wm:.0f} / {w['late_minutes']} / {w['pods_moved_per_day']:.0f} | "
            f"{v['lend_ratio']:.2f}x ({mark[ok['lend']]}) | {mark[ok['zero_late']]} | "
            f"{per['tidewise']:.0f} vs {per['best_watermark']:.0f} ({mark[ok['pods_moved']]}) | "
            f"{oracle:.0f} ({oracle / wm:.2f}x) | {row['reactive_bound']:.0f} ({row['reactive_bound'] / wm:.2f}x, "
            f"+{row['max_rise']}) | {serve.get('node_hours_lent', float('nan')):.0f} / {serve.get('late_minutes')} | "
            f"{t['goodput_core_hours']:.0f} vs {w['goodput_core_hours']:.0f} | {best_txt} |")


def render(rows: list[dict], held: list[dict], nodes: int, days: int) -> str:
    p, d = rows[0]["pool"], rows[0]["default"] or {}
    seeds = [r["seed"] for r in rows + held]
    lines = [
        "## Tide (issue 17)\n",
        f"`.venv/bin/tidewise simulate tide --traces ../shared/data --nodes {nodes} --days {days} --policy all "
        f"--seed S` for S in {seeds} (report of seed 0: `$TMPDIR/tidewise-tide-bench/report.html`). "
        f"The colocation simulator's online services ({p['services']} for seed 0, {len(p['traces'])} real traces) "
        f"run under the HPA (target 70%, ~1-core pods, 5-minute scale-down window); their requests need "
        f"{p['needed_min']}-{p['needed_max']} of the {p['nodes']} nodes (mean {p['needed_mean']:.1f}, seed 0), so at "
        f"most {p['lendable_node_hours']:.0f} node-hours could be lent. A hand-back evicts the node's batch pods and "
        f"serves online {rows[0]['return_minutes']} minutes later; a lend drains the online side's mean pods per "
        f"node. Tidewise's default: serve's `plan_pool` (lead {d.get('lead_minutes')} min, min dwell "
        f"{d.get('min_dwell_minutes')} min, {d.get('max_moves')} moves a minute, no lend {d.get('hold_minutes')} min "
        "after a hand-back) on the hourly median forecast of the pool's requested cores (auto, past only) plus a "
        f"margin per lead hour: the {d.get('error_quantile')} quantile of the forecast's own one-minute errors at "
        f"that lead over the last {(d.get('error_window_minutes') or 0) // 1440} days; every step floored by the "
        f"requests measured now plus their {d.get('rise_quantile')} quantile rise within a hand-back's time; "
        f"packed with the pool's 10% packing headroom; a one-node forecast shortfall waited out while the floor "
        "is clear (`return_slack` 1). Until each lead hour has 6 h of errors (the first ~10 h) it runs serve's "
        "fixed stack, `tidewise-serve`: the forecast's 0.9 quantile x 1.25 headroom, what serve runs with "
        "`margin: fixed` and until its ledger is warm (serve's default is the calibrated margin, the same code).\n",
        "Per seed: tidewise's default against the watermark setting that lends most with no more late minutes "
        "(node-hours lent / late minutes / pods moved a day), the targets (lend >= 1.2x; zero late minutes; pods "
        "moved per 100 node-hours lent no more than the watermark's, i.e. per day at equal lending), the oracle "
        "(perfect foresight: lends every node not needed before a hand-back could return it), the reactive bound "
        "(the need measured now + the week's largest rise within a hand-back, in nodes, known in hindsight, moved "
        "instantly: the most a fixed margin lends with zero late minutes), serve's fixed stack (lent / late), "
        "goodput (core-hours) and the tidewise setting that lends most with zero late minutes. Seeds 3 and 4 are "
        "held out: run once with the final default.\n",
        "| seed | tidewise default | best watermark | lend ratio | zero late | pods moved / 100 node-h | oracle | "
        "reactive bound | serve's stack | goodput | best tidewise with 0 late |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_verdict_row(str(r["seed"]), r) for r in rows]
    lines += [_verdict_row(f"{r['seed']} (held out)", r) for r in held]
    lines += ["", *_misses(rows, held), "", *_full_table(rows[0]),
              "", "Seconds per study (2 shared cores, upper bounds): "
                  + ", ".join(f"{r['seconds']:.0f}" for r in rows + held) + "."]
    return "\n".join(lines) + "\n"


def _span(values: list[float], fmt: str = "{:.2f}") -> str:
    return fmt.format(min(values)) + "-" + fmt.format(max(values)) if values else "n/a"


def _misses(rows: list[dict], held: list[dict]) -> list[str]:
    every = [r for r in rows + held if "best_watermark" in r["verdict"]]
    ratio = {r["seed"]: r["verdict"]["lend_ratio"] for r in every}
    wm = {r["seed"]: r["verdict"]["best_watermark"]["node_hours_lent"] for r in every}
    oracle = [r["verdict"].get("oracle_node_hours_lent", 0.0) / wm[r["seed"]] for r in every]
    bound = [r["reactive_bound"] / wm[r["seed"]] for r in every]
    late = {r["seed"]: r["verdict"]["tidewise"]["late_minutes"] for r in every}
    serve = [r["runs"].get("tidewise-serve", {}).get("node_hours_lent", 0.0) for r in every]
    gain = [r["verdict"]["tidewise"]["node_hours_lent"] / s - 1 for r, s in zip(every, serve) if s > 0]
    pods_missed = [r["seed"] for r in every if not r["verdict"]["targets"]["pods_moved"]]
    rises = [r["max_rise"] for r in every]
    rise2 = [100 * r["rise2_share"] for r in every]
    dev = [ratio[r["seed"]] for r in rows if r["seed"] in ratio]
    below = [r["seed"] for r, b in zip(every, bound) if b < 1.2] or "none"
    out_of_sample = [ratio[r["seed"]] for r in held if r["seed"] in ratio]
    out = [
        f"**What is missed and why.** Lending: tidewise's default lends {_span(dev)}x the best watermark with no "
        f"more late minutes on the development seeds and {_span(out_of_sample)}x "
        f"on the held-out ones (target 1.2x; late minutes per seed {late}); "
        f"{_span([100 * g for g in gain], '{:.0f}')}% "
        f"more than serve's fixed stack. The oracle lends {_span(oracle)}x, so 1.2x is possible with foresight; "
        f"without it, the reactive bound lends {_span(bound)}x: the need rises by up to {_span(rises, '{:.0f}')} "
        f"nodes within a hand-back's time ({rows[0]['return_minutes']} min + the decision minute; by 2 or more within "
        f"{rows[0]['return_minutes']} min in {_span(rise2, '{:.1f}')}% of minutes), from HPA scale-ups of many services at once that neither the "
        "15-minute forecast nor the hour of day predicts (a margin per hour of day from the last days' largest "
        "rises was still late 4-119 minutes a week on seeds 0-2, measured once outside this benchmark). With a "
        f"fixed margin over the measured need, 1.2x and zero late minutes are out of reach on seed(s) {below} "
        "even in hindsight; a margin that varies would have to predict minute-scale rises, which nothing "
        "tried here did. Tidewise's floor is a high quantile of past rises, not the week's largest, and its "
        "forecast margin and the dwell hold more on top: the gap to the reactive bound.",
        "",
        "Pods moved: " + (f"missed on seed(s) {pods_missed}: there the best watermark is the wide band "
                          "(`high=0.85`), which rides out short rises and moves very few pods per node-hour; "
                          "tidewise follows the need more closely (it lends more) and moves more. "
                          if pods_missed else "met on every seed. ")
        + "Hysteresis (no lend within an hour of a hand-back; a one-node forecast shortfall waited out) keeps "
          "each hand-back from being re-lent at the next wiggle: see `tidewise@hold=0` and "
          "`tidewise@return_slack=0` below.",
    ]
    return out


def _full_table(row: dict) -> list[str]:
    cols = ("node_hours_lent", "late_minutes", "pods_moved", "pods_moved_per_day", "goodput_core_hours",
            "lost_core_hours", "lends", "returns")
    out = [f"Every setting, seed {row['seed']}:\n", "| setting | " + " | ".join(c.replace("_", " ") for c in cols) + " |",
           "|---|" + "---|" * len(cols)]
    for label, r in row["runs"].items():
        out.append(f"| `{label}` | " + " | ".join(f"{r[c]:.0f}" if isinstance(r[c], float) else str(r[c])
                                                  for c in cols) + " |")
    return out
