"""`run_once()`: a fixed list of named, timed steps (DESIGN.md, "Serving loop").

registry -> fetch -> cluster -> forecast -> recommend -> guardrails -> write -> metrics

A failure on one object is logged, recorded in the report and skipped. A failed or stale source,
an unreadable cluster or a failed forecast *freezes* the run: nothing is written, the last good
decisions stay where they are (in the cluster and in the metrics) and the next run backs off.
"""
from __future__ import annotations

import functools
import gc
import json
import logging
import math
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np
import pandas as pd

from autoscaler.logic.guardrails import Cooldown, is_stale, read_kill_switch
from autoscaler.logic.hpa import (MalformedHpa, Stabilizer, hpa_target, level_ratio, parse_hpa,
                                  predictive_min_replicas)
from autoscaler.logic.reclaim import numa_zone, plan_node
from autoscaler.logic.vpa import NonFiniteForecast, container_policy, limit_change, quantile_column, recommend_resource
from autoscaler.model.cluster import ClusterState, container_requests, meta
from autoscaler.model.decisions import ContainerRecommendation, HpaDecision, Reason, VpaDecision
from autoscaler.output.objects import (ANNOTATION_USER_MIN, Change, cnr_change, hpa_change, node_change, published,
                                       resource_recommend_change, vpa_change)
from autoscaler.output.sinks import DRY_RUN, NOT_FOUND, WRITTEN, Sink, WriteResult
from autoscaler.quantity import to_units
from autoscaler.settings import ServeSettings
from predictor.durations import parse_duration as _parse_duration
from predictor.forecasting import ForecastRequest, forecast_history
from predictor.history import History
from predictor.timestamps import epoch_ns
from predictor.types import Forecast, ReclaimPlan, SeriesKey

log = logging.getLogger(__name__)

Forecaster = Callable[[History, ForecastRequest], list[Forecast]]
OK, FROZEN, KILLED = "ok", "frozen", "killed"


@functools.lru_cache(maxsize=256)
def parse_duration(text: str, what: str = "duration") -> pd.Timedelta:
    """Settings hold durations as text; parsed once per distinct text, not once per object."""
    return _parse_duration(text, what=what)


class ClusterReader(Protocol):
    def read(self) -> ClusterState: ...


class Freeze(Exception):
    """Raised inside a step: stop the run, write nothing, keep the last good decisions."""


@dataclass
class StepTiming:
    name: str
    seconds: float
    ok: bool
    detail: str = ""


