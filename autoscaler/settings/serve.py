"""Settings of the serving loop: one dataclass per concern, each field with a default, a unit and
a reason. `tidewise serve` fills them once from the config file (section `serve:` with sub-sections
`vpa`, `hpa`, `reclaim`, `guardrails`, `loop`, `select`, ...) and the flags, then passes them down."""
from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.settings.katalyst import IhpaSettings, SpdSettings
from autoscaler.settings.rebalance import RebalanceSettings
from autoscaler.settings.select import SelectSettings
from autoscaler.settings.tide import TideSettings
from contracts.annotations import NUMA_ANNOTATION
from contracts.errors import InputError
from contracts.qos import QOS_ANNOTATION, RECLAIMED_MEMORY, RECLAIMED_MILLICPU
from contracts.quantity import GIB, MIB
from contracts.reclaim import MAX_PLAN_WINDOW
from predictor.durations import parse_duration


@dataclass
class VpaSettings:
    recommender_name: str = "tidewise"  # served VPAs name it in spec.recommenders
    # forecast quantile and margin of the target: on the real traces of BENCHMARKS.md ("Serving loop"),
    # q0.9 + 10% is the lowest slack whose violation rate stays under the stock VPA's
    quantile: float = 0.9
    margin: float = 0.10  # relative safety margin on the target (the stock VPA uses 0.15 on p90)
    # the target covers the highest forecast over the next window. 1h, the target `tidewise replay vpa`
    # scores by default (serve publishes what replay measures), because the full dev run supports it on
    # the equal-cost ratio: applied every hour 0.92x the stock VPA's slack at equal violation (10.6
    # changes a day); under the stock updater's bounds below 0.99x at 4.9 changes a day (`replay vpa
    # --hold 1h`), where 8h gives 1.00x at 1.6 (`--hold 8h`). For about two changes a day set 8h, or
    # choose_by_cost (0.99x at 2.0 changes a day, hourly)
    window: str = "1h"
    # lowerBound = the highest q(lower_quantile) over the next safe_window, without margin: the level
    # the next hour needs. The updater (stock or replay) acts when the request in force leaves
    # [lowerBound, upperBound]; below lowerBound the pods would be starved within the hour
    lower_quantile: float = 0.9
    safe_window: str = "1h"
    # upperBound = target x upper_factor: a request 1.5x what the next window needs is wasted, so it
    # is lowered (once the tide has passed); 1.5 keeps changes of a smooth tide to about two a day
    upper_factor: float = 1.5
    # a request in force is lowered no sooner than this after its last change (raises never wait:
    # they are the safe direction); 4 h, half an 8 h window, stops a noisy forecast from lowering a
    # request it has just raised, or lowering it in two steps as a tide falls
    min_dwell: str = "4h"
    # opt-in (`tidewise replay vpa --hold 8h`): replay applies the updater's rule above (what the stock
    # updater does in a cluster); False applies every recommendation as it comes, as replay always did
    follow_bounds: bool = False
    # after an OOM kill, memory is recommended at least max(usage x 1.2, usage + 100 MiB), the stock
    # VPA's OOMBumpUpRatio and OOMMinBumpUp (recommender/model/container.go), for memory_peak_window
    oom_bump_ratio: float = 1.2
    oom_min_bump_bytes: int = 100 * MIB
    memory_peak_window: str = "1d"  # memory is never recommended below the peak of this past window
    # memory resized in place is never recommended below that peak + this: the kubelet checks usage only
    # before it lowers a limit, so usage that rises in between is OOM-killed (0.15: the stock VPA's margin)
    in_place_memory_margin: float = 0.15
    # updateMode Initial (and Off, which recommends what Initial would set): a request is kept for a pod's
    # whole life, so it covers the plan's highest point over this span, until serve has seen how long the
    # workload's pods live (logic/pod_life.py). 24h: a pod created at night lives through the day's peak
    pod_life: str = "24h"
    min_cpu_millicpu: int = 25  # stock VPA pod minimum (25m), per container here
    min_memory_bytes: int = 250 * MIB  # stock VPA pod minimum (250Mi), per container here
    min_change: float = 0.05  # a recommendation is rewritten only when some target moves by 5% or more
    # restart regime (logic/regime.py: no in-place resize): a container resource's written recommendation
    # changes at most this often in any 24 h. 3: perfect foresight with 3 changes a day already reaches
    # slack 0.43 against the stock VPA's 0.51 on dev (issue 24); each change is a pod restart
    max_changes_per_day: int = 3
    # restart regime: at most this many day plans are made in one run (1.7-2.6 CPU ms each with the week
    # kept, four shapes planned and costed: python -m benchmarks.day_plan_cost). A new UTC day re-plans every restart-regime series; at 10,000
    # workloads (14,000 plans) in one run that took 128 CPU s, past the 60 s interval (BENCHMARKS.md,
    # "Tidal requests in serve"). Over the cap a series keeps the request it has until a later run plans
    # it (600: ~24 runs at 14,000 series; a run's plans then cost what 1,000 did with one shape), which
    # adds no change. A series never planned is planned at once (forecast_budget spreads those)
    day_plans_per_run: int = 600
    # VPA and HPA on one workload: the HPA's CPU target utilisation that keeps its scale point must stay
    # inside these (fractions); outside them the CPU request is held. 0.5-0.9: below half the pods idle
    # at the scale point, above 0.9 the HPA's 10% tolerance reaches the whole request
    hpa_target_bounds: tuple[float, float] = (0.5, 0.9)
    write_resource_recommend: bool = False  # also write Katalyst ResourceRecommend status (when the CRD is used)
    # Choice by cost (issue 12 item 2, autoscaler/logic/choice_by_cost.py; opt-in: `tidewise replay
    # --choose-by-cost`, serve `vpa: choose_by_cost: true`): per workload resource, the forecast at a few
    # quantile/margin points, the stock VPA rule and a flat percentile compete; once a UTC day the
    # cheapest on the last cost_window serves. cost = slack + violation_weight x violation rate +
    # change_weight x changes (> 10%) per day
    choose_by_cost: bool = False
    cost_window: str = "2d"  # the recent past each candidate is scored on: two daily tides
    cost_min_past: str = "1d"  # with less recorded past (a fresh serve process) the forecast serves
    # the one violation budget (issue 24 item 3): the share of 5-minute steps usage may exceed the
    # request, for every VPA without its own `tidewise.io/violation-budget` annotation. 0.05: the stock
    # VPA's measured rate on the dev suite (0.053). Decisions carry it (VpaInputs) and /metrics reports
    # it against the achieved rate; choose_by_cost rules out a candidate whose rate is above it
    violation_budget: float = 0.05
    # slack units one unit of violation rate costs: 2.5 is the slope of the stock VPA's trade-off curve
    # at its own operating point (dev suite: p90 x1.15 -> x1.2 buys 0.007 violation for 0.018 slack),
    # so at this price the stock settings are the cheapest point of their own curve
    violation_weight: float = 2.5
    # the seasonal rule (no model) competes with the hour-peak model for each in-place series, once a UTC
    # day, by cost on its last 7 days (autoscaler/logic/rule_choice.py; BENCHMARKS.md, tidal requests)
    rule_candidate: bool = True
    # slack units one request change a day costs (each is a restart or resize): 10 changes a day weigh
    # as much as 10% slack
    change_weight: float = 0.01
    # more forecast points to compete, as (quantile, margin), besides the one above. None by default: on
    # the dev replay 16 more points chose worse than 3 candidates (0.994 vs 0.990 slack ratio at 2.9 vs 2.0
    # changes a day; with change_weight 0, 0.947 vs 0.948 at 9.3 vs 7.3): each extra candidate is one more
    # chance that two days' luck, not skill, wins
    cost_forecast_points: tuple[tuple[float, float], ...] = ()
    cost_flat_quantile: float = 0.95  # the flat candidate: this percentile of the last 7 days

    def check(self) -> None:
        """ValueError naming the key when a regime, budget or HPA bound setting is out of range."""
        b = self.violation_budget
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 < b <= 0.5:
            raise ValueError(f"violation_budget {b!r}: a share of 5-minute steps in (0, 0.5]")
        m = self.in_place_memory_margin
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m <= 1:
            raise ValueError(f"in_place_memory_margin {m!r}: a share of the memory peak in [0, 1]")
        parse_duration(self.pod_life, what="serve.vpa.pod_life")  # InputError naming the key
        for key, what in (("max_changes_per_day", "changes"), ("day_plans_per_run", "day plans a run")):
            n = getattr(self, key)
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"{key} {n!r}: a whole number of {what}, at least 1")
        bounds = self.hpa_target_bounds
        if not isinstance(bounds, (list, tuple)) or len(bounds) != 2 or \
                not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in bounds) or \
                not 0 < bounds[0] <= bounds[1] <= 1:
            raise ValueError(f"hpa_target_bounds {bounds!r}: [low, high] with 0 < low <= high <= 1 "
                             f"(target utilisation as fractions)")
        self.hpa_target_bounds = (float(bounds[0]), float(bounds[1]))


