"""`tidewise serve` — the online loop: VPA recommendations, predictive HPA floors, reclaimable node
resources. Dry-run by default; `--apply` writes to the cluster."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TypeVar

from tidewise.commands import serve_ui

T = TypeVar("T")

# loopback: a `--cluster-state` review on a laptop shows its decisions to no one else; the manifests
# listen on 0.0.0.0 behind their NetworkPolicy (deploy/serve.yaml, deploy/serve-networkpolicy.yaml)
METRICS_DEFAULT = "127.0.0.1:8080"
HELP = """\
Every --interval: refresh the model registry, fetch recent history, forecast, recommend, apply
guardrails and write what changed. Dry-run unless --apply. Offline: --cluster-state FILE reads
the cluster from YAML, --sink file --out DIR writes one YAML per changed object for review.

  tidewise serve --once --cluster-state D/cluster-state.yaml --source file \\
      --input D/history.parquet --sink file --out recs/
  tidewise serve --source prometheus --apply            # in the cluster (see deploy/)
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the serving loop (VPA, predictive HPA, reclaimable resources)",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--once", action="store_true",
                   help="run one time and exit: 1 when the run froze, a write failed, conflicted or was throttled, "
                        "the kill switch is missing or unreadable (an explicit stop exits 0), or --registry has "
                        "no usable version")
    p.add_argument("--interval", default=None, help="time between runs (default 60s)")
    p.add_argument("--apply", action="store_true", help="write to the cluster (default: dry-run, log only)")
    p.add_argument("--cluster-state", metavar="FILE", help="read the cluster from this YAML instead of the API")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--no-watch", action="store_true",
                   help="list every object on every run instead of listing once and then watching (the default "
                        "when running forever; --once always lists)")
    p.add_argument("--source", choices=["file", "prometheus", "synthetic"], default="prometheus",
                   help="history source (default prometheus; settings in the config file's prometheus: section)")
    p.add_argument("--input", metavar="PATH", help="long history file for --source file")
    p.add_argument("--prometheus-url", help="Prometheus base URL (overrides the config file)")
    p.add_argument("--seed", type=int, default=7, help="seed of --source synthetic (default 7)")
    p.add_argument("--registry", metavar="DIR", help="model registry folder (models/<version>); default: stateless forecasts")
    p.add_argument("--registry-key", metavar="FILE", help="HMAC key file (e.g. a mounted Secret): refuse registry "
                                                         "versions not signed with it (default: unsigned accepted)")
    p.add_argument("--sink", choices=["api", "file"], default="api", help="where changes go (default api)")
    p.add_argument("--out", metavar="DIR", help="output folder of --sink file")
    p.add_argument("--recommender-name", default=None, help="serve VPAs naming this recommender (default tidewise)")
    p.add_argument("--kill-switch", metavar="FILE",
                   help="write only while this file says `run`; `stop`, any other text, or a missing or unreadable "
                        "file writes nothing (fails closed)")
    p.add_argument("--step", default=None, help="history and forecast step (default 5m)")
    p.add_argument("--model", default=None, help="forecast model: auto (default: chosen per series by backtest) "
                                                 "or one model name (cheaper at fleet scale)")
    p.add_argument("--now", help="decision time (ISO-8601 UTC); default: wall clock for Prometheus, the end of the "
                                 "history + one step for files")
    p.add_argument("--metrics-address", metavar="HOST:PORT",
                   help=f"where /metrics /healthz /readyz listen (default {METRICS_DEFAULT}: this machine only; "
                        "deploy/serve.yaml gives 0.0.0.0:8080, every address, as Prometheus scrapes the pod IP; "
                        "port 0: off)")
    p.add_argument("--port", type=int, default=None, help="the port alone (0: off; default 8080)")
    p.add_argument("--host", default=None, help="the address alone (default 127.0.0.1)")
    p.add_argument("--no-leader-election", action="store_true", help="act without holding the Lease (one replica only)")
    p.add_argument("--identity", help="leader-election identity (default: $POD_NAME or the host name)")
    p.add_argument("--report", metavar="FILE", help="write the last run's report as JSON")
    p.add_argument("--rebalance", action="store_true",
                   help="also move pods off nodes whose forecast peak will be hot (docs/rebalance.md; evicts "
                        "only with --apply; settings in the config file's serve: rebalance: section)")
    p.add_argument("--tide", action="store_true",
                   help="also lend idle tide nodes of Katalyst TideNodePools to batch and hand them back ahead of the "
                        "forecast (docs/tide.md; writes only with --apply; settings in the serve: tide: section)")
    serve_ui.add_flags(p)  # --ui, --ui-address: the live page
    p.set_defaults(func=run)


