"""`run_once()`: a fixed list of named, timed steps (DESIGN.md, "Serving loop").

registry -> fetch -> cluster -> forecast -> recommend -> guardrails -> write -> metrics

A failure on one object is logged, recorded in the report and skipped. A failed or stale source,
an unreadable cluster or a failed forecast *freezes* the run: nothing is written, the last good
decisions stay where they are (in the cluster and in the metrics) and the next run backs off.

The steps only sequence the work and name no feature: each serving feature (VPA, HPA, IHPA, reclaim,
SPD, tide, rebalance) is an object of the tuple `autoscaler.features.features()` builds, which declares
what it reads and needs of the forecast, its step and its changes. Decisions are pure functions in
`autoscaler/logic/`, the forecast cache is `forecast_cache.py`, what may be written is decided by the
one change policy (`change_policy.py`, with the memory of writes of `drift.py`), the writes `changes.py`.
"""
from __future__ import annotations

import gc
import logging
import math
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

import pandas as pd

from autoscaler.features import ACT, DECIDE, Feature, features
from autoscaler.logic.guardrails import is_stale
from autoscaler.model.cluster import ClusterState
from autoscaler.model.views import WorkloadKey, WorkloadSeries, index_series, report_qos
from autoscaler.output.sinks import DRY_RUN, NOT_FOUND, WRITTEN, Sink
from autoscaler.routines.change_policy import ChangePolicy
from autoscaler.routines.changes import candidate_changes, write_all
from autoscaler.routines.context import (FROZEN, KILLED, OK, ClusterReader, Forecaster, Freeze, RunContext,
                                         RunMetrics, RunReport, StepTiming, iso, parse_duration)
from autoscaler.routines.decision_time import DecisionTimeServing
from autoscaler.routines.forecast_cache import ForecastCache, usable_series
from autoscaler.settings import ServeSettings
from contracts.qos import QosReporter
from predictor.pipeline.forecasting import ForecastRequest, forecast_history
from predictor.history import History
from predictor.sources.base import HistorySource

if TYPE_CHECKING:
    from predictor.registry import RegistryVersion

log = logging.getLogger(__name__)
USAGE = ("cpu", "memory")  # the resources decisions forecast

__all__ = ["FROZEN", "KILLED", "OK", "ClusterReader", "Freeze", "RunReport", "ServingLoop", "StepTiming"]

Step = Callable[[RunReport, RunContext], str]


