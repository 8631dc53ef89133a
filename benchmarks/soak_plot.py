"""The soak's plot: serve's RSS and each run's time over simulated time, fault windows shaded."""
from __future__ import annotations

from benchmarks.soak_faults import FaultSchedule, Timeline

COLOURS = {"prometheus": "tab:red", "409": "tab:orange", "429": "tab:olive", "5xx": "tab:purple", "slow": "tab:cyan",
           "watch_cut": "tab:gray", "watch_410": "black"}


def plot(tl: Timeline, schedule: FaultSchedule, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = [m / 60 for m in tl.minute]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)
    top.plot(hours, tl.rss_mib, color="tab:blue", lw=1.2)
    top.set_ylabel("serve RSS (MiB)")
    ran = [(h, s, o) for h, s, o in zip(hours, tl.seconds, tl.outcome) if s is not None]
    for outcome, colour in (("ok", "tab:green"), ("frozen", "tab:red"), ("killed", "tab:gray")):
        pts = [(h, s) for h, s, o in ran if o == outcome]
        if pts:
            bottom.scatter(*zip(*pts), s=6, color=colour, label=f"{outcome} ({len(pts)})")
    bottom.set_yscale("log")
    bottom.set_ylabel("run time (s, wall)")
    bottom.set_xlabel("simulated time (h)")
    seen = set()
    for f in schedule.faults:
        label = f.kind if f.kind not in seen else None
        seen.add(f.kind)
        for ax in (top, bottom):
            if f.kind.startswith("watch"):
                ax.axvline(f.start / 60, color=COLOURS[f.kind], lw=0.8, ls=":", label=label if ax is top else None)
            else:
                ax.axvspan(f.start / 60, f.end / 60, color=COLOURS[f.kind], alpha=0.18,
                           label=label if ax is top else None)
    top.legend(loc="upper left", fontsize=7, ncol=4)
    bottom.legend(loc="upper right", fontsize=7)
    top.set_title("Tidewise serve soak: RSS and run time; shaded: fault windows")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(fig: dict, png: str = "benchmarks/out/soak.png") -> str:
    """The figures as BENCHMARKS.md's "Soak" tables (from soak.json: `python -m benchmarks.soak_plot FILE`)."""
    sc, rss, runs, t, f, w = fig["scale"], fig["rss_mib"], fig["runs"], fig["times"], fig["faults"], fig["writes"]
    audit = w.get("audit") or {}
    rows = [
        ("scale", f"{sc['workloads']:,} workloads ({sc['series']:,} series, {sc['pods']:,} pods), {sc['nodes']} nodes, "
                  f"{sc['minutes']:,} simulated minutes, seed {sc['seed']}, {sc['history_days']:g} d of history a run, "
                  f"`{sc['model']}`"),
        ("runs", f"{runs['runs']:,} runs in {runs['ticks']:,} ticks: {runs['ok']:,} ok, {runs['frozen']} frozen "
                 f"(at step: {', '.join(f'{k} {v}' for k, v in runs['frozen_by_step'].items()) or 'none'}), "
                 f"{runs['standing_by']} ticks standing by (the Lease not renewed)"),
        ("freezes / recoveries", f"{runs['freeze_episodes']} freeze episodes, {runs['recoveries']} recoveries; minutes from "
                                 f"Prometheus back to the first good run: {runs['minutes_to_recover_after_prometheus']}"),
        ("cold run", f"{t['cold_seconds']:.2f} s wall ({t['cold_cpu']:.2f} s CPU)"),
        ("warm runs", f"median {t['warm_median_seconds']:.2f} s, p95 {t['warm_p95_seconds']:.2f} s, max "
                      f"{t['warm_max_seconds']:.2f} s over {t['warm_runs']:,} runs"),
        ("RSS (serve process)", f"{rss['start']:.0f} MiB after the first run, {rss['after_warmup']:.0f} MiB at "
                                f"{rss['warmup_minutes']} min, then {rss['min_after_warmup']:.0f}-{rss['max_after_warmup']:.0f} "
                                f"MiB, {rss['end']:.0f} MiB at the end: trend growth after warm-up "
                                f"{100 * rss['growth_after_warmup']:.1f}% (Theil-Sen; "
                                f"{'within' if rss['flat_within_10pct'] else 'over'} 10%)"),
        ("faults scheduled", ", ".join(f"{k} {v}" for k, v in sorted(f["scheduled"].items()))),
        ("faults that hit a request", ", ".join(f"{k} {v:,}" for k, v in sorted(f["hit"].items())) +
         f"; Prometheus killed {f['prometheus_kills']}x, restarted {f['prometheus_restarts']}x"),
        ("write results (serve's view)", ", ".join(f"{k} {v:,}" for k, v in sorted(runs["write_results"].items()))),
        ("writes lost", f"{audit.get('lost')} of {audit.get('decisions')} last decisions ({audit.get('held')} held by a "
                        f"guardrail), checked against a fresh list of the fake" if audit.get("checked")
         else f"not checked: {audit.get('why')}"),
        ("writes duplicated", f"{w['duplicates']} of {w['successful_writes']:,} successful writes "
                              f"({w['objects_written']:,} objects, {w['writes_per_decision_change']} writes per decision "
                              f"change; {w['failed_answers']:,} refused answers)"),
    ]
    out = ["| measure | result |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(out) + f"\n\n![soak: RSS and run time over simulated time]({png})\n"


if __name__ == "__main__":
    import json
    import sys

    print(markdown(json.load(open(sys.argv[1]))))