def _checked(cls: type[T], section: dict, key: str, **overrides: object) -> T:
    """The `serve.<key>` settings from the file and the flags, checked (`check()`, where the class has one):
    a ValueError names the section and becomes one line (exit 2)."""
    from contracts.errors import InputError
    from tidewise.config import settings_from

    made = settings_from(cls, section.get(key), f"serve.{key}", **overrides)
    try:
        getattr(made, "check", lambda: None)()
    except ValueError as exc:
        raise InputError(f"config section 'serve.{key}': {exc}") from None
    return made


def _settings(args: argparse.Namespace):  # -> ServeSettings
    from autoscaler.settings import (GuardrailSettings, HpaSettings, LoopSettings, ReclaimSettings, ServeSettings,
                                     VpaSettings)
    from contracts.errors import InputError
    from tidewise.config import settings_from

    section = dict((args.settings or {}).get("serve") or {})
    known = {"vpa", "hpa", "reclaim", "guardrails", "loop", "rebalance", "tide", "spd", "ihpa", "select", "ui"}
    if set(section) - known:
        raise InputError(f"config section 'serve': unknown key(s) {sorted(set(section) - known)}; known: {sorted(known)}")
    from autoscaler.settings import IhpaSettings, RebalanceSettings, SpdSettings, TideSettings

    rebalance = _checked(RebalanceSettings, section, "rebalance",
                         enabled=True if getattr(args, "rebalance", False) else None)
    tide = _checked(TideSettings, section, "tide", enabled=True if getattr(args, "tide", False) else None)
    vpa = _checked(VpaSettings, section, "vpa", recommender_name=args.recommender_name)
    guardrails = _checked(GuardrailSettings, section, "guardrails", kill_switch_file=args.kill_switch)
    reclaim = _checked(ReclaimSettings, section, "reclaim")
    return ServeSettings(
        ui=serve_ui.ui_settings(args, section.get("ui")),
        select=_select(section.get("select")),
        spd=settings_from(SpdSettings, section.get("spd"), "serve.spd"),
        ihpa=settings_from(IhpaSettings, section.get("ihpa"), "serve.ihpa"),
        rebalance=rebalance,
        tide=tide,
        vpa=vpa,
        hpa=settings_from(HpaSettings, section.get("hpa"), "serve.hpa"),
        reclaim=reclaim,
        guardrails=guardrails,
        loop=settings_from(LoopSettings, section.get("loop"), "serve.loop", interval=args.interval, step=args.step,
                           forecast_model=args.model, registry_key_file=args.registry_key,
                           apply=True if args.apply else None),
    )


def _select(section: dict | None):  # -> SelectSettings
    """`serve.select`: per kind `all`, `namespaces`, `selector` (autoscaler/settings/select.py), and `annotation`."""
    from autoscaler.settings import KindSelection, SelectSettings
    from contracts.errors import InputError
    from tidewise.config import settings_from

    section = dict(section or {})
    kinds = {f.name for f in dataclasses.fields(SelectSettings)} - {"annotation"}
    for key, value in section.items():
        if key in kinds and value is not None and not isinstance(value, dict):
            raise InputError(f"config section 'serve.select.{key}' must be a mapping (all, namespaces, selector), "
                             f"not {type(value).__name__}")
    kinds_given = {k: settings_from(KindSelection, {**(v or {}), "kind": k}, f"serve.select.{k}")
                   for k, v in section.items() if k in kinds}
    return settings_from(SelectSettings, {k: v for k, v in section.items() if k not in kinds}, "serve.select",
                         **kinds_given)


