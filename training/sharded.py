"""Training and batch forecasting sharded over a Dask cluster, for fleets of 100,000 series.

`training.pipeline.train` holds the whole history in one process and plans the incremental refits
there. Here every shard is one Dask task that loads its own series on the worker (a `ShardSource`:
a slice of a history the driver read, or a synthetic slice generated on the worker), plans its own
refits against the previous version's entries (the same `plan_refits` rule: new, changed, drifted
or old series are refitted, the rest carried forward), backtests and chooses, and sends back only
its registry entries and its recent window. The driver never holds more than the manifests and the
recent windows, and reports each shard as it completes (`ShardReport`: series, refitted, carried,
failed, seconds, worker, the worker's peak RSS).

Not in a sharded run: the decision-time models (they are fitted from the whole fleet's samples;
train them in an unsharded run). The fleet-wide global GBM is used only when the caller fitted it
(`global_models`), since its fit needs every series in one place.
"""
from __future__ import annotations

import logging
import os
import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol, Sequence

import pandas as pd

from predictor.durations import DAY
from predictor.pipeline.forecasting import Forecast, ForecastRequest, forecast_history
from predictor.history import History
from predictor.models.gbm import GlobalGBM
from predictor.registry import RegistryVersion, write_version
from training.pipeline import (RECENT_STEP, TrainResult, TrainSettings, _global_models, _previous_version,
                               _refit_entry, plan_refits, recent_frame)
from training.selection import select_chunk

log = logging.getLogger(__name__)

SHARD_SIZE = 500  # series per task: ~2 min of backtests on one core, small enough to rebalance


class ShardSource(Protocol):
    """Called on a worker: the shard's series (picklable, so Dask can ship it)."""

    def __call__(self) -> History: ...


@dataclass(frozen=True)
class InMemoryShard:
    """A slice of a history the driver already read (file or Prometheus sources)."""

    history: History

    def __call__(self) -> History:
        return self.history


def split_history(history: History, size: int = SHARD_SIZE) -> list[InMemoryShard]:
    """Shards of `size` series in key order, so that a rerun gives every series the same shard."""
    keys = sorted(history.series)
    return [InMemoryShard(History({k: history.series[k] for k in keys[i:i + size]}, history.step,
                                  {k: history.gaps[k] for k in keys[i:i + size] if k in history.gaps},
                                  None, [k for k in history.signed if k in set(keys[i:i + size])]))
            for i in range(0, len(keys), max(1, size))]


@dataclass(frozen=True)
class SyntheticShard:
    """`workloads` synthetic workloads (two series each: cpu and memory) generated on the worker
    (`predictor.sources.synthetic`), their keys prefixed with the shard so that shards never collide."""

    index: int
    workloads: int
    days: float = 28.0
    step: str = "5m"
    end: str = "2026-11-02T00:00:00Z"
    seed: int = 7

    def __call__(self) -> History:
        from predictor.durations import to_timedelta
        from predictor.history import history_from_frame
        from predictor.sources.synthetic import generate_cluster

        cluster = generate_cluster(seed=self.seed + self.index, workloads=self.workloads, days=self.days,
                                   step=self.step, end=self.end)
        frame = cluster.history()[["series", "timestamp", "value"]]
        frame["series"] = f"s{self.index:05d}/" + frame["series"].astype(str)
        return history_from_frame(frame, to_timedelta(self.step), source=f"synthetic shard {self.index}")


