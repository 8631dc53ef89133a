"""History from Prometheus (cAdvisor and kube-state-metrics series) through prometheus-api-client.

Each resource is one PromQL template (overridable in the config file) that returns per-pod series
labelled `namespace, pod, container`; pods are mapped to their owning workload through
`kube_pod_owner` and `kube_replicaset_owner` and aggregated per workload container. Range queries
are split so that no request asks for more than Prometheus's 11,000 points per series.
"""
from __future__ import annotations

import logging
import string
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from predictor.errors import InputError, SourceError
from predictor import value_scale
from predictor.history import History, regularize, validate_long
from predictor.timestamps import epoch_to_utc
from predictor.types import SeriesKey

log = logging.getLogger(__name__)

# Templates use $name placeholders (string.Template) because PromQL itself is full of braces.
DEFAULT_QUERIES: dict[str, str] = {
    "cpu": 'sum by (namespace, pod, container) (rate(container_cpu_usage_seconds_total{container!="",pod!=""}[$rate_window]))',
    "memory": 'sum by (namespace, pod, container) (container_memory_working_set_bytes{container!="",pod!=""})',
    "cpu_request": 'sum by (namespace, pod, container) (kube_pod_container_resource_requests{resource="cpu"})',
    "memory_request": 'sum by (namespace, pod, container) (kube_pod_container_resource_requests{resource="memory"})',
    "replicas_deployment": "sum by (namespace, deployment) (kube_deployment_status_replicas)",
    "replicas_statefulset": "sum by (namespace, statefulset) (kube_statefulset_status_replicas)",
    "pod_owner": "max by (namespace, pod, owner_kind, owner_name) (kube_pod_owner)",
    "replicaset_owner": "max by (namespace, replicaset, owner_kind, owner_name) (kube_replicaset_owner)",
}
POD_RESOURCES = ("cpu", "memory", "cpu_request", "memory_request")
WHAT_CHOICES = ("cpu", "memory", "requests", "replicas", "business")
PROMETHEUS_MAX_POINTS = 11_000  # Prometheus refuses a range query above this many points per series
WORKLOAD_CONTAINER = "-"  # container field of workload-level series (replicas, business metric)
OWNER_STEPS = 12  # pod and ReplicaSet owners change rarely: asked once every 12 steps (an hour at 5m)


@dataclass
class PrometheusSettings:
    """How to reach Prometheus and what to ask it."""

    url: str = "http://127.0.0.1:9090"  # base URL of the Prometheus HTTP API
    bearer_token_file: str | None = None  # e.g. a service-account token; sent as Authorization: Bearer
    headers: dict[str, str] = field(default_factory=dict)  # extra HTTP headers (tenant ids, ...)
    tls_verify: bool = True  # verify the server certificate (https)
    ca_file: str | None = None  # CA bundle for a private PKI; implies tls_verify
    timeout_seconds: float = 30.0  # per request
    retries: int = 3  # per request, on connection errors and 408/429/5xx, with backoff
    backoff_seconds: float = 0.5  # urllib3 backoff factor: 0.5 s, 1 s, 2 s between retries
    max_points: int = PROMETHEUS_MAX_POINTS  # points per series per request
    rate_window: str = "5m"  # window of rate() for the CPU counter; >= 2 scrape intervals
    aggregate: str = "sum"  # per workload container across pods: sum (total), mean or max
    queries: dict[str, str] = field(default_factory=dict)  # overrides of DEFAULT_QUERIES
    business_metric: str | None = None  # PromQL with namespace + pod (or deployment/statefulset) labels
    business_name: str = "qps"  # resource name of the business metric series

    def query(self, name: str) -> str:
        template = self.queries.get(name, DEFAULT_QUERIES.get(name, ""))
        if name == "business":
            template = self.business_metric or ""
        return string.Template(template).safe_substitute(rate_window=self.rate_window)