@dataclass
class HpaSettings:
    # forecast quantile of the demand that replicas must carry (interpolated between stored ones). 0.85:
    # on the dev replay it gave fewer replicas and fewer over-target minutes than the 0.9 used before
    # issue 12 (1.31x vs 1.32x the reactive HPA's replicas; 0.62 vs 0.63 of its over-target share at equal
    # replicas); 0.9 gives 0.59 at 1.35x replicas
    quantile: float = 0.85
    startup: str = "2m"  # lead: pod start-up time; replicas are asked for this much ahead
    # minReplicas covers the forecast steps overlapping [now, now+startup+look_ahead): the loop's
    # interval (60 s), since the next run sets the floor for what follows; a longer window (10m before
    # issue 12) only holds a peak's replicas before they are needed
    look_ahead: str = "1m"
    stabilization: str = "5m"  # scale-down stabilisation (the HPA's default): the floor falls to the highest of this window
    default_utilization: float = 0.7  # target utilisation when the HPA names a Resource metric by value
    level_steps: int = 3  # scale the forecast by observed / forecast over the last 3 steps (0: off)
    # the floor sizes replicas at target x (1 + this): 0.1, the HPA's own tolerance, asks for no replica
    # the HPA itself would not keep; 0 sizes at the target exactly
    floor_tolerance: float = 0.1
    # steps (5 min each) of the level-corrected median's own errors (observed / predicted) kept per
    # HPA; with band_steps > 0 the floor carries median x the `quantile` of those errors instead of the
    # day-ahead quantile (whose band is as wide in the trough as at the peak). 0: off
    band_steps: int = 0
    band_min_steps: int = 12  # errors needed before the band replaces the day-ahead quantile (1 h of steps)


