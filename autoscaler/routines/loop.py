"""`run_once()`: a fixed list of named, timed steps (DESIGN.md, "Serving loop").

registry -> fetch -> cluster -> forecast -> recommend -> guardrails -> write -> metrics

A failure on one object is logged, recorded in the report and skipped. A failed or stale source,
an unreadable cluster or a failed forecast *freezes* the run: nothing is written, the last good
decisions stay where they are (in the cluster and in the metrics) and the next run backs off.

The steps only sequence the work: decisions are pure functions in `autoscaler/logic/decide_*`
(called by `recommend.py`), the forecast cache is `forecast_cache.py`, the memory of writes and the
drift check are `drift.py`, the change guardrails and the writes `changes.py`.
"""
from __future__ import annotations

import gc
import logging
import math
import time
from typing import TYPE_CHECKING, Any, Callable

import pandas as pd

from autoscaler.logic.choice_by_cost import CostLedger
from autoscaler.logic.guardrails import Cooldown, is_stale
from autoscaler.logic.hpa import Stabilizer
from autoscaler.model.cluster import ClusterState
from autoscaler.model.ihpa import KIND as IHPA_KIND, IhpaView
from autoscaler.model.views import HpaView, VpaView, WorkloadKey, WorkloadSeries, index_series, report_qos
from autoscaler.output.sinks import DRY_RUN, NOT_FOUND, WRITTEN, Sink
from autoscaler.routines.changes import apply_guardrails, write_all
from autoscaler.routines.context import (FROZEN, KILLED, OK, ClusterReader, Forecaster, Freeze, RunContext,
                                         RunMetrics, RunReport, StepTiming, parse_duration)
from autoscaler.routines.decision_time import DecisionTimeServing
from autoscaler.routines.drift import WriteMemory
from autoscaler.routines.forecast_cache import ForecastCache, usable_series
from autoscaler.routines.rebalance import Rebalancer
from autoscaler.routines.recommend import Recommender
from autoscaler.routines.spd import SpdProfiles
from autoscaler.routines.tide import TideStep
from autoscaler.settings import ServeSettings
from contracts.qos import QosReporter
from predictor.pipeline.forecasting import ForecastRequest, forecast_history
from predictor.history import History
from predictor.sources.base import HistorySource

if TYPE_CHECKING:
    from predictor.registry import RegistryVersion

