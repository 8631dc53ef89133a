"""`tidewise fetch` — pull workload history from Prometheus into a long file."""
from __future__ import annotations

import argparse
import sys

HELP = """\
Pull per-workload CPU and memory (and optionally requests, replicas and a business metric) from
Prometheus into a long file series,timestamp,value,namespace,kind,workload,container,resource.

Series ids are namespace/kind/name/container/resource (for example shop/Deployment/frontend/app/cpu);
pods are mapped to their workload through kube_pod_owner and kube_replicaset_owner, and summed
across pods (--aggregate). Range queries are split under Prometheus's 11,000-points limit.
PromQL templates can be overridden in the config file (section `prometheus:`, key `queries:`).
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fetch", help="pull history from Prometheus into a long file",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_prometheus_args(p)
    when = p.add_argument_group("time range (give --last, or --start and --end)")
    when.add_argument("--last", help="how far back from now (e.g. 14d); default 14d when no --start")
    when.add_argument("--start", help="ISO-8601 UTC start")
    when.add_argument("--end", help="ISO-8601 UTC end (default: now)")
    p.add_argument("--step", default="5m", help="resolution of the history (default 5m)")
    p.add_argument("--what", default="cpu,memory",
                   help="comma-separated: cpu, memory, requests, replicas, business (default cpu,memory)")
    p.add_argument("--aggregate", choices=["sum", "mean", "max"], help="across a workload's pods (default sum)")
    p.add_argument("--output", required=True, metavar="PATH", help="long file to write: .parquet, .csv or .csv.gz")
    p.set_defaults(func=run)


def add_prometheus_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Prometheus (also settable in the config file, section `prometheus:`)")
    g.add_argument("--prometheus-url", help="base URL (default http://127.0.0.1:9090)")
    g.add_argument("--bearer-token-file", metavar="FILE", help="file holding a bearer token")
    g.add_argument("--header", action="append", default=[], metavar="NAME=VALUE", help="extra HTTP header (repeatable)")
    g.add_argument("--insecure-skip-tls-verify", action="store_true", help="do not verify the server certificate")
    g.add_argument("--ca-file", metavar="FILE", help="CA bundle to verify the server certificate")
    g.add_argument("--timeout", help="per-request timeout (default 30s)")


def prometheus_settings(args: argparse.Namespace):
    from contracts.errors import InputError
    from predictor.durations import parse_duration
    from predictor.sources.prometheus import PrometheusSettings
    from tidewise.config import settings_from

    headers = {}
    for h in args.header:
        name, sep, value = h.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--header {h!r}: use NAME=VALUE")
        headers[name.strip()] = value
    section = dict(args.settings.get("prometheus") or {})
    if headers:
        section["headers"] = {**section.get("headers", {}), **headers}
    return settings_from(
        PrometheusSettings, section, "prometheus",
        url=args.prometheus_url,
        bearer_token_file=args.bearer_token_file,
        tls_verify=False if args.insecure_skip_tls_verify else None,
        ca_file=args.ca_file,
        timeout_seconds=parse_duration(args.timeout, what="--timeout").total_seconds() if args.timeout else None,
        aggregate=getattr(args, "aggregate", None),
    )


def parse_time(text: str, flag: str):
    import pandas as pd

    from contracts.errors import InputError

    try:
        ts = pd.Timestamp(text)
    except (ValueError, OverflowError):
        raise InputError(f"{flag} {text!r} does not parse: use ISO-8601 UTC such as 2024-08-01T00:00:00Z") from None
    if not 1990 <= ts.year < 2200:  # as for timestamps in files: outside is a typo, and overflows on pandas 2
        raise InputError(f"{flag} {text!r} is outside 1990..2200; use ISO-8601 UTC such as 2024-08-01T00:00:00Z")
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from contracts.errors import InputError
    from predictor.durations import format_duration, parse_duration
    from predictor.history import write_long
    from predictor.sources.prometheus import PrometheusSource
    from tidewise.paths import check_output_path
    from tidewise.progress import progress

    step = parse_duration(args.step, what="--step")
    end = parse_time(args.end, "--end") if args.end else pd.Timestamp.now(tz="UTC")
    if args.start and args.last:
        raise InputError("give either --start or --last, not both")
    start = parse_time(args.start, "--start") if args.start else end - parse_duration(args.last or "14d", what="--last")
    what = tuple(w.strip() for w in args.what.split(",") if w.strip())
    check_output_path(args.output, what="--output")  # before the queries, not after them
    source = PrometheusSource(prometheus_settings(args), what=what)
    # a large cluster's query can take minutes: a line (or a bar) per HTTP request
    with progress(f"querying Prometheus at {source.settings.url}", source.planned_requests(start, end, step),
                  announce=False) as advance:
        source.on_request = advance
        history = source.fetch(start, end, step)
    for name, why in history.failed.items():
        print(f"warning: {name}: {why}", file=sys.stderr)
    if not history.series:
        print(f"tidewise fetch: error: Prometheus at {source.settings.url} returned no series for "
              f"{', '.join(what)} between {start} and {end}; check the range and the PromQL templates",
              file=sys.stderr)
        return 1
    frame = history.to_long()
    parts = frame["series"].str.split("/", expand=True)
    frame["namespace"], frame["kind"], frame["workload"], frame["container"], frame["resource"] = (
        parts[0], parts[1], parts[2], parts[3], parts[4])
    write_long(frame, args.output)
    workloads = frame["series"].str.rsplit("/", n=2).str[0].nunique()
    gaps = sum(1 for g in history.gaps.values() if g.missing_steps)
    print(f"fetched {len(history.series)} series ({workloads} workload containers) x {format_duration(step)} from "
          f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} in {source.requests_made} requests -> {args.output}"
          f" (series with gaps: {gaps}; failed queries: {len(history.failed)})", file=sys.stderr)
    return 0