@dataclass
class ReclaimSettings:
    enabled: bool = True
    quantile: float = 0.95  # forecast quantile of each online pod's usage
    window: str = "1h"  # reclaimable holds for the highest online demand over this window
    reserved_millicpu: int = 1000  # kept for system_cores / the enforcer's reserve pool, per node
    reserved_memory_bytes: int = 2 * GIB
    margin_fraction: float = 0.05  # of allocatable, on top (forecast error, daemons without history)
    deadband_millicpu: int = 200  # changes smaller than this are not published (no flapping)
    deadband_memory_bytes: int = 256 * MIB
    max_step_fraction: float = 0.10  # an increase is limited to 10% of allocatable per step; decreases are immediate
    millicpu_name: str = RECLAIMED_MILLICPU  # the extended resources reclaimed pods request
    memory_name: str = RECLAIMED_MEMORY
    write_node_status: bool = True  # patch nodes/status capacity and allocatable
    write_cnr: bool = False  # also a Katalyst CustomNodeResource status (when that CRD is present)
    qos_annotation: str = QOS_ANNOTATION
    numa_annotation: str = NUMA_ANNOTATION  # node annotation: NUMA node count when known
    # the node forecast (tidewise.io/node-forecast) the scheduler extender reads: a day, so the daily tide is in it
    forecast_horizon: str = "24h"  # "" writes none (and forecasts only the windows above)
    forecast_step: str = "1h"  # each step's highest value: 24 numbers a resource, ~1 KiB a node
    forecast_valid: str = "2h"  # the extender scores a node neutrally once its forecast is this old
    forecast_refresh: str = "30m"  # rewritten this often at most, unless the plan is rewritten anyway

    def check(self) -> None:
        """InputError naming `window` when it is not a duration, or longer than a node agent honours a
        plan (`contracts.reclaim.MAX_PLAN_WINDOW`: the agent would cut the plan's validity short)."""
        window = parse_duration(self.window, what="serve.reclaim.window")
        if window.to_pytimedelta() > MAX_PLAN_WINDOW:
            raise InputError(f"serve.reclaim.window {self.window!r}: at most {MAX_PLAN_WINDOW.total_seconds() / 3600:g}h, "
                             f"the longest a node agent honours a reclaim plan; set a shorter window")


