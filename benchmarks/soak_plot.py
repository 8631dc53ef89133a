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
