"""Dask scale benchmark (issue 14): training sharded over a 2-worker `LocalCluster` on this machine,
1,000 versus 20,000 synthetic series x 28 days at 5 min, cost per 1,000 series.

Each size runs in its own subprocess with its own cluster, so that peak memory is that size's:
driver peak RSS plus every worker's peak RSS (a sum of peaks: an upper bound of what was resident at
once). Each shard (500 series) is generated on its worker (`training.sharded.SyntheticShard`), then
the real training path runs there: incremental plan against the latest version, rolling-origin
backtest, choice, calibration, registry entries; the driver writes one registry version. A second
run over the same data measures the incremental case (every series carried forward). The
candidates are a named cheap pair (seasonal naive daily, seasonal median) over one backtest fold:
`auto`'s five candidates over three folds cost ~4x more per series, measured on 1,000 series in the
`auto` row. Target: seconds and memory per 1,000 series at 20,000 no higher than at 1,000.

    python -m benchmarks.run --only dask [--quick]
    python -m benchmarks.dask_scale --series 1000 [--auto]    # one size, prints JSON
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

CHEAP = ("seasonal_naive_daily", "seasonal_median")
# TIDEWISE_BENCH_DASK_SIZES="1000,5000": other sizes than 1,000 vs 20,000 (a loaded machine)
SIZES = tuple(int(n) for n in os.environ.get("TIDEWISE_BENCH_DASK_SIZES", "1000,20000").split(","))
SHARD = 500
MIB = 2**20


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (contention-proof, unlike wall time)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(series: int, auto: bool = False, incremental: bool = True, workers: int = 2) -> dict[str, Any]:
    """Train `series` synthetic series (cold, then incremental unless told not to) on a fresh LocalCluster."""
    import pandas as pd
    from dask.distributed import Client, LocalCluster

    from training.pipeline import TrainSettings
    from training.sharded import peak_rss_bytes, synthetic_shards, train_sharded

    settings = TrainSettings(folds=3 if auto else 1, use_global=False, candidates=() if auto else CHEAP)
    shards = synthetic_shards(series, SHARD, days=28)
    out: dict[str, Any] = {"series": series, "shards": len(shards), "workers": workers,
                           "model": "auto (5 candidates, 3 folds)" if auto else f"{' + '.join(CHEAP)}, 1 fold"}
    with tempfile.TemporaryDirectory() as registry, \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                         memory_limit=None) as cluster, Client(cluster) as client:
        for run in ("cold", "incremental") if incremental else ("cold",):
            slowest = [0.0]
            cpu0 = sum(client.run(cpu_seconds).values()) + cpu_seconds()
            t = time.perf_counter()
            res = train_sharded(shards, registry, settings, client, step=pd.Timedelta("5min"),
                                progress=lambda r: slowest.__setitem__(0, max(slowest[0], r.seconds)))
            out[run] = {"seconds": time.perf_counter() - t,
                        "cpu_seconds": sum(client.run(cpu_seconds).values()) + cpu_seconds() - cpu0,
                        "refitted": len(res.refitted),
                        "carried": len(res.carried), "failed": len(res.failed), "slowest_shard_s": slowest[0]}
        workers_peak = client.run(peak_rss_bytes)
    out["driver_peak_mib"] = peak_rss_bytes() / MIB
    out["workers_peak_mib"] = sum(workers_peak.values()) / MIB
    out["peak_mib"] = out["driver_peak_mib"] + out["workers_peak_mib"]
    return out


def _in_subprocess(series: int, auto: bool, incremental: bool = True) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.dask_scale", "--series", str(series)] + (["--auto"] if auto else []) + \
        ([] if incremental else ["--cold-only"])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _row(m: dict[str, Any], run: str) -> str:
    k = m["series"] / 1000
    r = m[run]
    return (f"| {m['series']:,} | {m['model']} | {run} | {r['refitted']:,} / {r['carried']:,} / {r['failed']} | "
            f"{r['seconds']:.0f} | {r['seconds'] / k:.1f} | {r['cpu_seconds'] / k:.1f} | {m['peak_mib']:.0f} ({m['driver_peak_mib']:.0f} + "
            f"{m['workers_peak_mib']:.0f}) | {m['peak_mib'] / k:.0f} |")


def run(quick: bool) -> str:
    sizes = (200, 1000) if quick else SIZES
    # the incremental rerun is measured at the small size only: at 20,000 it would add ~15 min on 2 shared cores
    return section([_in_subprocess(sizes[0], auto=False), _in_subprocess(sizes[1], auto=False, incremental=False),
                    _in_subprocess(max(200, sizes[0] // 5), auto=True, incremental=False)])


def section(results: list[dict[str, Any]]) -> str:
    """The Markdown section from `measure` results: the small size, the large size, then `auto`."""
    small, large = results[0], results[1]
    linear_s = large["cold"]["cpu_seconds"] / large["series"] <= small["cold"]["cpu_seconds"] / small["series"]
    linear_m = large["peak_mib"] / large["series"] <= small["peak_mib"] / small["series"]
    lines = [
        "## Dask scale: training sharded over a 2-worker LocalCluster (issue 14)",
        "",
        f"Synthetic series (`predictor.sources.synthetic`) x 28 days at 5 min, in shards of {SHARD} generated on "
        "the workers; the real training path per shard (incremental plan, backtest, choice, calibration) and one "
        "registry version written by the driver. 2 workers x 1 thread on the machine's 2 cores, shared with other "
        "jobs: wall seconds are upper bounds and swing with the load; CPU seconds (driver + workers, user + "
        "system) do not, and are what the target is judged on. Peak memory = driver + workers' peak RSS (a sum "
        "of peaks).",
        "",
        "    TIDEWISE_BENCH_DASK_SIZES=1000,20000 python -m benchmarks.run --only dask   # one size: "
        "python -m benchmarks.dask_scale --series N [--auto] [--cold-only]",
        "",
        "| series | candidates | run | refitted / carried / failed | seconds | s per 1,000 | CPU s per 1,000 | "
        "peak MiB (driver + workers) | MiB per 1,000 |",
        "|---:|---|---|---|---:|---:|---:|---:|---:|",
    ]
    lines += [_row(m, run_) for m in results for run_ in ("cold", "incremental") if run_ in m]
    lines += [
        "",
        f"Target (cost per 1,000 series at {large['series']:,} no higher than at {small['series']:,}): CPU "
        f"{'met' if linear_s else 'NOT met'} ({large['cold']['cpu_seconds'] / large['series'] * 1000:.1f} vs "
        f"{small['cold']['cpu_seconds'] / small['series'] * 1000:.1f} CPU s), memory {'met' if linear_m else 'NOT met'} "
        f"({large['peak_mib'] / large['series'] * 1000:.0f} vs {small['peak_mib'] / small['series'] * 1000:.0f} MiB). "
        "Extrapolation to 100k and 1M series and cluster sizes: docs/scale.md.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, help="measure one size and print its JSON (default: the whole section)")
    ap.add_argument("--auto", action="store_true", help="all candidates over three folds instead of the cheap pair")
    ap.add_argument("--cold-only", action="store_true", help="skip the incremental rerun")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    if a.series:
        print(json.dumps(measure(a.series, a.auto, incremental=not a.cold_only)))
    else:
        print(run(a.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