def synthetic_shards(series: int, size: int = SHARD_SIZE, days: float = 28.0, step: str = "5m",
                     seed: int = 7) -> list[SyntheticShard]:
    """Shards of `size` synthetic series (an even count: a workload is a cpu and a memory series)."""
    per = max(1, size // 2)
    workloads = max(1, series // 2)
    return [SyntheticShard(i, min(per, workloads - i * per), days, step, seed=seed)
            for i in range((workloads + per - 1) // per)]


@dataclass(frozen=True)
class ShardReport:
    """One finished shard, for progress lines and the benchmark."""

    index: int
    series: int
    refitted: int
    carried: int
    failed: int
    seconds: float
    worker: str
    worker_peak_rss_bytes: int

    def line(self, total: int) -> str:
        return (f"shard {self.index + 1}/{total}: {self.series} series ({self.refitted} refitted, {self.carried} "
                f"carried, {self.failed} failed) in {self.seconds:.1f} s on {self.worker}")


@dataclass
class PreviousEntries:
    """What `plan_refits` reads of the previous version, without its arrays (sent to every worker once)."""

    version: str
    manifest: dict[str, Any]
    series: dict[str, dict[str, Any]]
    global_model: GlobalGBM | None = None

    @classmethod
    def of(cls, prev: RegistryVersion | None) -> "PreviousEntries | None":
        if prev is None:
            return None
        return cls(prev.version, {"data_window": prev.manifest["data_window"]}, dict(prev.series), prev.global_model)


@dataclass
class ShardResult:
    report: ShardReport
    entries: dict[str, dict[str, Any]]
    reasons: dict[str, str]
    failed: dict[str, str]
    recent: pd.DataFrame
    start: pd.Timestamp
    end: pd.Timestamp


def peak_rss_bytes() -> int:
    """This process's peak resident set (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _worker_name() -> str:
    try:
        from dask.distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return f"pid {os.getpid()}"


def train_shard(index: int, source: ShardSource, prev: PreviousEntries | None, settings: TrainSettings,
                gm: GlobalGBM | None = None) -> ShardResult:
    """One shard, on a worker: load, plan refits, backtest and choose, build the registry entries."""
    t0 = time.perf_counter()
    history = source()
    refit, carry, why = plan_refits(history, prev, settings, history.end)
    req = ForecastRequest(horizon=settings.horizon, step=history.step, quantiles=settings.quantiles,
                          origin=history.end + history.step, folds=settings.folds, use_global=gm is not None,
                          max_history=settings.serving_history)
    chosen = {k: (c, e) for k, c, e in select_chunk([(k, history.series[k]) for k in refit], req, gm,
                                                     settings.candidates)}
    entries: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for key in refit:
        choice, err = chosen[key]
        if choice is None and err:
            failed[key] = err
        entries[key] = _refit_entry(history.series[key], choice, err, history.step, settings, why.get(key, ""))
    for key in carry:
        entries[key] = dict(prev.series[key], carried_from=prev.version)  # type: ignore[union-attr]  # carry needs prev
    report = ShardReport(index, len(history.series), len(refit), len(carry), len(failed), time.perf_counter() - t0,
                         _worker_name(), peak_rss_bytes())
    start = min(y.index[0] for y in history.series.values())
    recent = recent_frame(history, settings.serving_history)
    recent["series"] = recent["series"].astype("category")  # one string per series, not per row, on the wire
    return ShardResult(report, entries, {k: why[k] for k in refit if k in why}, failed, recent, start, history.end)


def _completed(client: Any, fn: Callable[..., Any], sources: Sequence[ShardSource], *shared: Any) -> Iterator[Any]:
    """Submit one task per shard (the shared arguments scattered to every worker once) and yield
    results as they complete, releasing each so the cluster does not keep them."""
    from dask.distributed import as_completed

    shared_f = [client.scatter(a, broadcast=True) if a is not None else None for a in shared]
    futures = [client.submit(fn, i, src, *shared_f, pure=False) for i, src in enumerate(sources)]
    for fut in as_completed(futures):
        result = fut.result()  # a failed shard raises here: nothing is written (fail closed)
        fut.release()
        yield result


@dataclass
class _Merged:
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    refitted: list[str] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)
    recent: list[pd.DataFrame] = field(default_factory=list)
    start: pd.Timestamp | None = None
    end: pd.Timestamp | None = None

    def add(self, res: ShardResult) -> None:
        self.entries.update(res.entries)
        self.reasons.update(res.reasons)
        self.failed.update(res.failed)
        self.refitted += [k for k, e in res.entries.items() if "carried_from" not in e]
        self.carried += [k for k, e in res.entries.items() if "carried_from" in e]
        self.recent.append(res.recent)
        self.start = res.start if self.start is None else min(self.start, res.start)
        self.end = res.end if self.end is None else max(self.end, res.end)


def train_sharded(sources: Sequence[ShardSource], registry_dir: str, settings: TrainSettings, client: Any, *,
                  step: pd.Timedelta, global_models: tuple[GlobalGBM | None, GlobalGBM | None] = (None, None),
                  progress: Callable[[ShardReport], None] | None = None) -> TrainResult:
    """Train every shard on the cluster and write one registry version (incremental against the
    latest one). `global_models`: (for the backtests, to store), fitted by the caller, or none."""
    prev = _previous_version(registry_dir, settings, step)
    merged = _Merged()
    for res in _completed(client, train_shard, sources, PreviousEntries.of(prev), settings, global_models[0]):
        merged.add(res)
        if progress:
            progress(res.report)
    if not merged.entries or merged.start is None or merged.end is None:
        raise ValueError("the shards held no series: nothing to train")
    gm_final = global_models[1] if merged.refitted or prev is None else prev.global_model
    global_refit = bool(merged.refitted) and gm_final is not None
    training = {"refitted": len(merged.refitted), "carried": len(merged.carried), "shards": len(sources),
                "global_refit": global_refit, "folds": settings.folds,
                "previous": prev.version if prev else None, "sharded": True}
    keys = pd.CategoricalDtype(sorted(merged.entries))
    recent = pd.concat([f.astype({"series": keys}) for f in merged.recent], ignore_index=True)
    merged.recent.clear()
    version = write_version(
        registry_dir, quantiles=tuple(settings.quantiles), series=merged.entries,
        data_window=(merged.start.isoformat(), merged.end.isoformat()), step_seconds=int(step.total_seconds()),
        global_model=gm_final, profiles={}, recent=recent, key=settings.key,
        extra={"recent_step_seconds": int(max(step, RECENT_STEP).total_seconds()),
               "serving_history_seconds": int(settings.serving_history.total_seconds()),
               "history_needed_seconds": max(int(e.get("history_needed_seconds") or 0) for e in merged.entries.values()),
               "training": training})
    models: dict[str, int] = {}
    for e in merged.entries.values():
        models[e["model"]] = models.get(e["model"], 0) + 1
    return TrainResult(version, os.path.abspath(registry_dir), sorted(merged.refitted), sorted(merged.carried),
                       merged.reasons, dict(sorted(models.items())), global_refit, merged.failed)


def fit_global_models(history: History, settings: TrainSettings) -> tuple[GlobalGBM | None, GlobalGBM | None]:
    """(for the backtests: fitted before the first fold; to store: on everything), as `train` fits
    them; (None, None) with `use_global` off. Needs the whole history in this process."""
    if not settings.use_global:
        return None, None
    req = ForecastRequest(horizon=settings.horizon, step=history.step, quantiles=settings.quantiles,
                          origin=history.end + history.step, folds=settings.folds, use_global=True,
                          max_history=settings.serving_history)
    backtest, final, _ = _global_models(history, req, settings, None, True,
                                        before=history.end + history.step - settings.folds * DAY)
    return backtest, final


def forecast_shard(index: int, source: ShardSource, req: ForecastRequest, registry: str | None = None,
                   key: bytes | None = None) -> tuple[ShardReport, list[Forecast]]:
    """One shard of a batch forecast, on a worker: fit-and-forecast, or from the registry (which
    every worker must see at the same path: a shared volume)."""
    t0 = time.perf_counter()
    history = source()
    if registry is not None:
        from predictor.pipeline.serving import forecast_with_registry

        forecasts = forecast_with_registry(registry, history, req, key=key)
    else:
        forecasts = forecast_history(history, req)
    report = ShardReport(index, len(history.series), len(history.series), 0, 0, time.perf_counter() - t0,
                         _worker_name(), peak_rss_bytes())
    return report, forecasts


def forecast_sharded(sources: Sequence[ShardSource], req: ForecastRequest, client: Any, *,
                     registry: str | None = None, key: bytes | None = None,
                     progress: Callable[[ShardReport], None] | None = None) -> list[Forecast]:
    """Forecast every shard on the cluster, in shard order. `req.origin` must be set (the whole
    history's end + step) so that every shard forecasts from the same origin, as one process would."""
    if req.origin is None:
        raise ValueError("forecast_sharded needs req.origin: the latest timestamp of the whole history + step")
    parts: dict[int, list[Forecast]] = {}
    for report, forecasts in _completed(client, forecast_shard, sources, req, registry, key):
        parts[report.index] = forecasts
        if progress:
            progress(report)
    return [f for i in sorted(parts) for f in parts[i]]
