"""The one thin wrapper over the official `kubernetes` client that the serving loop talks through.

Everything returns and takes plain dicts in API form (camelCase): lists are read raw
(`_preload_content=False`) and parsed with `json`, which is several times faster than the client's
model objects and gives the same shape as `--cluster-state` files. Errors map to the small tree in
`contracts.kube_errors` (`NotFound`, `Conflict`, `TooManyRequests`, `Forbidden`, else `KubeError`); 429 answers are retried
after the server's Retry-After (or an exponential backoff), at most `max_retries` times.
Patches are JSON merge patches (RFC 7386), sent with that content type explicitly: the client
would otherwise pick json-patch for the core kinds.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Iterator

from contracts.informer import Gone, ListFn, WatchFn, answered
from contracts.kube_errors import KubeError, TooManyRequests, error_for_status
# the tree is shared with the node agent; re-exported here for the callers that import it from this module
from contracts.kube_errors import Conflict, Forbidden, NotFound  # noqa: F401

from autoscaler.kube_cluster import IHPA, MERGE_PATCH, SPD, TIDE_POOL, ClusterObjects

log = logging.getLogger(__name__)

VPA = ("autoscaling.k8s.io", "v1", "verticalpodautoscalers")
CNR = ("node.katalyst.kubewharf.io", "v1alpha1", "customnoderesources")
RESOURCE_RECOMMEND = ("recommendation.katalyst.kubewharf.io", "v1alpha1", "resourcerecommends")
PAGE = 500  # objects per list request: keeps each API server response small
WATCH_SECONDS = 300  # the server ends each watch after 5 min (kube's own default is 5-10 min); we resume


def _map(exc: Exception, what: str) -> KubeError:
    from kubernetes.client.exceptions import ApiException

    if not isinstance(exc, ApiException):
        return KubeError(f"{what}: {type(exc).__name__}: {exc}")
    status = int(exc.status or 0)
    detail = ""
    try:
        detail = json.loads(exc.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        detail = (exc.body or "")[:200] if isinstance(exc.body, str) else ""
    msg = f"{what}: HTTP {status} {exc.reason or ''} {detail}".strip()
    retry = None
    headers = exc.headers or {}
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        retry = float(raw) if raw is not None else None
    except ValueError:
        retry = None
    return error_for_status(status, msg, retry)


class Kube(ClusterObjects):
    """`Kube(api_client)`; build one with `Kube.from_config()` (in-cluster, else kubeconfig). Disruption
    budgets, evictions and the Katalyst cluster objects are in `autoscaler.kube_cluster`."""

    def __init__(self, api_client: Any, *, sleep: Callable[[float], None] = time.sleep, max_retries: int = 4,
                 backoff_seconds: float = 1.0, max_backoff_seconds: float = 30.0, request_timeout: float = 30.0):
        import urllib3
        from kubernetes import client
        from kubernetes.client import rest

        # 429 and Retry-After are handled here (counted, bounded, with an injectable sleep), so urllib3
        # must not retry on status by itself: it would sleep out of sight. Connection errors still retry.
        cfg = api_client.configuration
        cfg.retries = urllib3.Retry(total=3, connect=3, read=0, status=0, redirect=3,
                                    respect_retry_after_header=False, raise_on_status=False)
        api_client.rest_client = rest.RESTClientObject(cfg)
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.autoscaling = client.AutoscalingV2Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.sleep = sleep
        self.max_retries = max_retries
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.request_timeout = request_timeout
        self.backoffs: list[float] = []  # every 429 wait, for metrics and tests
        self.watch_seconds = WATCH_SECONDS

    @classmethod
    def from_config(cls, kubeconfig: str | None = None, context: str | None = None, **kw: Any) -> "Kube":
        from kubernetes import client, config

        try:
            if kubeconfig is None:
                try:
                    config.load_incluster_config()
                    return cls(client.ApiClient(), **kw)
                except config.ConfigException:
                    pass
            cfg = client.Configuration()
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
            return cls(client.ApiClient(cfg), **kw)
        except Exception as exc:  # noqa: BLE001 - any config failure is one clear line
            raise KubeError(f"no Kubernetes configuration: not in a cluster and kubeconfig "
                            f"{kubeconfig or '~/.kube/config'} failed ({exc}); pass --kubeconfig or --cluster-state") from exc

    # plumbing -----------------------------------------------------------------------------------
    def call(self, what: str, fn: Callable[..., Any], *args: Any, retries: int | None = None, **kw: Any) -> Any:
        """Call `fn` raw; parse the JSON body; map errors; back off and retry on 429 (at most `retries`
        times, `max_retries` by default; an eviction passes 0: its 429 is a disruption budget's no)."""
        retries = self.max_retries if retries is None else retries
        attempt = 0
        while True:
            try:
                resp = fn(*args, _preload_content=False, _request_timeout=self.request_timeout, **kw)
                data = resp.data
                return json.loads(data) if data else {}
            except Exception as exc:  # noqa: BLE001 - mapped below
                err = _map(exc, what)
                if not isinstance(err, TooManyRequests) or attempt >= retries:
                    raise err from exc
                wait = err.retry_after if err.retry_after is not None else self.backoff_seconds * 2**attempt
                wait = min(wait, self.max_backoff_seconds)
                self.backoffs.append(wait)
                log.warning("%s: too many requests, retrying in %.1f s (attempt %d)", what, wait, attempt + 1)
                self.sleep(wait)
                attempt += 1

    def _list(self, what: str, fn: Callable[..., Any], *args: Any) -> list[dict[str, Any]]:
        return self._list_versioned(what, fn, *args)[0]

    def _list_versioned(self, what: str, fn: Callable[..., Any], *args: Any) -> tuple[list[dict[str, Any]], str]:
        """All pages, and the list's resourceVersion (where a watch of the same objects starts)."""
        items: list[dict[str, Any]] = []
        token = None
        while True:
            kw: dict[str, Any] = {"limit": PAGE}
            if token:
                kw["_continue"] = token
            page = self.call(what, fn, *args, **kw)
            kind = (page.get("kind") or "").removesuffix("List")
            api_version = page.get("apiVersion")
            for item in page.get("items") or []:
                # list items carry no kind/apiVersion in the API; restore them so objects look alike
                item.setdefault("kind", kind)
                if api_version:
                    item.setdefault("apiVersion", api_version)
                items.append(item)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items, str((page.get("metadata") or {}).get("resourceVersion") or "")

    # reads --------------------------------------------------------------------------------------
    def list_kind(self, kind: str) -> list[dict[str, Any]]:
        """Every object of one kind the loop reads (`model.cluster.KINDS` and `OPTIONAL_KINDS`), all pages."""
        what, fn, args = self._readers()[kind]
        return self._list(f"list {what}", fn, *args)

    def watched(self, kind: str) -> tuple[ListFn, WatchFn]:
        """The list and watch callables of one kind that `contracts.informer.Informer` follows."""
        what, fn, args = self._readers()[kind]
        return ((lambda: self._list_versioned(what, fn, *args)),
                (lambda version, opened: self._watch(what, answered(fn, opened), version, *args)))

    def _readers(self) -> dict[str, tuple[str, Callable[..., Any], tuple[Any, ...]]]:
        return {
            "VerticalPodAutoscaler": ("verticalpodautoscalers", self.custom.list_cluster_custom_object, VPA),
            "HorizontalPodAutoscaler": ("horizontalpodautoscalers",
                                        self.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces, ()),
            "Deployment": ("deployments", self.apps.list_deployment_for_all_namespaces, ()),
            "StatefulSet": ("statefulsets", self.apps.list_stateful_set_for_all_namespaces, ()),
            "Pod": ("pods", self.core.list_pod_for_all_namespaces, ()),
            "Node": ("nodes", self.core.list_node, ()),
            "CustomNodeResource": ("customnoderesources", self.custom.list_cluster_custom_object, CNR),
            "PodDisruptionBudget": ("poddisruptionbudgets", self.policy.list_pod_disruption_budget_for_all_namespaces,
                                    ()),
            "ServiceProfileDescriptor": ("serviceprofiledescriptors", self.custom.list_cluster_custom_object, SPD),
            "IntelligentHorizontalPodAutoscaler": ("intelligenthorizontalpodautoscalers",
                                                   self.custom.list_cluster_custom_object, IHPA),
            "TideNodePool": ("tidenodepools", self.custom.list_cluster_custom_object, TIDE_POOL),
        }

    def _watch(self, what: str, fn: Callable[..., Any], version: str, *args: Any) -> Iterator[dict[str, Any]]:
        """Events of one watch stream from `version` until the server closes it (`watch_seconds`);
        410 is `Gone`, any other failure a mapped `KubeError`. Objects stay plain dicts."""
        from kubernetes import watch

        # return_type "object": events stay dicts (deserialize=False would skip the client's ERROR handling)
        stream = watch.Watch(return_type="object").stream(
            fn, *args, resource_version=version, timeout_seconds=self.watch_seconds, allow_watch_bookmarks=True,
            _request_timeout=self.watch_seconds + self.request_timeout)
        try:
            for event in stream:
                yield {"type": event["type"], "object": event["raw_object"]}
        except Exception as exc:  # noqa: BLE001 - mapped: 410 lists again, the rest resumes
            err = _map(exc, f"watch {what}")
            raise (Gone(str(err)) if err.status == Gone.status else err) from exc

    def get_hpa(self, namespace: str, name: str) -> dict[str, Any]:
        return self.call(f"get hpa {namespace}/{name}", self.autoscaling.read_namespaced_horizontal_pod_autoscaler,
                         name, namespace)

    def get_vpa(self, namespace: str, name: str) -> dict[str, Any]:
        g, v, p = VPA
        return self.call(f"get vpa {namespace}/{name}", self.custom.get_namespaced_custom_object, g, v, namespace, p, name)

    def get_node(self, name: str) -> dict[str, Any]:
        return self.call(f"get node {name}", self.core.read_node, name)

    # writes -------------------------------------------------------------------------------------
    def patch_vpa_status(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        g, v, p = VPA
        return self.call(f"patch vpa {namespace}/{name}/status", self.custom.patch_namespaced_custom_object_status,
                         g, v, namespace, p, name, body, _content_type=MERGE_PATCH)

    def patch_hpa(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.call(f"patch hpa {namespace}/{name}", self.autoscaling.patch_namespaced_horizontal_pod_autoscaler,
                         name, namespace, body, _content_type=MERGE_PATCH)

    def patch_node_status(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.call(f"patch node {name}/status", self.core.patch_node_status, name, body,
                         _content_type=MERGE_PATCH)

    def patch_node(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Metadata and spec (the reclaim-plan annotation; a tide node's labels and taints): RBAC `patch` on nodes."""
        return self.call(f"patch node {name}", self.core.patch_node, name, body, _content_type=MERGE_PATCH)

    def patch_cnr_status(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        g, v, p = CNR
        return self.call(f"patch customnoderesource {name}/status", self.custom.patch_cluster_custom_object_status,
                         g, v, p, name, body, _content_type=MERGE_PATCH)

    def patch_resource_recommend_status(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        g, v, p = RESOURCE_RECOMMEND
        return self.call(f"patch resourcerecommend {namespace}/{name}/status",
                         self.custom.patch_namespaced_custom_object_status, g, v, namespace, p, name, body,
                         _content_type=MERGE_PATCH)

    # leases (HA) --------------------------------------------------------------------------------
    def get_lease(self, namespace: str, name: str) -> dict[str, Any]:
        return self.call(f"get lease {namespace}/{name}", self.coordination.read_namespaced_lease, name, namespace)

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        from kubernetes.client import V1Lease

        return self.call(f"create lease {namespace}", self.coordination.create_namespaced_lease, namespace,
                         V1Lease.from_dict(body))

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT with the resourceVersion read: a lost race is a Conflict, never two leaders."""
        from kubernetes.client import V1Lease

        return self.call(f"replace lease {namespace}/{name}", self.coordination.replace_namespaced_lease, name,
                         namespace, V1Lease.from_dict(body))