def _metrics_address(args: argparse.Namespace) -> tuple[str, int]:
    """(host, port) of /metrics: --metrics-address, or the older --host/--port pair (not both)."""
    from contracts.errors import InputError
    from contracts.http_endpoint import parse_listen_address

    if args.metrics_address is not None and (args.host is not None or args.port is not None):
        raise InputError("--metrics-address HOST:PORT replaces --host and --port: give one or the other")
    flag, text = "--metrics-address", args.metrics_address
    if text is None:  # the older pair, each defaulting to its part of METRICS_DEFAULT
        host, port = METRICS_DEFAULT.rsplit(":", 1)
        host, port = (args.host or host).strip("[]"), port if args.port is None else args.port
        flag, text = "--host/--port", f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        return parse_listen_address(text)
    except ValueError as exc:
        raise InputError(f"{flag} {exc}") from None


def _report_dict(rep, features) -> dict:
    """The --report JSON: the run, then each feature's blocks (autoscaler/features: vpa, hpa, nodes, ...)."""
    doc = {
        "now": str(rep.now), "outcome": rep.outcome, "reason": rep.reason, "registry": rep.registry,
        "steps": [{"name": s.name, "seconds": round(s.seconds, 4), "ok": s.ok, "detail": s.detail} for s in rep.steps],
        "writes": [{"object": r.key, "outcome": r.outcome, "detail": r.detail} for r in rep.results],
        "problems": rep.problems(), "changed_outside": rep.drifted,
        "skipped": rep.skipped, "held": rep.held,
    }
    for f in sorted(features, key=lambda f: f.report_rank):
        doc.update(f.report(rep))
    return doc


def _check_args(args: argparse.Namespace, settings) -> None:
    """Every usage mistake is exit 2 now, not a frozen loop later (paths: `_check_paths`)."""
    from contracts.errors import InputError
    from predictor.durations import parse_duration
    from predictor.models import MODELS

    if settings.loop.forecast_model != "auto" and settings.loop.forecast_model not in MODELS:
        raise InputError(f"--model {settings.loop.forecast_model!r}: use auto or one of {sorted(MODELS)}")
    parse_duration(settings.loop.interval, what="--interval")
    if args.sink == "file" and not args.out:
        raise InputError("--sink file needs --out DIR (one YAML per changed object is written there)")
    if args.out and args.sink != "file":
        raise InputError("--out is only used with --sink file")
    if args.source == "file" and not args.input:
        raise InputError("--source file needs --input PATH (a long CSV/Parquet history)")
    if args.input and args.source != "file":
        raise InputError("--input is only used with --source file")
    serve_ui.listen_address(args, settings)  # --ui's flags


def _check_paths(args: argparse.Namespace, settings) -> None:
    """Folders and files named on the command line, checked before anything runs."""
    from contracts.errors import InputError
    from tidewise.paths import check_output_path, existing_registry, prepare_output_dir

    if args.registry:
        existing_registry(args.registry)  # a file or a missing folder: exit 2 now, not a frozen loop
    if args.out:
        prepare_output_dir(args.out)
    if args.report:
        check_output_path(args.report, what="--report")
    if settings.loop.registry_key_file:
        from predictor.registry import read_key

        if not args.registry:
            raise InputError("--registry-key is only used with --registry DIR")
        read_key(settings.loop.registry_key_file)  # a missing or short key is a usage error now, not a refused registry later