@dataclass
class GuardrailSettings:
    stale_after: str = "15m"  # history whose newest sample is older than this freezes all decisions
    max_decrease_ratio: float = 0.5  # a VPA target falls at most to half of the published one per step
    max_increase_ratio: float = 4.0  # ... and rises at most 4x (a broken forecast cannot ask for a node)
    # ... or as far as the workload's own hourly peaks (per pod) of this past window reach: a level it
    # reached itself is evidence, not a broken forecast. A tide wider than the ratios (a night at a tenth
    # of the day's peak) is then followed hour by hour instead of in halvings and 4x steps: on the dev
    # replay in place, 0.831 -> 0.813x the stock VPA's slack at equal violation, gap closed 0.387 -> 0.43
    # (BENCHMARKS.md, "Tidal requests"). "" limits by the ratios alone
    peaks_window: str = "7d"
    cooldown: str = "5m"  # an object is rewritten at most this often, except in the safe direction
    kill_switch_file: str | None = None  # writes only while this file says `run` (anything else stops them)
    min_history: str = "1h"  # a series with less history than this gets no decision

    def check(self) -> None:
        """InputError naming the first duration setting that is not a duration ("" turns peaks_window off)."""
        for name in ("stale_after", "cooldown", "min_history", "peaks_window"):
            value = getattr(self, name)
            if name != "peaks_window" or value:
                parse_duration(value, what=f"serve.guardrails.{name}")