@dataclass
class RunReport:
    now: pd.Timestamp | None = None
    outcome: str = OK
    reason: str = ""
    steps: list[StepTiming] = field(default_factory=list)
    vpa: list[VpaDecision] = field(default_factory=list)
    hpa: list[HpaDecision] = field(default_factory=list)
    reclaim: list[ReclaimPlan] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    results: list[WriteResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # object or series -> why no decision
    held: dict[str, str] = field(default_factory=dict)  # change -> guardrail that held it back
    registry: str = "none"
    # objects whose written part changed outside Tidewise since the last write: decided and written again
    drifted: dict[str, str] = field(default_factory=dict)
    kill_deliberate: bool = False  # KILLED by an operator's explicit `stop`, not by an unreadable switch

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    def failed_writes(self) -> list[WriteResult]:
        """Writes that did not land: failed, conflicting, throttled, forbidden. An object deleted
        between the read and the write (not-found) is not one: nothing is left to decide for."""
        return [r for r in self.results if r.outcome not in (WRITTEN, DRY_RUN, NOT_FOUND)]

    def problems(self) -> list[str]:
        """Why this run fell short (empty for a good one; `serve --once` exits 1 on any): a frozen
        run decided nothing, a kill switch that is not a deliberate `stop` is a fault, and every
        write that did not land is named."""
        out = []
        if self.outcome == FROZEN or (self.outcome == KILLED and not self.kill_deliberate):
            out.append(f"{self.outcome}: {self.reason}")
        out.extend(f"{r.key}: {r.outcome}{' (' + r.detail + ')' if r.detail else ''}" for r in self.failed_writes())
        return out

    def summary(self) -> str:
        if self.outcome != OK:
            return f"{self.outcome}: {self.reason}"
        by: dict[str, int] = {}
        for r in self.results:
            by[r.outcome] = by.get(r.outcome, 0) + 1
        return (f"{len(self.vpa)} VPA, {len(self.hpa)} HPA, {len(self.reclaim)} node decisions; "
                f"{len(self.changes)} changes ({', '.join(f'{k} {v}' for k, v in sorted(by.items())) or 'none written'}); "
                f"{len(self.skipped)} skipped, {len(self.held)} held by guardrails"
                + (f", {len(self.drifted)} changed outside Tidewise" if self.drifted else ""))


@dataclass
class _Series:
    """Where a workload's series are: container -> resource -> series id."""

    by_container: dict[str, dict[str, str]] = field(default_factory=dict)


def index_series(history: History) -> dict[tuple[str, str, str], _Series]:
    out: dict[tuple[str, str, str], _Series] = {}
    for sid in history.series:
        try:
            k = SeriesKey.parse(sid)
        except ValueError:
            continue
        out.setdefault((k.namespace, k.kind, k.name), _Series()).by_container.setdefault(k.container, {})[k.resource] = sid
    return out


class ServingLoop:
    """One serving loop; keeps what must survive between runs (stabilisers, cool-downs, last
    published numbers, the last good registry). All outside parts are injected."""

    def __init__(self, settings: ServeSettings, source: Any, cluster: ClusterReader, sink: Sink, *,
                 forecaster: Forecaster | None = None, registry_dir: str | None = None,
                 registry_loader: Callable[[str], Any] | None = None,
                 registry_forecaster: Callable[[Any, str], Forecaster] | None = None,
                 clock: Callable[[], pd.Timestamp] | None = None, metrics: Any = None):
        self.settings = settings
        self.source = source
        self.cluster = cluster
        self.sink = sink
        self.base_forecaster: Forecaster = forecaster or forecast_history
        self.registry_dir = registry_dir
        if registry_dir and registry_loader is None:
            from autoscaler.input.registry import load_registry, registry_forecaster as default_rf

            key_file = settings.loop.registry_key_file
            registry_loader, registry_forecaster = (lambda path: load_registry(path, key_file)), default_rf
        self.registry_loader = registry_loader
        self.registry_forecaster = registry_forecaster
        self.registry: Any = None  # last good
        self.registry_label = "none"
        self.clock = clock  # None: replay clock, now = end of the history + one step
        self.metrics = metrics
        g, lp = settings.guardrails, settings.loop
        self.step = parse_duration(lp.step, what="step")
        self.stale_after = parse_duration(g.stale_after, what="stale_after")
        self.cooldown = Cooldown(parse_duration(g.cooldown, what="cooldown"))
        self.stabilizers: dict[str, Stabilizer] = {}
        self.reclaim_prev: dict[str, ReclaimPlan] = {}
        # VPA -> (container, resource) -> target this loop last wrote (fresher than a cluster read)
        self.vpa_written: dict[str, dict[tuple[str, str], int]] = {}
        self.last_written: dict[str, str] = {}  # object -> fingerprint of the last patch written
        # object -> the part of it this loop writes, as the cluster should show it until someone
        # else changes it (see _forget_changed_outside); checked against every cluster read
        self.observed: dict[str, Any] = {}
        self.cache: dict[str, Forecast] = {}  # series -> last forecast (see LoopSettings.forecast_refresh)
        self.cache_generation: tuple[Any, ...] | None = None
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
        ctx: dict[str, Any] = {}
        steps: list[tuple[str, Callable[[RunReport, dict[str, Any]], str]]] = [
            ("registry", self._step_registry), ("fetch", self._step_fetch), ("cluster", self._step_cluster),
            ("forecast", self._step_forecast), ("recommend", self._step_recommend),
            ("guardrails", self._step_guardrails), ("write", self._step_write),
        ]
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
            self.metrics.observe(rep, ctx.get("forecasts", {}), ctx.get("hpa_series", {}), lead)
        rep.steps.append(StepTiming("metrics", time.perf_counter() - t, True))
        self.last_report = rep
        return rep

    def _run_steps(self, steps: list[tuple[str, Callable[[RunReport, dict[str, Any]], str]]], rep: RunReport,
                   ctx: dict[str, Any]) -> None:
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
    def _step_registry(self, rep: RunReport, ctx: dict[str, Any]) -> str:
        ctx["forecaster"] = self.base_forecaster
        if not self.registry_dir or self.registry_loader is None:
            return "no registry: stateless forecasts"
        try:
            loaded = self.registry_loader(self.registry_dir)
            self.registry = loaded
            self.registry_label = str(getattr(loaded, "version", None) or self.registry_dir)
            detail = f"loaded {self.registry_label}"
            need = (getattr(loaded, "manifest", None) or {}).get("history_needed_seconds")
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
            ctx["forecaster"] = self.registry_forecaster(self.registry, self.registry_dir)
        return detail

    def _step_fetch(self, rep: RunReport, ctx: dict[str, Any]) -> str:
        window = parse_duration(self.settings.loop.history_window)
        now = self.clock() if self.clock else None
        try:
            hist = self.source.fetch(now - window if now is not None else None, now, self.step)
        except Exception as exc:  # noqa: BLE001 - SourceError or anything else: freeze
            raise Freeze(f"source {getattr(self.source, 'name', '?')} failed: {exc}") from exc
        if not hist.series:
            raise Freeze("source returned no series")
        end = hist.end
        ctx["end"] = end
        if now is None:
            now = end + self.step
            if min(y.index[0] for y in hist.series.values()) < now - window:
                hist = hist.window(now - window, None)
        if is_stale(end, now, self.stale_after):
            raise Freeze(f"history is stale: newest sample {end} is older than {self.settings.guardrails.stale_after} "
                         f"before {now}")
        rep.now = now
        ctx["history"], ctx["now"] = hist, now
        return f"{len(hist.series)} series up to {end}"

    def _step_cluster(self, rep: RunReport, ctx: dict[str, Any]) -> str:
        try:
            state = self.cluster.read()
        except Exception as exc:  # noqa: BLE001
            raise Freeze(f"cluster could not be read: {exc}") from exc
        ctx["state"] = state
        self._forget_changed_outside(state, rep)
        return f"{len(state.vpas)} VPA, {len(state.hpas)} HPA, {len(state.workloads)} workloads, " \
               f"{len(state.pods)} pods, {len(state.nodes)} nodes"

    def _forget_changed_outside(self, state: ClusterState, rep: RunReport) -> None:
        """The loop's memory of its writes (fingerprints, VPA targets, node plans) holds only while
        the cluster still shows the object as that write left it. One whose written part was cleared
        or edited since (a VPA status wiped, an HPA floor lowered by hand, a node's extended
        resources reset) is forgotten: this run decides it from the cluster as it is and writes it
        again. Deleted objects are forgotten too."""
        if not self.observed:
            return
        live: dict[str, Any] = {}
        for kind, objs in (("VerticalPodAutoscaler", state.vpas), ("HorizontalPodAutoscaler", state.hpas),
                           ("Node", state.nodes)):
            for o in objs:
                m = meta(o)
                key = f"{kind}/{m['namespace']}/{m.get('name')}" if m.get("namespace") else f"{kind}/{m.get('name')}"
                if key in self.observed:
                    live[key] = o
        for key, expected in list(self.observed.items()):
            kind = key.split("/", 1)[0]
            obj = live.get(key)
            seen = _observed(kind, obj, self.settings.reclaim) if obj is not None else None
            if obj is not None and seen == expected:
                continue
            del self.observed[key]
            self.last_written.pop(key, None)
            self.vpa_written.pop(key, None)
            if kind == "Node":
                self.reclaim_prev.pop(key.split("/", 1)[1], None)
            if obj is not None:
                what = _OBSERVED[kind]
                rep.drifted[key] = f"{what} is {json.dumps(seen, default=str)[:200]}, not what Tidewise last wrote"
                log.warning("%s: %s changed outside Tidewise since the last write; deciding it again from the cluster",
                            key, what)

    def _needed_steps(self) -> int:
        """Forecast steps every decision reads: the longest of the VPA bound window, the HPA's
        lead + look-ahead, and the reclaim window."""
        s = self.settings
        longest = max(parse_duration(s.vpa.bound_window), parse_duration(s.vpa.window),
                      parse_duration(s.hpa.startup) + parse_duration(s.hpa.look_ahead) + 2 * self.step,
                      parse_duration(s.reclaim.window))
        return int(math.ceil(longest / self.step))

    def _needed_workloads(self, state: ClusterState) -> set[tuple[str, str, str]]:
        need: set[tuple[str, str, str]] = set()
        name = self.settings.vpa.recommender_name
        for v in state.vpas:
            if name in _recommenders(v):
                ref = (v.get("spec") or {}).get("targetRef")
                if not isinstance(ref, dict):
                    continue
                need.add((meta(v).get("namespace", "default"), ref.get("kind", ""), ref.get("name", "")))
        for h in state.hpas:
            spec = h.get("spec")
            ref = spec.get("scaleTargetRef") if isinstance(spec, dict) else None
            if not isinstance(ref, dict):
                continue  # malformed: reported by the recommend step
            need.add((meta(h).get("namespace", "default"), ref.get("kind", ""), ref.get("name", "")))
        if self.settings.reclaim.enabled:
            for pod in state.pods:
                wl = state.workload_of_pod(pod)
                if wl:
                    need.add(wl)
        return need

    def _step_forecast(self, rep: RunReport, ctx: dict[str, Any]) -> str:
        hist: History = ctx["history"]
        state: ClusterState = ctx["state"]
        now: pd.Timestamp = ctx["now"]
        s = self.settings
        index = index_series(hist)
        need = self._needed_workloads(state)
        min_hist_ns = parse_duration(s.guardrails.min_history).value
        now_ns, stale_ns = now.value, self.stale_after.value
        keep: dict[str, pd.Series] = {}
        for wl in need:
            for res_map in (index.get(wl) or _Series()).by_container.values():
                for sid in res_map.values():
                    y = hist.series[sid]
                    ok = np.flatnonzero(~np.isnan(y.to_numpy()))
                    ns_ = epoch_ns(y.index)  # int64 nanoseconds (any pandas unit): no Timestamp boxing at 20,000 series
                    if len(ok) == 0 or now_ns - ns_[ok[-1]] > stale_ns:
                        rep.skipped[sid] = f"no sample in the last {s.guardrails.stale_after} (gap or stopped series)"
                    elif ns_[ok[-1]] - ns_[ok[0]] < min_hist_ns:
                        rep.skipped[sid] = f"under {s.guardrails.min_history} of history"
                    else:
                        keep[sid] = y
        need_steps = self._needed_steps()
        refresh = parse_duration(s.loop.forecast_refresh) if s.loop.forecast_refresh else None
        quantiles = tuple(sorted({s.vpa.quantile, s.vpa.lower_quantile, s.vpa.upper_quantile, s.hpa.quantile,
                                  s.reclaim.quantile}))
        end = ctx["end"]
        origin = now.floor(self.step) if now.floor(self.step) > end else end + self.step
        generation = (self.registry_label, s.loop.forecast_model, quantiles)
        if self.cache_generation != generation:
            self.cache.clear()
            self.cache_generation = generation
        forecasts: dict[str, Forecast] = {}
        due: list[tuple[int, int, str]] = []  # (priority, -age, series): 0 surprised, 1 new, 2 aged
        for sid, y in keep.items():
            cached = self.cache.get(sid)
            status = "new" if cached is None else "aged" if refresh is None else \
                _cache_state(cached, y, origin, need_steps, self.step, refresh * _spread(sid))
            if cached is not None and status == "fresh":
                forecasts[sid] = _shifted(cached, (origin.value - epoch_ns(cached.index)[0]) // self.step.value)
            else:
                age = (origin.value - int(epoch_ns(cached.index)[0])) if cached is not None else 0
                due.append(({"surprised": 0, "new": 1, "aged": 2}[status], -age, sid))
        budget = s.loop.forecast_budget
        due.sort()
        todo: dict[str, pd.Series] = {}
        for prio, neg_age, sid in due:
            cached = self.cache.get(sid)
            if cached is not None and budget is not None and len(todo) >= budget and prio == 2 and \
                    refresh is not None and -neg_age < 2 * refresh.value and _covers(cached, origin, need_steps, self.step):
                forecasts[sid] = _shifted(cached, (origin.value - epoch_ns(cached.index)[0]) // self.step.value)
            elif budget is not None and len(todo) >= budget and prio == 1:
                rep.skipped[sid] = f"waiting for its first forecast (forecast_budget {budget} per run)"
            else:
                todo[sid] = keep[sid]
        horizon = (need_steps + 1) * self.step + (refresh or pd.Timedelta(0))
        req = ForecastRequest(horizon=horizon, step=self.step, quantiles=quantiles, origin=origin,
                              model=s.loop.forecast_model)
        sub = History(todo, hist.step, {k: g for k, g in hist.gaps.items() if k in todo})
        if todo:
            try:
                out = ctx["forecaster"](sub, req)
            except Exception as exc:  # noqa: BLE001 - the whole forecast failed: freeze
                raise Freeze(f"forecast failed: {type(exc).__name__}: {exc}") from exc
            for fc in out:
                if not np.all(np.isfinite(fc.values)):
                    rep.skipped[fc.series] = f"forecast {fc.model} has non-finite values: no decision from it"
                    self.cache.pop(fc.series, None)
                    continue
                self.cache[fc.series] = fc
                forecasts[fc.series] = fc
        for sid in set(self.cache) - set(keep):
            del self.cache[sid]  # series gone, stale or skipped: never decide from an old forecast
        ctx["forecasts"], ctx["index"], ctx["origin"] = forecasts, index, origin
        ctx["refreshed"] = len(todo)
        return f"{len(forecasts)} of {len(keep)} series forecast, {len(todo)} refreshed ({len(rep.skipped)} skipped)"

    def _step_recommend(self, rep: RunReport, ctx: dict[str, Any]) -> str:
        state: ClusterState = ctx["state"]
        for vpa in state.vpas:
            key = f"VerticalPodAutoscaler/{meta(vpa).get('namespace')}/{meta(vpa).get('name')}"
            try:
                d = self._recommend_vpa(vpa, ctx)
                if d is None:
                    continue
                rep.vpa.append(d)
            except Exception as exc:  # noqa: BLE001 - one bad object is skipped
                rep.skipped[key] = f"{type(exc).__name__}: {exc}"
                log.warning("%s skipped: %s", key, exc)
        for hpa in state.hpas:
            key = f"HorizontalPodAutoscaler/{meta(hpa).get('namespace')}/{meta(hpa).get('name')}"
            try:
                rep.hpa.append(self._recommend_hpa(hpa, ctx))
            except Exception as exc:  # noqa: BLE001
                rep.skipped[key] = f"{type(exc).__name__}: {exc}"
                log.warning("%s skipped: %s", key, exc)
        if self.settings.reclaim.enabled:
            self._recommend_nodes(rep, ctx)
        return f"{len(rep.vpa)} VPA, {len(rep.hpa)} HPA, {len(rep.reclaim)} nodes"

    # VPA ---------------------------------------------------------------------------------------
    def _recommend_vpa(self, vpa: dict[str, Any], ctx: dict[str, Any]) -> VpaDecision | None:
        s = self.settings.vpa
        m = meta(vpa)
        ns, name = m.get("namespace", "default"), m["name"]
        names = _recommenders(vpa)
        if s.recommender_name not in names:
            log.debug("VPA %s/%s is served by %s, not %s", ns, name, names or ["default"], s.recommender_name)
            return None
        ref = (vpa.get("spec") or {}).get("targetRef") or {}
        kind, target = ref.get("kind"), ref.get("name")
        state: ClusterState = ctx["state"]
        wl = state.workload(ns, kind or "", target or "")
        if wl is None:
            raise LookupError(f"targetRef {kind}/{target} not found in namespace {ns}")
        series = ctx["index"].get((ns, kind, target))
        if series is None:
            raise LookupError(f"no history for {ns}/{kind}/{target}")
        replicas = state.replicas(ns, kind, target)
        hist: History = ctx["history"]
        fcs: dict[str, Forecast] = ctx["forecasts"]
        window = _steps(s.window, self.step)
        bound = _steps(s.bound_window, self.step)
        peak_cut = ctx["now"] - parse_duration(s.memory_peak_window)
        key = f"VerticalPodAutoscaler/{ns}/{name}"
        published_now = self.vpa_written.get(f"VerticalPodAutoscaler/{ns}/{name}") or _published_vpa(vpa)
        containers = []
        for cname in container_requests(wl) or series.by_container:
            policy = container_policy(vpa, cname)
            if policy.mode == "Off":
                continue
            resources = {}
            for res in policy.controlled:
                sid = series.by_container.get(cname, {}).get(res)
                if sid is None or sid not in fcs:
                    continue
                fc = fcs[sid]
                peak = None
                if res == "memory":
                    y = hist.series[sid]
                    recent = y.to_numpy()[y.index.searchsorted(peak_cut):]
                    peak = float(np.nanmax(recent)) if np.isfinite(recent).any() else None
                rec = recommend_resource(fc, res, replicas, s, window, bound, policy, memory_peak=peak,
                                         model_label=f"{fc.model}@{fc.version}")
                prev = published_now.get((cname, res))
                limited, why = limit_change(prev, rec.target, self.settings.guardrails.max_decrease_ratio,
                                            self.settings.guardrails.max_increase_ratio, floor=rec.floor)
                if why:
                    limited = min(limited, policy.max_allowed.get(res, limited))
                    rec.reason.steps.append(why)
                    rec.target = limited
                    rec.lower, rec.upper = min(rec.lower, limited), max(rec.upper, limited)
                resources[res] = rec
            if resources:
                containers.append(ContainerRecommendation(cname, resources))
        if not containers:
            raise LookupError("no container with a usable forecast (missing, stale or non-finite series)")
        return VpaDecision(ns, name, kind, target, replicas, containers)

    # HPA ---------------------------------------------------------------------------------------
    def _recommend_hpa(self, hpa: dict[str, Any], ctx: dict[str, Any]) -> HpaDecision:
        s = self.settings.hpa
        m = meta(hpa)
        ns, name = m.get("namespace", "default"), m.get("name")
        kind, target, spec_min, max_replicas = parse_hpa(hpa)
        state: ClusterState = ctx["state"]
        wl = state.workload(ns, kind, target)
        if wl is None:
            raise LookupError(f"scaleTargetRef {kind}/{target} not found in namespace {ns}")
        reqs = container_requests(wl)
        pod_requests: dict[str, int] = {}
        for r in reqs.values():
            for res, q in r.items():
                if res in ("cpu", "memory"):
                    pod_requests[res] = pod_requests.get(res, 0) + to_units(res, q)
        tgt = hpa_target(hpa, pod_requests, s.default_utilization)
        series = ctx["index"].get((ns, kind, target))
        fcs: dict[str, Forecast] = ctx["forecasts"]
        sids = [c.get(tgt.resource) for c in (series.by_container.values() if series else [])]
        sids = [x for x in sids if x]
        if not sids or any(x not in fcs for x in sids):
            raise LookupError(f"no usable {tgt.resource} forecast for {ns}/{kind}/{target}")
        fc0 = fcs[sids[0]]
        demand = sum(quantile_column(fcs[x], s.quantile) for x in sids)
        scale = 1000.0 if tgt.resource == "cpu" else 1.0  # series carry cores; targets are millicpu
        ratio = self._level_ratio(sids, ctx) if s.level_steps else 1.0
        lead = parse_duration(s.startup)
        capacity = tgt.per_replica_units * (1 + s.floor_tolerance)
        wish, timeline = predictive_min_replicas(np.asarray(demand) * scale * ratio, self.step, lead,
                                                 parse_duration(s.look_ahead), capacity)
        user_min = spec_min
        ann = (m.get("annotations") or {}).get(ANNOTATION_USER_MIN)
        if ann is not None:
            try:
                user_min = max(1, int(ann))
            except ValueError:
                raise MalformedHpa(f"annotation {ANNOTATION_USER_MIN}={ann!r} is not an integer") from None
        stab = self.stabilizers.setdefault(f"{ns}/{name}", Stabilizer(parse_duration(s.stabilization)))
        steady = stab.apply(ctx["now"], wish)
        reason = Reason(model=f"{fc0.model}@{fc0.version}", quantile=s.quantile, margin=0.0,
                        window=f"now+{s.startup}..+{s.look_ahead}", raw=wish)
        if ratio != 1.0:
            reason.steps.append(f"forecast x{ratio:.2f}: the last {s.level_steps} steps' observed / forecast")
        reason.steps.append(f"per replica {tgt.per_replica_units:g} ({tgt.describe}) x (1 + {s.floor_tolerance:g} tolerance)")
        if steady != wish:
            reason.steps.append(f"scale-down stabilised over {s.stabilization}: {steady}")
        final = max(steady, user_min)
        if final != steady:
            reason.steps.append(f"raised to the user's minReplicas {user_min}")
        if final > max_replicas:
            reason.steps.append(f"capped at maxReplicas {max_replicas}")
            final = max_replicas
        first = int(lead // self.step)
        index = fc0.index
        # the next 4 hours of replicas(t), for the reason and the report (not the whole horizon)
        predicted = int(timeline[min(first, len(timeline) - 1)])
        ctx.setdefault("hpa_series", {})[f"{ns}/{name}"] = (kind, target, sids, predicted, final)
        return HpaDecision(ns, name, final, user_min, max_replicas, predicted, [int(x) for x in timeline[:48]],
                           reason, _iso(index[0]), int(self.step.total_seconds()))

    def _level_ratio(self, sids: list[str], ctx: dict[str, Any]) -> float:
        """Observed / forecast (median) over the last `level_steps` steps the cached forecasts cover
        (1 when a forecast was just made: it has seen those samples already)."""
        hist: History = ctx["history"]
        k = self.settings.hpa.level_steps
        origin_ns = ctx["origin"].value
        observed: list[np.ndarray] = []
        expected: list[np.ndarray] = []
        for sid in sids:
            fc = self.cache.get(sid)
            if fc is None:
                return 1.0
            done = int((origin_ns - int(epoch_ns(fc.index)[0])) // self.step.value)  # forecast steps now in the past
            if done <= 0:
                return 1.0
            a = max(0, done - k)
            y = hist.series[sid]
            # the same regular grid: the observations at the forecast's steps a..done, by position
            yi, first = epoch_ns(y.index), int(epoch_ns(fc.index)[a])
            pos = int(np.searchsorted(yi, first))
            seen = np.full(done - a, np.nan)
            if pos < len(yi) and yi[pos] == first:
                got = y.to_numpy()[pos: pos + done - a]
                seen[: len(got)] = got
            observed.append(seen)
            expected.append(quantile_column(fc, 0.5)[a:done])
        return level_ratio(np.sum(observed, axis=0), np.sum(expected, axis=0))

    # nodes -------------------------------------------------------------------------------------
    def _recommend_nodes(self, rep: RunReport, ctx: dict[str, Any]) -> None:
        s = self.settings.reclaim
        state: ClusterState = ctx["state"]
        fcs: dict[str, Forecast] = ctx["forecasts"]
        index = ctx["index"]
        steps = _steps(s.window, self.step)
        now_iso = _iso(ctx["now"])
        pods_on = state.pods_on()
        per_pod_cache: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray] | None] = {}

        def per_pod(wl: tuple[str, str, str]) -> tuple[np.ndarray, np.ndarray] | None:
            if wl in per_pod_cache:
                return per_pod_cache[wl]
            series = index.get(wl)
            out = None
            if series is not None:
                cpu = np.zeros(steps)
                mem = np.zeros(steps)
                ok = True
                for res_map in series.by_container.values():
                    for res, arr in (("cpu", cpu), ("memory", mem)):
                        sid = res_map.get(res)
                        if sid is None:
                            continue
                        if sid not in fcs:
                            ok = False
                            continue
                        col = quantile_column(fcs[sid], s.quantile)[:steps]
                        arr[: len(col)] += col
                if ok:
                    n = state.replicas(*wl)
                    out = (cpu / n, mem / n)
            per_pod_cache[wl] = out
            return out

        for node in state.nodes:
            nname = meta(node)["name"]
            try:
                alloc = (node.get("status") or {}).get("allocatable") or {}
                if "cpu" not in alloc or "memory" not in alloc:
                    raise ValueError("status.allocatable has no cpu or memory")
                a_cpu, a_mem = to_units("cpu", alloc["cpu"]), to_units("memory", alloc["memory"])
                cpu = np.zeros(steps)
                mem = np.zeros(steps)
                notes: list[str] = []
                numa = _int((meta(node).get("annotations") or {}).get(s.numa_annotation))
                bound_cpu: dict[int, np.ndarray] = {}  # NUMA node -> usage of the pods bound to it
                bound_mem: dict[int, np.ndarray] = {}
                for pod in pods_on.get(nname, []):
                    qos = (meta(pod).get("annotations") or {}).get(s.qos_annotation, "shared_cores")
                    if qos == "reclaimed_cores":
                        continue
                    wl = state.workload_of_pod(pod)
                    d = per_pod(wl) if wl else None
                    if d is None:
                        # no usable forecast: count what the pod asked for (conservative)
                        r_cpu, r_mem = _pod_requests(pod)
                        d = (np.full(steps, r_cpu / 1000.0), np.full(steps, float(r_mem)))
                        notes.append(f"pod {meta(pod).get('namespace')}/{meta(pod).get('name')}: no forecast, "
                                     f"counted at its requests")
                    cpu += d[0]
                    mem += d[1]
                    zone = numa_zone(meta(pod).get("annotations"), numa)
                    if zone is not None:
                        bound_cpu[zone] = bound_cpu.get(zone, np.zeros(steps)) + d[0]
                        bound_mem[zone] = bound_mem.get(zone, np.zeros(steps)) + d[1]
                prev = self.reclaim_prev.get(nname)
                if prev is None:
                    pc, pm = published(node, s)
                    if pc is not None and pm is not None:
                        prev = ReclaimPlan(nname, now_iso, 0, pc, pm)
                plan = plan_node(nname, a_cpu, a_mem, cpu, mem, s, now_iso,
                                 int(parse_duration(s.window).total_seconds()), prev, numa, notes[:20],
                                 bound_cpu, bound_mem)
                rep.reclaim.append(plan)
            except Exception as exc:  # noqa: BLE001
                rep.skipped[f"Node/{nname}"] = f"{type(exc).__name__}: {exc}"
                log.warning("node %s skipped: %s", nname, exc)

    # guardrails and write ----------------------------------------------------------------------
    def _step_guardrails(self, rep: RunReport, ctx: dict[str, Any]) -> str:
        state: ClusterState = ctx["state"]
        now: pd.Timestamp = ctx["now"]
        now_iso = _iso(now)
        vpas = {f"{meta(v).get('namespace', 'default')}/{meta(v)['name']}": v for v in state.vpas}
        hpas = {f"{meta(h).get('namespace', 'default')}/{meta(h)['name']}": h for h in state.hpas}
        nodes = {meta(n)["name"]: n for n in state.nodes}
        changes: list[Change] = []
        before: dict[str, Any] = ctx.setdefault("before", {})  # change -> the live object it was made against
        min_change = self.settings.vpa.min_change
        for d in rep.vpa:
            vpa = vpas[f"{d.namespace}/{d.name}"]
            prev = self.vpa_written.get(d.key) or _published_vpa(vpa)
            new = {(cr.container, r): v.target for cr in d.containers for r, v in cr.resources.items()}
            if prev and set(prev) == set(new) and all(abs(t - prev[k]) < min_change * prev[k] for k, t in new.items()):
                continue  # every target within the dead-band of the one published: not worth a write
            c = vpa_change(vpa, d, now_iso)
            if c is not None:
                before[c.key] = vpa
                c.safe_direction = all(t >= (prev.get(k) or 0) for k, t in new.items())
                changes.append(c)
                if self.settings.vpa.write_resource_recommend:
                    changes.append(resource_recommend_change(vpa, d, self.settings.vpa.recommender_name, now_iso))
        for h in rep.hpa:
            c = hpa_change(hpas[f"{h.namespace}/{h.name}"], h)
            if c is not None:
                before[c.key] = hpas[f"{h.namespace}/{h.name}"]
                changes.append(c)
        for p in rep.reclaim:
            if self.settings.reclaim.write_node_status:
                c = node_change(nodes[p.node], p, self.settings.reclaim)
                if c is not None:
                    before[c.key] = nodes[p.node]
                    changes.append(c)
            if self.settings.reclaim.write_cnr:
                changes.append(cnr_change(p, self.settings.reclaim, now_iso))
        allowed = []
        for c in changes:
            if self.last_written.get(c.key) == _fingerprint(c):
                continue  # what this loop last wrote already says the same (offline state, or a lagging cache)
            if self.cooldown.allows(c.key, now, c.safe_direction):
                allowed.append(c)
            else:
                rep.held[c.key] = f"cool-down {self.settings.guardrails.cooldown} since the last write"
        rep.changes = allowed
        switch = read_kill_switch(self.settings.guardrails.kill_switch_file)
        if switch.engaged:
            rep.outcome, rep.reason, rep.kill_deliberate = KILLED, switch.reason, switch.deliberate
            for c in allowed:
                rep.held[c.key] = "kill switch"
            (log.warning if switch.deliberate else log.error)("%s: %d changes not written", switch.reason, len(allowed))
        return f"{len(allowed)} changes, {len(rep.held)} held"

    def _step_write(self, rep: RunReport, ctx: dict[str, Any]) -> str:
        if rep.outcome == KILLED:
            return "kill switch: nothing written"
        now: pd.Timestamp = ctx["now"]
        vpa_by_key = {d.key: d for d in rep.vpa}

        def write(c: Change) -> WriteResult:
            try:
                return self.sink.write(c)
            except Exception as exc:  # noqa: BLE001 - sinks should not raise; one object never stops the run
                return WriteResult(c.key, "failed", f"{type(exc).__name__}: {exc}")

        workers = max(1, self.settings.loop.write_concurrency)
        if workers > 1 and len(rep.changes) > 1:
            # writes are independent and I/O-bound (API round trips, files): a few in flight at once
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tidewise-write") as pool:
                results = list(pool.map(write, rep.changes))
        else:
            results = [write(c) for c in rep.changes]
        # a write that reached the cluster shows there from the next read; a dry run or a review file
        # leaves the cluster as it was, so the next read should still show the object as it was
        lands = bool(getattr(self.sink, "updates_cluster", False))
        before = ctx.get("before", {})
        for c, res in zip(rep.changes, results):
            rep.results.append(res)
            if res.outcome not in (WRITTEN, DRY_RUN, NOT_FOUND):
                log.error("%s not written: %s %s", c.key, res.outcome, res.detail)
            if res.outcome in (WRITTEN, DRY_RUN):
                self.cooldown.record(c.key, now)
                self.last_written[c.key] = _fingerprint(c)
                shown = c.obj if lands and res.outcome == WRITTEN else before.get(c.key)
                if c.kind in _OBSERVED and shown is not None:
                    self.observed[c.key] = _observed(c.kind, shown, self.settings.reclaim)
                if c.kind == "VerticalPodAutoscaler":
                    d = vpa_by_key[c.key]
                    self.vpa_written[c.key] = {(cr.container, r): v.target for cr in d.containers
                                               for r, v in cr.resources.items()}
        self.sink.close()
        # what a node advertises now: the plan when it was written (or would have been, in a dry
        # run) or already held that value; a write that failed or was held keeps the older value
        outcome = {r.key: r.outcome for r in rep.results}
        pending = {c.name for c in rep.changes if c.kind == "Node"} | \
            {k.split("/", 1)[1] for k in rep.held if k.startswith("Node/")}
        for p in rep.reclaim:
            if p.node not in pending or outcome.get(f"Node/{p.node}") in (WRITTEN, DRY_RUN):
                self.reclaim_prev[p.node] = p
        return f"{rep.count(WRITTEN)} written, {rep.count(DRY_RUN)} dry-run, " \
               f"{len(rep.results) - rep.count(WRITTEN) - rep.count(DRY_RUN)} failed"


# helpers ---------------------------------------------------------------------------------------
def _recommenders(vpa: dict[str, Any]) -> list[str]:
    spec = vpa.get("spec")
    recs = spec.get("recommenders") if isinstance(spec, dict) else None
    return [r.get("name") for r in recs if isinstance(r, dict)] if isinstance(recs, list) else []


def _published_vpa(vpa: dict[str, Any]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    recs = ((vpa.get("status") or {}).get("recommendation") or {}).get("containerRecommendations") or []
    for r in recs:
        for res, q in (r.get("target") or {}).items():
            try:
                out[(r.get("containerName"), res)] = to_units(res, q)
            except ValueError:
                pass
    return out


# the part of each kind that the loop writes and compares with each cluster read (other kinds are
# not read back: CNRs and ResourceRecommends rely on the fingerprint memory alone)
_OBSERVED = {"VerticalPodAutoscaler": "status.recommendation", "HorizontalPodAutoscaler": "spec.minReplicas",
             "Node": "status.allocatable reclaimed resources"}


def _observed(kind: str, obj: dict[str, Any], reclaim: Any) -> Any:
    """What the cluster shows of the part of `obj` the loop writes (compared by equality)."""
    if kind == "VerticalPodAutoscaler":
        status = obj.get("status")
        rec = status.get("recommendation") if isinstance(status, dict) else None
        return rec.get("containerRecommendations") if isinstance(rec, dict) else None
    if kind == "HorizontalPodAutoscaler":
        spec = obj.get("spec")
        return spec.get("minReplicas", 1) if isinstance(spec, dict) else None
    status = obj.get("status")
    alloc = status.get("allocatable") if isinstance(status, dict) else None
    alloc = alloc if isinstance(alloc, dict) else {}
    return [alloc.get(reclaim.millicpu_name), alloc.get(reclaim.memory_name)]


def _steps(text: str, step: pd.Timedelta) -> int:
    return max(1, int(math.ceil(parse_duration(text) / step)))


def _shifted(fc: Forecast, off: int) -> Forecast:
    if off <= 0:
        return fc
    return Forecast(fc.series, fc.index[off:], fc.quantiles, fc.values[off:], fc.model, fc.version,
                    fc.backtest_score, fc.notes)


def _fingerprint(c: Change) -> str:
    """The patch without its timestamps: equal fingerprints write the same decision."""
    def strip(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k not in ("lastTransitionTime", "lastRecommendationTime")}
        if isinstance(o, list):
            return [strip(x) for x in o]
        return o

    return json.dumps(strip(c.patch), sort_keys=True, default=str)


def _spread(sid: str) -> float:
    """A stable factor in [0.5, 1) per series: refreshes of a cold cache spread over later runs."""
    return 0.5 + (zlib.crc32(sid.encode()) % 1000) / 2000.0


def _covers(fc: Forecast | None, origin: pd.Timestamp, need_steps: int, step: pd.Timedelta) -> bool:
    if fc is None:
        return False
    start = int(epoch_ns(fc.index)[0])
    return origin.value >= start and (origin.value - start) // step.value + need_steps <= len(fc.index)


def _cache_state(fc: Forecast, y: pd.Series, origin: pd.Timestamp, need_steps: int, step: pd.Timedelta,
                 max_age: pd.Timedelta) -> str:
    """`fresh` when a cached forecast serves this run: young enough, still covering the steps the
    decisions read, and no observation since it was made above its highest quantile; else
    `surprised` or `aged`."""
    start = int(epoch_ns(fc.index)[0])
    o, st = origin.value, step.value
    if not _covers(fc, origin, need_steps, step):
        return "aged"
    # observations since the forecast's first step, against its top quantile at the same steps
    # (both series are on the same regular grid: positions, not a pandas join, at 20,000 series a run)
    yi = epoch_ns(y.index)
    pos = int(np.searchsorted(yi, start))
    seen = y.to_numpy()[pos:]
    if len(seen):
        k = int((yi[pos] - start) // st)
        top = fc.values[k: k + len(seen), -1]
        with np.errstate(invalid="ignore"):
            if bool(np.any(seen[: len(top)] > top)):
                return "surprised"
    return "aged" if o - start >= max_age.value else "fresh"


def _pod_requests(pod: dict[str, Any]) -> tuple[int, int]:
    cpu = mem = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        req = (c.get("resources") or {}).get("requests") or {}
        cpu += to_units("cpu", req["cpu"]) if "cpu" in req else 0
        mem += to_units("memory", req["memory"]) if "memory" in req else 0
    return cpu, mem


def _int(text: Any) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return 0


def _iso(ts: pd.Timestamp) -> str:
    return ts.tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%SZ") if ts.tzinfo else ts.strftime("%Y-%m-%dT%H:%M:%SZ")