log = logging.getLogger(__name__)

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
                 evictor: Any = None):
        self.settings = settings
        self.source = source
        self.cluster = cluster
        self.sink = sink
        self.base_forecaster: Forecaster = forecaster or forecast_history
        self.registry_dir = registry_dir
        if registry_dir and registry_loader is None:
            from autoscaler.input.registry import RegistryReader, registry_forecaster as default_rf

            # read once per version: later runs re-check the loaded one cheaply (issue 14)
            registry_loader, registry_forecaster = RegistryReader(settings.loop.registry_key_file), default_rf
        self.registry_loader = registry_loader
        self.registry_forecaster = registry_forecaster
        self.registry: RegistryVersion | None = None  # last good
        self.registry_label = "none"
        self.clock = clock  # None: replay clock, now = end of the history + one step
        self.metrics = metrics
        g, lp = settings.guardrails, settings.loop
        self.step = parse_duration(lp.step, what="step")
        self.stale_after = parse_duration(g.stale_after, what="stale_after")
        self.cooldown = Cooldown(parse_duration(g.cooldown, what="cooldown"))
        self.stabilizers: dict[str, Stabilizer] = {}
        self.ledger = CostLedger()  # VPA candidates' past requests (vpa.choose_by_cost), kept between runs
        self.memory = WriteMemory()
        self.forecast_cache = ForecastCache()  # see LoopSettings.forecast_refresh
        self.decision_time = DecisionTimeServing()  # per-series calibration of decision-time forecasts
        self.spd = SpdProfiles()  # Katalyst SPDs: each workload's profile, built once a day
        self.qos_reports = QosReporter(logger=log)  # each pod's malformed QoS annotations, logged once
        self.rebalancer = Rebalancer(settings.rebalance, self.step, evictor, sink,  # `evictor` None: dry-run
                                     select=settings.select)
        self.tide = TideStep(settings, sink, evictor)  # tidal node pools (issue 17); writes only with loop.apply
        self.failures = 0
        self.last_report: RunReport | None = None
        self.last_good: RunReport | None = None

    # scheduling --------------------------------------------------------------------------------
    def next_delay(self) -> float:
        """Seconds to the next run: the interval, doubled per consecutive freeze up to backoff_max."""
        base = parse_duration(self.settings.loop.interval).total_seconds()
        cap = parse_duration(self.settings.loop.backoff_max).total_seconds()
        return min(cap, base * 2 ** self.failures) if self.failures else base

    # the run -----------------------------------------------------------------------------------
    def run_once(self) -> RunReport:
        rep = RunReport()
        ctx = RunContext(self.base_forecaster)
        steps: list[tuple[str, Step]] = [
            ("registry", self._step_registry), ("fetch", self._step_fetch), ("cluster", self._step_cluster),
            ("forecast", self._step_forecast), ("recommend", self._step_recommend),
            ("guardrails", self._step_guardrails), ("write", self._step_write),
        ]
        if self.settings.tide.enabled:  # after the kill switch and the VPA decisions it reads; before write
            steps.insert(-1, ("tide", self.tide))  # before rebalance: hand-backs are first to the Evictor's limit
        if self.settings.rebalance.enabled:  # after guardrails (the kill switch), before write (decisions.json)
            steps.insert(-1, ("rebalance", self.rebalancer.run))
        # the cyclic GC walks every object of a 50,000-object cluster snapshot on each full pass;
        # a run's own garbage is acyclic (freed by reference counting), so it pauses during a run
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._run_steps(steps, rep, ctx)
        finally:
            if gc_was_enabled:
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
        return rep

    @staticmethod
    def _run_steps(steps: list[tuple[str, Step]], rep: RunReport, ctx: RunContext) -> None:
        for name, fn in steps:
            t = time.perf_counter()
            try:
                detail = fn(rep, ctx)
                rep.steps.append(StepTiming(name, time.perf_counter() - t, True, detail or ""))
            except Freeze as exc:
                rep.steps.append(StepTiming(name, time.perf_counter() - t, False, str(exc)))
                rep.outcome, rep.reason = FROZEN, f"{name}: {exc}"
                log.error("run frozen at step %s: %s; nothing written, last good decisions kept", name, exc)
                break
            except Exception as exc:  # noqa: BLE001 - a bug must not write half a run either
                rep.steps.append(StepTiming(name, time.perf_counter() - t, False, repr(exc)))
                rep.outcome, rep.reason = FROZEN, f"{name}: internal error {type(exc).__name__}: {exc}"
                log.exception("run frozen at step %s by an internal error; nothing written", name)
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
            if min(y.index[0] for y in hist.series.values()) < now - window:
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
        rep.drifted.update(self.memory.forget_changed_outside(state, self.settings.reclaim))
        return f"{len(state.vpas)} VPA, {len(state.hpas)} HPA, {len(state.workloads)} workloads, " \
               f"{len(state.pods)} pods, {len(state.nodes)} nodes"

    def _needed_steps(self) -> int:
        """Forecast steps every decision reads: the longest of the VPA windows, the HPA's
        lead + look-ahead, and the reclaim window."""
        s = self.settings
        longest = max(parse_duration(s.vpa.safe_window), parse_duration(s.vpa.window),
                      parse_duration(s.hpa.startup) + parse_duration(s.hpa.look_ahead) + 2 * self.step,
                      parse_duration(s.reclaim.window),
                      # the node forecast the scheduler extender reads (tidewise.io/node-forecast)
                      parse_duration(s.reclaim.forecast_horizon) if s.reclaim.enabled and s.reclaim.forecast_horizon
                      else self.step,
                      parse_duration(s.rebalance.horizon) if s.rebalance.enabled else self.step,
                      # tide pools: nodes needed over lead + min_dwell (autoscaler/routines/tide.py)
                      parse_duration(s.tide.lead) + parse_duration(s.tide.min_dwell) + self.step if s.tide.enabled
                      else self.step)
        return int(math.ceil(longest / self.step))

    def _needed_series(self, state: ClusterState, index: dict[WorkloadKey, WorkloadSeries]) -> list[str]:
        """The series of every workload a decision reads: VPAs this recommender serves, HPAs, and
        (when reclaim is on) every pod's workload."""
        need: set[WorkloadKey] = set()
        name = self.settings.vpa.recommender_name
        for v in state.vpas:
            view = VpaView(v)
            key = view.workload_key() if name in view.recommenders() else None
            if key is not None:
                need.add(key)
        ihpas = [IhpaView(o) for o in state.others.get(IHPA_KIND, [])] if self.settings.ihpa.enabled else []
        for scaler in [HpaView(h) for h in state.hpas] + ihpas:
            key = scaler.workload_key()
            if key is not None:  # a malformed one is reported by the recommend step
                need.add(key)
        if self.settings.reclaim.enabled or self.settings.rebalance.enabled or self.settings.tide.enabled:
            for pod in state.pods:
                wl = state.workload_of_pod(pod)
                if wl:
                    need.add(wl)
        return [sid for wl in need for res_map in (index.get(wl) or WorkloadSeries()).by_container.values()
                for sid in res_map.values()]

    def _step_forecast(self, rep: RunReport, ctx: RunContext) -> str:
        s, hist, now = self.settings, ctx.history, ctx.now
        ctx.index = index_series(hist)
        keep = usable_series(self._needed_series(ctx.state, ctx.index), hist, now, self.stale_after,
                             parse_duration(s.guardrails.min_history), s.guardrails.stale_after,
                             s.guardrails.min_history, rep.skipped)
        need_steps = self._needed_steps()
        refresh = parse_duration(s.loop.forecast_refresh) if s.loop.forecast_refresh else None
        # 0.5: the HPA floor's level ratio (and short-term band) compare observations with the median
        quantiles = tuple(sorted({0.5, s.vpa.quantile, s.vpa.lower_quantile, s.hpa.quantile,
                                  s.reclaim.quantile, *((s.rebalance.quantile,) if s.rebalance.enabled else ()),
                                  *((s.tide.quantile,) if s.tide.enabled else ())}))
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
        vpa_view, hpa_view = self.decision_time.views(
            self.registry, s.loop, s.hpa.startup, s.hpa.look_ahead,
            ctx.forecasts, ctx.history, ctx.origin, self.step)
        detail = Recommender(self.settings, self.memory, self.forecast_cache.entries, self.stabilizers,
                             self.step, self.ledger, vpa_forecasts=vpa_view, hpa_forecasts=hpa_view).run(rep, ctx)
        return detail + self.spd.run(rep, ctx, s.spd, s.loop.history_window)  # opted-in workloads' SPDs

    def _step_guardrails(self, rep: RunReport, ctx: RunContext) -> str:
        return apply_guardrails(rep, ctx.state, ctx.now, self.memory, self.cooldown, self.settings, ctx.before,
                                self.sink)

    def _step_write(self, rep: RunReport, ctx: RunContext) -> str:
        if rep.outcome == KILLED:
            return "kill switch: nothing written"
        results = write_all(self.sink, rep.changes, max(1, self.settings.loop.write_concurrency))
        # a write that reached the cluster shows there from the next read; a dry run or a review file
        # leaves the cluster as it was, so the next read should still show the object as it was
        lands = bool(getattr(self.sink, "updates_cluster", False))
        vpa_by_key = {d.key: d for d in rep.vpa}
        for c, res in zip(rep.changes, results):
            rep.results.append(res)
            if res.outcome not in (WRITTEN, DRY_RUN, NOT_FOUND):
                log.error("%s not written: %s %s", c.key, res.outcome, res.detail)
            if res.outcome in (WRITTEN, DRY_RUN):
                self.cooldown.record(c.key, ctx.now)
                shown = c.obj if lands and res.outcome == WRITTEN else ctx.before.get(c.key)
                self.memory.remember(c, shown, vpa_by_key[c.key] if c.kind == "VerticalPodAutoscaler" else None,
                                     self.settings.reclaim)
        self.sink.close()
        self._advertised(rep)
        return f"{rep.count(WRITTEN)} written, {rep.count(DRY_RUN)} dry-run, " \
               f"{len(rep.results) - rep.count(WRITTEN) - rep.count(DRY_RUN)} failed"

    def _advertised(self, rep: RunReport) -> None:
        """What a node advertises now: the plan when it was written (or would have been, in a dry
        run) or already held that value; a write that failed or was held keeps the older value."""
        outcome = {r.key: r.outcome for r in rep.results}
        pending = {c.name for c in rep.changes if c.kind == "Node"} | \
            {k.split("/", 1)[1] for k in rep.held if k.startswith("Node/")}
        for p in rep.reclaim:
            if p.node not in pending or outcome.get(f"Node/{p.node}") in (WRITTEN, DRY_RUN):
                self.memory.reclaim_prev[p.node] = p