@dataclass
class LoopSettings:
    interval: str = "60s"
    # fetched each run: a week for the global model's week lag and weekly residuals + a day. Training
    # never chooses a model needing more (`tidewise train --serving-history`, default the same 8d)
    history_window: str = "8d"
    # serve running forever (not --once, not --no-watch) fetches that window once, then each run only
    # the newest steps (autoscaler/input/incremental.py): a run's fetch at 500 workloads fell from a
    # median 14.2 s to 0.8 s (BENCHMARKS.md, "Soak"). At least this much before the newest
    # sample held is fetched again, since Prometheus' newest samples may still be incomplete or late:
    # 10m, two steps (Prometheus slices start on its hourly owner grid, so 1h to 1h10m are re-read there)
    fetch_overlap: str = "10m"
    # ... and the whole window is fetched again this often anyway, for samples that arrived later than
    # the overlap (a backfill, a scraper catching up): 6h is one full fetch in 360 runs, and bounds such
    # a difference to a quarter of a day. None fetches the whole window on every run (no increments)
    full_refetch_every: str | None = "6h"
    # file holding the registry's HMAC key (a mounted Secret): versions must then be signed with it
    registry_key_file: str | None = None
    step: str = "5m"  # history and forecast step
    forecast_model: str = "auto"  # auto: per-series choice by backtest (predictor); a named model skips it
    # A series' forecast is reused by later runs until it is this old (spread over 50-100% of it per
    # series, so that refreshes do not all fall on one run) or an observation leaves its top quantile;
    # None forecasts every series on every run. 30m: at 10,000 workloads a run refreshes ~1/20 of them.
    forecast_refresh: str | None = "30m"
    # At most this many series are forecast per run: surprised ones first, then those without a
    # forecast, then the oldest. The rest keep serving their cached forecast (up to 2x forecast_refresh
    # old; older ones are refreshed regardless) and a series without any gets no decision yet.
    # None: no limit (`--once` runs and small clusters). ~2000 keeps a 2-core run near 5 s.
    forecast_budget: int | None = None
    backoff_max: str = "10m"  # after source failures the interval doubles up to this
    # Decisions read the registry's decision-time models (issue 12; `tidewise train` fits them) when the
    # version holds them and they are fresh, else the day-ahead forecast. HPA on (the demand a start-up
    # time ahead): dev replay over-target 0.49x the reactive HPA's at equal replicas, 1.23x replicas
    # (day-ahead: 0.62 at 1.31x). VPA on (issue 24: the hour-peak model at each series' violation-budget
    # level in place, the day plan where a change restarts a pod; `tidewise replay vpa`'s default, see
    # BENCHMARKS.md); a registry without the hour-peak model serves the day-ahead forecast, said in the reason
    decision_time_hpa: bool = True
    decision_time_vpa: bool = True
    decision_max_age: str = "2d"  # a decision-time model trained on data older than this is not used
    write_concurrency: int = 8  # writes in flight at once (API round trips, files); 1 writes in order
    apply: bool = False  # dry-run by default; True writes to the cluster
    lease_name: str = "tidewise-serve"
    lease_namespace: str = "tidewise"
    lease_duration_seconds: int = 15


@dataclass
class UiSettings:
    """The live page of `tidewise serve --ui` (docs/serve-ui.md, autoscaler/ui/): read-only, off by default."""

    enabled: bool = False  # `--ui`: the page is for people; the loop does not need it
    # loopback: this machine only (in a cluster, `kubectl port-forward`); an address such as 0.0.0.0:8088
    # shows every decision to whoever reaches the pod, so it is given explicitly (`--ui-address`)
    address: str = "127.0.0.1:8088"
    # the page reloads itself this often, seconds: a quarter of the 60 s interval, so a run shows within 15 s
    refresh_seconds: int = 15


@dataclass
class ServeSettings:
    vpa: VpaSettings = field(default_factory=VpaSettings)
    hpa: HpaSettings = field(default_factory=HpaSettings)
    reclaim: ReclaimSettings = field(default_factory=ReclaimSettings)
    guardrails: GuardrailSettings = field(default_factory=GuardrailSettings)
    loop: LoopSettings = field(default_factory=LoopSettings)
    spd: SpdSettings = field(default_factory=SpdSettings)  # Katalyst ServiceProfileDescriptors (settings/katalyst.py)
    ihpa: IhpaSettings = field(default_factory=IhpaSettings)  # Katalyst IntelligentHorizontalPodAutoscalers
    rebalance: RebalanceSettings = field(default_factory=RebalanceSettings)  # settings/rebalance.py
    tide: TideSettings = field(default_factory=TideSettings)  # settings/tide.py
    # what serve may write (settings/select.py): VPAs/SPDs as they opt in, HPAs/Nodes/IHPAs/pools only when selected
    select: SelectSettings = field(default_factory=SelectSettings)
    ui: UiSettings = field(default_factory=UiSettings)  # the live page (`serve --ui`)