def loop_inputs(args: argparse.Namespace):  # -> (ServeSettings, step, HistorySource, clock)
    """What a command running the serving loop (`serve`, `rebalance`) takes from its flags: the
    settings, the step, the history source and the clock, each checked (a usage mistake exits 2)."""
    from predictor.durations import parse_duration

    settings = _settings(args)
    step = parse_duration(settings.loop.step, what="--step")
    _check_args(args, settings)
    _check_paths(args, settings)
    return settings, step, _source(args), _clock(args, step)


def _source(args: argparse.Namespace):  # -> HistorySource
    import os

    from contracts.errors import InputError

    if args.source == "file":
        from predictor.sources.files import FileSource

        if not os.path.exists(args.input):
            raise InputError(f"--input {args.input}: no such file")
        return FileSource(args.input)
    if args.source == "synthetic":
        from predictor.sources.files import SyntheticSource
        from predictor.sources.synthetic import generate_cluster

        return SyntheticSource(generate_cluster(seed=args.seed))
    from predictor.sources.prometheus import PrometheusSettings, PrometheusSource
    from tidewise.config import settings_from

    return PrometheusSource(settings_from(PrometheusSettings, (args.settings or {}).get("prometheus"),
                                          "prometheus", url=args.prometheus_url))


def _clock(args: argparse.Namespace, step):  # -> Callable[[], pd.Timestamp] | None
    import pandas as pd

    from contracts.errors import InputError

    if args.now:
        try:
            fixed = pd.Timestamp(args.now)
            fixed = fixed.tz_localize("UTC") if fixed.tzinfo is None else fixed.tz_convert("UTC")
        except ValueError:
            raise InputError(f"--now {args.now!r} does not parse: use ISO-8601 UTC") from None
        return lambda: fixed
    if args.source == "prometheus":
        return lambda: pd.Timestamp.now(tz="UTC").floor(step)
    return None


def _extra_kinds(settings) -> tuple[str, ...]:
    """The optional kinds (autoscaler/model/cluster.py OPTIONAL_KINDS) the enabled features read."""
    from autoscaler.features import extra_kinds, features

    return extra_kinds(features(settings))


def _cluster_and_sink(args: argparse.Namespace, kinds: tuple[str, ...] = ()):  # -> (Kube | None, ClusterReader, Sink)
    kube = None
    if not args.cluster_state or (args.sink == "api" and args.apply):
        from autoscaler.kube import Kube  # the kubernetes client is imported only when the API is used

        kube = Kube.from_config(args.kubeconfig)
    from autoscaler.input.cluster import ApiCluster, FileCluster, load_cluster_state
    from autoscaler.output.sinks import ApiSink, DryRunSink, FileSink, Sink

    # without --cluster-state, kube was made above: `kube is None` only narrows the type
    cluster = FileCluster(args.cluster_state) if args.cluster_state or kube is None else ApiCluster(kube, kinds)
    if isinstance(cluster, ApiCluster) and not args.once and not args.no_watch:
        from autoscaler.input.watched import WatchedCluster

        cluster = WatchedCluster(kube, extra_kinds=kinds)  # type: ignore[assignment,arg-type]  # a third reader; kube is set for ApiCluster
    if args.cluster_state:
        load_cluster_state(args.cluster_state)  # a malformed file is a usage error now, not a frozen run later
    sink: Sink
    if args.sink == "file":
        sink = FileSink(args.out)
    elif args.apply and kube is not None:  # --sink api --apply made kube above
        sink = ApiSink(kube)
    else:
        sink = DryRunSink()
    return kube, cluster, sink