class PrometheusSource:
    """`fetch(start, end, step)` -> History of workload series (see module docstring)."""

    name = "prometheus"
    # owners are asked every OWNER_STEPS steps from a range's start: a slice of a window starting a
    # multiple of that after the window's start asks them at points the whole window asks them at, so
    # autoscaler/input/incremental.py's slices map each pod to the workload a full fetch maps it to
    slice_steps = OWNER_STEPS

    def __init__(self, settings: PrometheusSettings, what: tuple[str, ...] = ("cpu", "memory"),
                 client: Any = None, sleep: Callable[[float], None] = time.sleep,
                 on_request: Callable[[], None] | None = None):
        unknown = set(what) - set(WHAT_CHOICES)
        if unknown:
            raise InputError(f"unknown series kind(s) {sorted(unknown)}: choose from {', '.join(WHAT_CHOICES)}")
        if "business" in what and not settings.business_metric:
            raise InputError("business series asked for but no business_metric query is configured "
                             "(set prometheus.business_metric in the config file)")
        if settings.aggregate not in ("sum", "mean", "max"):
            raise InputError(f"aggregate {settings.aggregate!r}: use sum, mean or max")
        self.settings = settings
        self.what = what
        self._client = client
        self._sleep = sleep
        self.requests_made = 0
        self.on_request = on_request  # called after each HTTP request (the command line's progress)

    def planned_requests(self, start: pd.Timestamp, end: pd.Timestamp, step: pd.Timedelta) -> int:
        """How many HTTP requests `fetch(start, end, step)` makes when every query answers."""
        start, end = start.floor(step), end.floor(step)
        fine = self._chunks(start, end, step)
        queries = len(self._pod_resources()) + 2 * ("replicas" in self.what) + ("business" in self.what)
        return 2 * self._chunks(start, end, step * OWNER_STEPS) + queries * fine

    def _pod_resources(self) -> list[str]:
        """The per-pod queries `what` asks for ("requests" asks both *_request ones)."""
        return [r for r in POD_RESOURCES if r in self.what or (r.endswith("_request") and "requests" in self.what)]

    def _chunks(self, start: pd.Timestamp, end: pd.Timestamp, step: pd.Timedelta) -> int:
        points = (end - start) // step + 1
        return max(1, -(-points // self.settings.max_points))

    # --- HTTP ---------------------------------------------------------------------------------------
    def client(self) -> Any:
        if self._client is None:
            import requests
            from prometheus_api_client import PrometheusConnect
            from urllib3.util.retry import Retry

            s = self.settings
            headers = dict(s.headers)
            if s.bearer_token_file:
                try:
                    with open(s.bearer_token_file, encoding="utf-8") as fh:
                        headers["Authorization"] = f"Bearer {fh.read().strip()}"
                except OSError as exc:
                    raise InputError(f"bearer token file {s.bearer_token_file}: {exc.strerror}") from exc
            session = requests.Session()
            session.verify = s.ca_file if s.ca_file else s.tls_verify
            retry = Retry(total=s.retries, backoff_factor=s.backoff_seconds,
                          status_forcelist=[408, 429, 500, 502, 503, 504], allowed_methods=["GET", "POST"])
            self._client = PrometheusConnect(url=s.url.rstrip("/"), headers=headers or None, retry=retry,
                                             session=session, timeout=s.timeout_seconds)
        return self._client

    def _range(self, query: str, start: pd.Timestamp, end: pd.Timestamp, step: pd.Timedelta) -> list[dict]:
        """One logical range query, split into requests of at most `max_points` points."""
        import requests

        span = step * (self.settings.max_points - 1)
        out: list[dict] = []
        t = start
        while t <= end:
            stop = min(end, t + span)
            self.requests_made += 1
            try:
                out.extend(self.client().custom_query_range(
                    query, start_time=t.to_pydatetime(), end_time=stop.to_pydatetime(),
                    step=f"{int(step.total_seconds())}s"))
            except requests.exceptions.ConnectionError as exc:
                raise SourceError(f"cannot reach Prometheus at {self.settings.url} ({_reason(exc)}); "
                                  "check the URL and that Prometheus is running") from exc
            except requests.exceptions.Timeout as exc:
                raise SourceError(f"Prometheus at {self.settings.url} did not answer within "
                                  f"{self.settings.timeout_seconds:g} s; raise timeout_seconds or shorten the range") from exc
            except Exception as exc:
                # a 404, or a 200 that is not JSON, means the URL is some other web server (a proxy, a
                # Grafana, the /graph page): every query would fail alike, so stop with one line. Other
                # HTTP errors (a bad PromQL template: 400) stay per-query failures, reported by fetch.
                not_prometheus = _not_prometheus(exc)
                if not_prometheus:
                    raise SourceError(f"{self.settings.url} is not a Prometheus API ({not_prometheus} on "
                                      "/api/v1/query_range); give the base URL of Prometheus, such as "
                                      "http://prometheus.monitoring:9090") from exc
                raise
            if self.on_request is not None:
                self.on_request()
            t = stop + step
        return out

    # --- fetch --------------------------------------------------------------------------------------
    def fetch(self, start: pd.Timestamp | None, end: pd.Timestamp | None, step: pd.Timedelta) -> History:
        if start is None or end is None:
            raise InputError("the Prometheus source needs a time range: give --start/--end or --last")
        if end <= start:
            raise InputError(f"range end {end} is not after start {start}")
        start, end = start.floor(step), end.floor(step)
        failed: dict[str, str] = {}
        owners = self._owners(start, end, step, failed)
        frames = []
        for res in self._pod_resources():
            try:
                frames.append(self._pod_series(res, start, end, step, owners))
            except SourceError:
                raise
            except Exception as exc:  # noqa: BLE001 - one failing query is reported, others kept
                failed[res] = f"{type(exc).__name__}: {exc}"
                log.error("query for %s failed: %s", res, exc)
        if "replicas" in self.what:
            frames.append(self._replicas(start, end, step, failed))
        if "business" in self.what:
            try:
                frames.append(self._pod_series("business", start, end, step, owners))
            except SourceError:
                raise
            except Exception as exc:  # noqa: BLE001
                failed["business"] = f"{type(exc).__name__}: {exc}"
        frames = [f for f in frames if len(f)]
        if not frames:
            hist = History({}, step, failed=failed)
            return hist
        frame = _without_absurd(pd.concat(frames, ignore_index=True), self.settings.url)
        hist = regularize(validate_long(frame, f"Prometheus {self.settings.url}", allow_negative=True, parquet=True), step)
        hist.failed = failed
        return hist

    def _owners(self, start: pd.Timestamp, end: pd.Timestamp, step: pd.Timedelta,
                failed: dict[str, str]) -> dict[tuple[str, str], tuple[str, str]]:
        """(namespace, pod) -> (kind, name) of the owning workload."""
        rs_owner: dict[tuple[str, str], tuple[str, str]] = {}
        for r in self._range(self.settings.query("replicaset_owner"), start, end, step * OWNER_STEPS):
            m = r["metric"]
            if m.get("owner_kind") and m.get("owner_name") and m.get("owner_kind") != "<none>":
                rs_owner[(m.get("namespace", ""), m.get("replicaset", ""))] = (m["owner_kind"], m["owner_name"])
        owners: dict[tuple[str, str], tuple[str, str]] = {}
        for r in self._range(self.settings.query("pod_owner"), start, end, step * OWNER_STEPS):
            m = r["metric"]
            ns, pod, kind, name = m.get("namespace", ""), m.get("pod", ""), m.get("owner_kind", ""), m.get("owner_name", "")
            if kind == "ReplicaSet":
                kind, name = rs_owner.get((ns, name), (kind, name))
            if kind and name and kind != "<none>":
                owners[(ns, pod)] = (kind, name)
        if not owners:
            failed["owners"] = "no kube_pod_owner series: pods are reported under kind Pod (is kube-state-metrics scraped?)"
            log.warning(failed["owners"])
        return owners

    def _pod_series(self, res: str, start: pd.Timestamp, end: pd.Timestamp, step: pd.Timedelta,
                    owners: dict[tuple[str, str], tuple[str, str]]) -> pd.DataFrame:
        name = self.settings.business_name if res == "business" else res
        labels: list[tuple[str, str, str, str]] = []
        arrays: list[np.ndarray] = []
        for r in self._range(self.settings.query(res), start, end, step):
            m = r["metric"]
            ns, pod = m.get("namespace", ""), m.get("pod", "")
            if "pod" in m:
                kind, wl = owners.get((ns, pod), ("Pod", pod))
            elif "deployment" in m or "statefulset" in m:
                kind = "Deployment" if "deployment" in m else "StatefulSet"
                wl = m.get("deployment") or m.get("statefulset", "")
            else:
                continue
            container = m.get("container") or WORKLOAD_CONTAINER
            labels.append((ns, kind, wl, container))
            arrays.append(np.asarray(r["values"], dtype=float))
        if not arrays:
            return pd.DataFrame()
        # one frame for all pods: a frame per pod cost ~1.5 ms each, most of a short range's fetch
        lengths = [len(v) for v in arrays]
        vals = np.concatenate(arrays)
        df = pd.DataFrame({col: np.repeat(np.array([lab[i] for lab in labels], dtype=object), lengths)
                           for i, col in enumerate(("namespace", "kind", "workload", "container"))}
                          | {"ts": vals[:, 0], "value": vals[:, 1]})
        df = df[np.isfinite(df["value"])]
        agg = df.groupby(["namespace", "kind", "workload", "container", "ts"], sort=False)["value"].agg(self.settings.aggregate)
        df = agg.reset_index()
        return _to_long(df, name)

    def _replicas(self, start: pd.Timestamp, end: pd.Timestamp, step: pd.Timedelta, failed: dict[str, str]) -> pd.DataFrame:
        parts = []
        for q, kind, label in (("replicas_deployment", "Deployment", "deployment"),
                               ("replicas_statefulset", "StatefulSet", "statefulset")):
            try:
                for r in self._range(self.settings.query(q), start, end, step):
                    m = r["metric"]
                    vals = np.asarray(r["values"], dtype=float)
                    parts.append(pd.DataFrame({"namespace": m.get("namespace", ""), "kind": kind,
                                               "workload": m.get(label, ""), "container": WORKLOAD_CONTAINER,
                                               "ts": vals[:, 0], "value": vals[:, 1]}))
            except SourceError:
                raise
            except Exception as exc:  # noqa: BLE001
                failed[q] = f"{type(exc).__name__}: {exc}"
        return _to_long(pd.concat(parts, ignore_index=True), "replicas") if parts else pd.DataFrame()


def _to_long(df: pd.DataFrame, resource: str) -> pd.DataFrame:
    keys = [SeriesKey(n, k, w, c, resource).id for n, k, w, c in
            zip(df["namespace"], df["kind"], df["workload"], df["container"])]
    return pd.DataFrame({
        "series": keys,
        # Prometheus returns float epoch seconds; nanoseconds whatever pandas would pick
        "timestamp": epoch_to_utc(df["ts"].to_numpy(dtype="float64"), unit="s"),
        "value": df["value"].to_numpy(),
        "namespace": df["namespace"].to_numpy(), "kind": df["kind"].to_numpy(),
        "workload": df["workload"].to_numpy(), "container": df["container"].to_numpy(), "resource": resource,
    })


def _without_absurd(frame: pd.DataFrame, url: str) -> pd.DataFrame:
    """The samples past their unit's bound (`predictor.value_scale`: an exporter's glitch, 1e300 cores)
    left out as gaps, as non-finite ones are, with a warning: a file is refused for them, but one bad
    sample must not stop the fleet's fetch, nor reach a decision."""
    ids = pd.Categorical(frame["series"])
    values = frame["value"].to_numpy(dtype=float)
    bad = value_scale.over_bounds(ids.codes, values, value_scale.bounds(np.asarray(ids.categories, dtype=object)))
    if bad is None:
        return frame
    key, at = str(frame["series"].iloc[bad[0]]), pd.Timestamp(frame["timestamp"].iloc[bad[0]])
    log.warning("Prometheus %s: %d sample(s) left out as gaps, e.g. series %s at %s: %s", url, len(bad), key,
                at.isoformat(), value_scale.problem(key, values[bad[0]]))
    return frame.drop(index=frame.index[bad])


def _not_prometheus(exc: Exception) -> str | None:
    """Why `exc` shows that the server is not Prometheus ("HTTP 404", "a non-JSON answer"), or None."""
    import json

    text = str(exc)
    if text.startswith("HTTP Status Code 404"):  # prometheus_api_client's PrometheusApiClientException
        return "HTTP 404"
    if isinstance(exc, json.JSONDecodeError) or type(exc).__name__ == "JSONDecodeError":
        return "a non-JSON answer"
    return None


def _reason(exc: Exception) -> str:
    text = str(exc)
    for hint in ("Connection refused", "Name or service not known", "timed out", "No route to host"):
        if hint in text:
            return hint.lower()
    return type(exc).__name__