class ServingLoop:
    """One serving loop; keeps what must survive between runs (stabilisers, cool-downs, the memory
    of its writes, the forecast cache, the last good registry). All outside parts are injected."""

    def __init__(self, settings: ServeSettings, source: HistorySource, cluster: ClusterReader, sink: Sink, *,
                 forecaster: Forecaster | None = None, registry_dir: str | None = None,
                 registry_loader: Callable[[str], RegistryVersion] | None = None,
                 registry_forecaster: Callable[[RegistryVersion, str], Forecaster] | None = None,
                 clock: Callable[[], pd.Timestamp] | None = None, metrics: RunMetrics | None = None,
                 evictor: Any = None, only: Iterable[str] | None = None):
        """`only`: the names of the features this loop runs (default: every one, see autoscaler/features).
        The forecast stays the one every feature reads: what `only` runs decides as in the full loop."""
        self.settings = settings
        self.source = source
        self.cluster = cluster
        self.sink = sink
        self.base_forecaster: Forecaster = forecaster or forecast_history
        self.registry_dir = registry_dir
        if registry_dir and registry_loader is None:
            from autoscaler.input.registry import RegistryEvents, RegistryReader, registry_forecaster as default_rf

            # read once per version: later runs re-check the loaded one cheaply (issue 14); refusals and
            # the version loaded go to the metrics
            events = metrics if isinstance(metrics, RegistryEvents) else None
            registry_loader, registry_forecaster = RegistryReader(settings.loop.registry_key_file, events), default_rf
        self.registry_loader = registry_loader
        self.registry_forecaster = registry_forecaster
        self.registry: RegistryVersion | None = None  # last good
        self.registry_label = "none"
        self.clock = clock  # None: replay clock, now = end of the history + one step
        self.metrics = metrics
        g = settings.guardrails
        self.step = parse_duration(settings.loop.step, what="step")
        self.stale_after = parse_duration(g.stale_after, what="stale_after")
        self.policy = ChangePolicy(settings)  # what may be written; its memory of writes spans runs
        self.forecast_cache = ForecastCache()  # see LoopSettings.forecast_refresh
        self.decision_time = DecisionTimeServing()  # per-series calibration of decision-time forecasts
        self.qos_reports = QosReporter(logger=log)  # each pod's malformed QoS annotations, logged once
        # `evictor` None: a dry-run one each for tide drains and rebalancing
        every = features(settings, self.policy, step=self.step, sink=sink, evictor=evictor)
        wanted = None if only is None else set(only)
        self.features: tuple[Feature, ...] = tuple(f for f in every if wanted is None or f.name in wanted)
        # the forecast's horizon, quantiles and series are those of every feature: a model chosen per
        # series by backtest ("auto") answers differently for another horizon or quantile set
        self.forecast_for = every
        self.failures = 0
        self.last_report: RunReport | None = None
        self.last_good: RunReport | None = None
        # a run turns the cyclic GC off (see run_once); with collect_between_runs it stays off after the
        # run until collect_garbage, which serve's Runner calls in the idle time before the next run: at
        # 10,000 workloads collecting a run's survivors took ~0.6 s at the end of every run, and a full
        # collection ~1.7 s every tenth run
        self.collect_between_runs = False
        self._gc_held = False
        # told of every run once it is done (frozen ones too): the live page of `serve --ui` (autoscaler/ui)
        self.observers: list[Callable[[RunReport, RunContext], None]] = []

    def feature(self, name: str) -> Feature:
        """The feature of that name (its state: e.g. the tide margins, the rebalance Evictor)."""
        return next(f for f in self.features if f.name == name)

    # scheduling --------------------------------------------------------------------------------
    def next_delay(self) -> float:
        """Seconds to the next run: the interval, doubled per consecutive freeze up to backoff_max."""
        base = parse_duration(self.settings.loop.interval).total_seconds()
        cap = parse_duration(self.settings.loop.backoff_max).total_seconds()
        return min(cap, base * 2 ** self.failures) if self.failures else base

    # the run -----------------------------------------------------------------------------------
    def run_once(self, on_step: Callable[[StepTiming], None] | None = None) -> RunReport:
        """One run of every step; `on_step(timing)` is told as each step ends (one-shot commands'
        progress: a large cluster's run takes minutes)."""
        rep = RunReport()
        ctx = RunContext(self.base_forecaster)
        steps = self.steps()
        # the cyclic GC walks every object of a 50,000-object cluster snapshot on each full pass;
        # a run's own garbage is acyclic (freed by reference counting), so it pauses during a run
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._run_steps(steps, rep, ctx, on_step)
        finally:
            if gc_was_enabled and self.collect_between_runs:
                self._gc_held = True  # on again in collect_garbage, after the report is handed over
            elif gc_was_enabled:
                gc.enable()
        rep.registry = self.registry_label
        if rep.outcome == FROZEN:
            self.failures += 1
        else:
            self.failures = 0
            self.last_good = rep
        t = time.perf_counter()
        if self.metrics is not None:
            lead = int(parse_duration(self.settings.hpa.startup) // self.step)
            self.metrics.observe(rep, ctx.forecasts, ctx.hpa_series, lead)
        rep.steps.append(StepTiming("metrics", time.perf_counter() - t, True))
        self.last_report = rep
        for observe in self.observers:
            try:
                observe(rep, ctx)
            except Exception:  # noqa: BLE001 - an observer never stops the loop
                log.exception("run observer %r failed", observe)
        return rep

    def collect_garbage(self) -> float:
        """When a run left the cyclic GC off (`collect_between_runs`): collect the garbage of the runs
        since the last call and turn it on again. The seconds it took (0.0 when nothing was held)."""
        if not self._gc_held:
            return 0.0
        t = time.perf_counter()
        gc.collect()
        gc.enable()
        self._gc_held = False
        return time.perf_counter() - t

    def steps(self) -> list[tuple[str, Step]]:
        """The run's named steps, in order."""
        return [
            ("registry", self._step_registry), ("fetch", self._step_fetch), ("cluster", self._step_cluster),
            ("forecast", self._step_forecast), ("recommend", self._step_recommend),
            ("guardrails", self._step_guardrails),
            # ACT features: after the kill switch and the decisions they read; before write (decisions.json)
            *((f.name, f.run) for f in self.features if f.phase == ACT and f.enabled),
            ("write", self._step_write),
        ]

    @staticmethod
    def _run_steps(steps: list[tuple[str, Step]], rep: RunReport, ctx: RunContext,
                   on_step: Callable[[StepTiming], None] | None = None) -> None:
        for name, fn in steps:
            t, stop = time.perf_counter(), True
            try:
                detail = fn(rep, ctx)
                stop = False
                rep.steps.append(StepTiming(name, time.perf_counter() - t, True, detail or ""))
            except Freeze as exc:
                rep.steps.append(StepTiming(name, time.perf_counter() - t, False, str(exc)))
                rep.outcome, rep.reason = FROZEN, f"{name}: {exc}"
                log.error("run frozen at step %s: %s; nothing written, last good decisions kept", name, exc)
            except Exception as exc:  # noqa: BLE001 - a bug must not write half a run either
                rep.steps.append(StepTiming(name, time.perf_counter() - t, False, repr(exc)))
                rep.outcome, rep.reason = FROZEN, f"{name}: internal error {type(exc).__name__}: {exc}"
                log.exception("run frozen at step %s by an internal error; nothing written", name)
            if on_step is not None:
                on_step(rep.steps[-1])
            if stop:
                break

    # steps -------------------------------------------------------------------------------------
    def _step_registry(self, rep: RunReport, ctx: RunContext) -> str:
        if not self.registry_dir or self.registry_loader is None:
            return "no registry: stateless forecasts"
        try:
            loaded = self.registry_loader(self.registry_dir)
            self.registry = loaded
            self.registry_label = str(loaded.version or self.registry_dir)
            detail = f"loaded {self.registry_label}"
            need = loaded.manifest.get("history_needed_seconds")
            window = parse_duration(self.settings.loop.history_window)
            if isinstance(need, int) and pd.Timedelta(seconds=need) > window:
                # those series' forecasts fall back to a model the window feeds, and say so
                detail += (f"; its models need up to {pd.Timedelta(seconds=need)} of history, more than the "
                           f"{self.settings.loop.history_window} fetched: those series fall back")
                log.warning("registry %s: %s", self.registry_label, detail)
        except Exception as exc:  # noqa: BLE001 - a bad registry must never stop the loop
            log.error("registry %s refused (%s); keeping %s", self.registry_dir, exc,
                      "the last good version" if self.registry is not None else "stateless forecasts")
            rep.skipped[f"registry {self.registry_dir}"] = str(exc)
            detail = f"refused ({exc}); kept {'last good ' + self.registry_label if self.registry is not None else 'stateless forecasts'}"
        if self.registry is not None and self.registry_forecaster is not None:
            ctx.forecaster = self.registry_forecaster(self.registry, self.registry_dir)
        return detail

    def _step_fetch(self, rep: RunReport, ctx: RunContext) -> str:
        window = parse_duration(self.settings.loop.history_window)
        now = self.clock() if self.clock else None
        try:
            hist = self.source.fetch(now - window if now is not None else None, now, self.step)
        except Exception as exc:  # noqa: BLE001 - SourceError or anything else: freeze
            raise Freeze(f"source {getattr(self.source, 'name', '?')} failed: {exc}") from exc
        if not hist.series:
            raise Freeze("source returned no series")
        end = hist.end
        if now is None:
            now = end + self.step
            if hist.start < now - window:
                hist = hist.window(now - window, None)
        if is_stale(end, now, self.stale_after):
            raise Freeze(f"history is stale: newest sample {end} is older than {self.settings.guardrails.stale_after} "
                         f"before {now}")
        rep.now = now
        ctx.fetched(hist, now, end)
        return f"{len(hist.series)} series up to {end}"

    def _step_cluster(self, rep: RunReport, ctx: RunContext) -> str:
        try:
            state = self.cluster.read()
        except Exception as exc:  # noqa: BLE001
            raise Freeze(f"cluster could not be read: {exc}") from exc
        ctx.read(state)
        report_qos(state.pods, self.qos_reports, self.settings.reclaim.qos_annotation)
        rep.drifted.update(self.policy.forget_changed_outside(state))
        return f"{len(state.vpas)} VPA, {len(state.hpas)} HPA, {len(state.workloads)} workloads, " \
               f"{len(state.pods)} pods, {len(state.nodes)} nodes"

    def _needed_steps(self) -> int:
        """Forecast steps every decision reads: the longest any feature needs."""
        longest = max((f.need(self.step).horizon for f in self.forecast_for), default=self.step)
        return int(math.ceil(max(longest, self.step) / self.step))

    def _needed_series(self, state: ClusterState, index: dict[WorkloadKey, WorkloadSeries]) -> list[str]:
        """The series of every workload a decision reads: each feature's, and (when a node-level
        feature is on) every pod's workload."""
        need: set[WorkloadKey] = set()
        for f in self.forecast_for:
            need |= f.workloads(state)
        if any(f.need(self.step).every_pod for f in self.forecast_for):
            for pod in state.pods:
                wl = state.workload_of_pod(pod)
                if wl:
                    need.add(wl)
        # usage only: a fetched history also holds each workload's requests and replicas, which no decision
        # reads as a forecast
        return [sid for wl in need for res_map in (index.get(wl) or WorkloadSeries()).by_container.values()
                for res, sid in res_map.items() if res in USAGE]

    def _step_forecast(self, rep: RunReport, ctx: RunContext) -> str:
        s, hist, now = self.settings, ctx.history, ctx.now
        ctx.index = index_series(hist)
        keep = usable_series(self._needed_series(ctx.state, ctx.index), hist, now, self.stale_after,
                             parse_duration(s.guardrails.min_history), s.guardrails.stale_after,
                             s.guardrails.min_history, rep.skipped)
        need_steps = self._needed_steps()
        refresh = parse_duration(s.loop.forecast_refresh) if s.loop.forecast_refresh else None
        quantiles = tuple(sorted({q for f in self.forecast_for for q in f.need(self.step).quantiles}))
        origin = now.floor(self.step) if now.floor(self.step) > ctx.end else ctx.end + self.step
        ctx.forecast_from(origin)
        cache = self.forecast_cache
        cache.start((self.registry_label, s.loop.forecast_model, quantiles))
        triage = cache.triage(keep, origin, need_steps, self.step, refresh, s.loop.forecast_budget, rep.skipped)
        ctx.forecasts = triage.served
        todo = triage.todo
        horizon = (need_steps + 1) * self.step + (refresh or pd.Timedelta(0))
        req = ForecastRequest(horizon=horizon, step=self.step, quantiles=quantiles, origin=origin,
                              model=s.loop.forecast_model)
        if todo:
            sub = History(todo, hist.step, {k: g for k, g in hist.gaps.items() if k in todo})
            try:
                made = ctx.forecaster(sub, req)
            except Exception as exc:  # noqa: BLE001 - the whole forecast failed: freeze
                raise Freeze(f"forecast failed: {type(exc).__name__}: {exc}") from exc
            cache.store(made, ctx.forecasts, rep.skipped)
        cache.keep_only(keep)
        ctx.refreshed = len(todo)
        return f"{len(ctx.forecasts)} of {len(keep)} series forecast, {len(todo)} refreshed ({len(rep.skipped)} skipped)"

    def _step_recommend(self, rep: RunReport, ctx: RunContext) -> str:
        s = self.settings
        ctx.made = self.forecast_cache.entries
        ctx.vpa_forecasts, ctx.hpa_forecasts = self.decision_time.views(
            self.registry, s.loop, s.hpa.startup, s.hpa.look_ahead,
            ctx.forecasts, ctx.history, ctx.origin, self.step)
        ctx.vpa_tidal = self.decision_time.tidal_run(self.registry, s.loop, s.vpa, ctx.history, ctx.origin, self.step)
        details = [f.run(rep, ctx) for f in self.features if f.phase == DECIDE]
        return ", ".join(d for d in details if d)

    def _step_guardrails(self, rep: RunReport, ctx: RunContext) -> str:
        candidates = candidate_changes(self.features, rep, ctx.state, iso(ctx.now), ctx.before)
        return self.policy.admit(rep, candidates, ctx.state, ctx.now, ctx.before, self.sink)

    def _step_write(self, rep: RunReport, ctx: RunContext) -> str:
        if rep.outcome == KILLED:
            return "kill switch: nothing written"
        results = write_all(self.sink, rep.changes, max(1, self.settings.loop.write_concurrency))
        for c, res in zip(rep.changes, results):
            rep.results.append(res)
            if res.outcome not in (WRITTEN, DRY_RUN, NOT_FOUND):
                log.error("%s not written: %s %s", c.key, res.outcome, res.detail)
        # a write that reached the cluster shows there from the next read; a dry run or a review file
        # leaves the cluster as it was, so the next read should still show the object as it was
        self.policy.record(rep, results, ctx.now, ctx.before, bool(getattr(self.sink, "updates_cluster", False)))
        self.sink.close()
        for f in self.features:
            f.written(rep)
        return f"{rep.count(WRITTEN)} written, {rep.count(DRY_RUN)} dry-run, " \
               f"{len(rep.results) - rep.count(WRITTEN) - rep.count(DRY_RUN)} failed"