def run(args: argparse.Namespace) -> int:
    from predictor.durations import parse_duration

    settings = _settings(args)
    step = parse_duration(settings.loop.step, what="--step")
    _check_args(args, settings)
    metrics_host, metrics_port = _metrics_address(args)
    _check_paths(args, settings)
    source = _source(args)
    if not args.once and not args.no_watch:  # running forever: the window once, then increments
        from autoscaler.input.incremental import incremental_history

        source = incremental_history(source, settings.loop.fetch_overlap, settings.loop.full_refetch_every)
    clock = _clock(args, step)
    kube, cluster, sink = _cluster_and_sink(args, _extra_kinds(settings))
    from autoscaler.metrics import Metrics
    from autoscaler.routines.loop import ServingLoop

    metrics = Metrics()
    loop = ServingLoop(settings, source, cluster, sink, registry_dir=args.registry, clock=clock, metrics=metrics,
                       evictor=_evictor(args, settings, kube))
    if args.once:
        return _once(args, loop, sink)
    leader = kube is not None and args.sink == "api" and args.apply and not args.no_leader_election
    return _forever(args, loop, sink, metrics, kube if leader else None, (metrics_host, metrics_port))


def _evictor(args: argparse.Namespace, settings, kube):  # -> Evictor | None
    """The one Evictor of rebalancing and tide drains: sends evictions only with --apply and a cluster to send them to."""
    if not (settings.rebalance.enabled or settings.tide.enabled):
        return None
    from autoscaler.output.eviction import Evictor

    live = bool(args.apply and kube is not None and getattr(args, "sink", "api") == "api")
    return Evictor(kube, dry_run=not live, per_minute=settings.rebalance.per_minute if settings.rebalance.enabled
                   else settings.tide.evictions_per_minute)


def _once(args: argparse.Namespace, loop, sink) -> int:
    """One run: exit 1 when it fell short (frozen, a write not landed, a faulty kill switch). The
    files of --sink file and --report land together or not at all."""
    from contracts.atomic import all_or_none, write_text_atomic
    from tidewise.progress import run_loop_once

    with all_or_none({"--report": args.report}):
        rep = run_loop_once(loop, "serving loop, once: steps")
        if args.report:
            write_text_atomic(args.report, json.dumps(_report_dict(rep, loop.features), indent=1, default=str))
    _print(rep, sink)
    problems = rep.problems()
    for line in problems[:50]:
        print(f"  not done: {line}", file=sys.stderr)
    if len(problems) > 50:
        print(f"  ... and {len(problems) - 50} more (each is in the log{' and --report' if args.report else ''})",
              file=sys.stderr)
    return 1 if problems else 0


def _forever(args: argparse.Namespace, loop, sink, metrics, lease_kube, address: tuple[str, int]) -> int:
    """Until SIGTERM, with /metrics /healthz /readyz; leader election when `lease_kube` is given."""
    from autoscaler.metrics import HealthServer
    from autoscaler.routines.runner import Runner, leader_elector
    from contracts.errors import InputError

    ui = serve_ui.start(args, loop, sink)  # first: a busy --ui-address exits 2 before anything else starts
    elector = leader_elector(lease_kube, loop.settings.loop, args.identity) if lease_kube is not None else None
    runner = Runner(loop, elector, lambda: metrics.last_run_ok, lambda rep: _print(rep, sink))
    runner.stop_on_sigterm()
    host, port = address
    server = None
    if port:
        try:
            server = HealthServer(metrics, host, port, runner.live, runner.ready).start()
        except OSError as exc:
            raise InputError(f"--metrics-address {host}:{port}: cannot listen ({exc.strerror or exc}); "
                             f"use a free port and an address of this machine") from None
    print(f"tidewise serve: every {loop.settings.loop.interval}, sink {sink.name}"
          f"{' (dry-run)' if sink.name == 'dry-run' else ''}, "
          f"metrics on {f'{host}:{server.port}' if server else 'off'}", file=sys.stderr)
    try:
        runner.run()
    finally:
        if server:
            server.stop()
        if ui:
            ui.stop()
    return 0


def _print(rep, sink) -> None:
    steps = ", ".join(f"{s.name} {s.seconds:.2f}s" for s in rep.steps)
    where = f" -> {sink.out_dir}" if getattr(sink, "out_dir", None) else ""
    print(f"tidewise serve: {rep.summary()}{where} [{steps}]", file=sys.stderr)
    for key, why in list(rep.skipped.items())[:10]:
        print(f"  skipped {key}: {why}", file=sys.stderr)
