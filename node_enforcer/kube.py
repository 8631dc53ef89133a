"""The node agent's own thin wrapper over the official `kubernetes` client: list this node's pods,
read its own Node's annotations (the reclaim plan), evict a pod through the Eviction API, and
read/create its Katalyst CustomNodeResource and patch its status (the topology report). Nothing else in `node_enforcer` touches the client, and
`kubernetes` is imported only when a `KubeApi` is made (the agent with `--pods-from file` never
loads it). Errors map to the small tree of `contracts.kube_errors`: NotFound, Conflict, TooManyRequests (a
PodDisruptionBudget refused the eviction), Forbidden.

Own node only: a `KubeApi` is bound to the agent's Node (`node=`) and refuses, before any request,
to evict a pod whose `spec.nodeName` is another node's (or none) and to create or patch another
node's CustomNodeResource (`Forbidden`, never sent). Evictions also carry the pod's uid as a
precondition, so a pod of the same name created elsewhere since it was read is not the one evicted.
The API server enforces the same with the ValidatingAdmissionPolicies of
deploy/enforcer-daemonset.yaml (docs/node-enforcer.md, "Own node only").

In the loop the agent watches instead of listing (`pods_informer`, `node_informer`: a
`contracts.informer.Informer` per kind, list once then watch from its resourceVersion), so a quiet
node costs the API server two idle connections rather than a list and a get every few seconds.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Callable, Generic, Iterator, TypeVar

from contracts.informer import Gone, Informer, answered
from contracts.kube_errors import Forbidden, KubeError, NotFound, error_for_status
from node_enforcer.collect.pods import pods_from_objects
from node_enforcer.model.pod import Pod

log = logging.getLogger(__name__)
T = TypeVar("T")
CNR_GROUP, CNR_VERSION, CNR_PLURAL = "node.katalyst.kubewharf.io", "v1alpha1", "customnoderesources"
WATCH_SECONDS = 300  # the server ends each watch after 5 min; the informer resumes from where it was


def _mapped(exc: Exception, what: str) -> KubeError:
    status = int(getattr(exc, "status", 0) or 0)
    reason = getattr(exc, "reason", "") or str(exc)
    body = getattr(exc, "body", None)
    if body:
        try:
            reason = json.loads(body).get("message") or reason
        except (ValueError, AttributeError):
            pass
    return error_for_status(status, f"{what}: {status or ''} {reason}".strip())


class Watched(Generic[T]):
    """A reader for the agent's loop: calling it reads the informer's cache through `convert`. The
    informer starts on the first call, in the agent's step: an API server that is down at start-up
    fails that step (logged, retried next pass) instead of the agent's start."""

    def __init__(self, informer: Informer, convert: Callable[[list[dict[str, Any]]], T]) -> None:
        self.informer, self.convert = informer, convert
        self.started = False

    def __call__(self) -> T:
        if not self.started:
            self.informer.prime().start()
            self.started = True
        return self.convert(self.informer.items())

    def stop(self) -> None:
        self.informer.stop()


class KubeApi:
    """`api_client` is injectable (tests point one at a local HTTP fake); by default the in-cluster
    service account is used, or the kubeconfig when not in a cluster. `node` is the agent's own Node:
    the only one whose pods it evicts and whose CustomNodeResource it writes (None: it writes neither)."""

    def __init__(self, api_client: Any = None, kubeconfig: str | None = None, node: str | None = None) -> None:
        from kubernetes import client, config

        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config(config_file=kubeconfig)
            api_client = client.ApiClient()
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self.watch_seconds = WATCH_SECONDS
        self.node = node

    def _own_node(self, what: str, node: str | None) -> None:
        """Refuse, before any request, a write that concerns another node than this agent's."""
        if not self.node or node != self.node:
            raise Forbidden(f"{what}: refused by the agent: {'on node ' + repr(node) if node else 'on no node'}, "
                            f"not this agent's node {self.node!r} (an agent writes only its own node's objects)")

    def list_node_pods(self, node: str) -> list[Pod]:
        """This node's pods (`spec.nodeName` field selector), read as plain JSON."""
        try:
            resp = self._core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                                          _preload_content=False, _request_timeout=10)
            data = json.loads(resp.data)  # type: ignore[attr-defined]  # raw urllib3 response
        except Exception as exc:  # ApiException, urllib3 errors, bad JSON: one mapped error
            raise _mapped(exc, f"list pods of node {node}") from exc
        return pods_from_objects(data, node)

    def node_annotations(self, node: str) -> dict[str, str]:
        """This node's `metadata.annotations` (RBAC: `get` on nodes), read as plain JSON."""
        try:
            resp = self._core.read_node(node, _preload_content=False, _request_timeout=10)
            data = json.loads(resp.data)  # type: ignore[attr-defined]  # raw urllib3 response
            annotations = (data.get("metadata") or {}).get("annotations") or {}
        except Exception as exc:  # ApiException, urllib3 errors, bad JSON: one mapped error
            raise _mapped(exc, f"get node {node}") from exc
        return {str(k): str(v) for k, v in annotations.items()}

    # watches ------------------------------------------------------------------------------------
    def watched_pods(self, node: str) -> "Watched[list[Pod]]":
        """A pod lister for the agent's loop that lists once, then follows a watch."""
        return Watched(self.pods_informer(node), lambda items: pods_from_objects(items, node))

    def watched_annotations(self, node: str) -> "Watched[dict[str, str]]":
        """`node_annotations` for the loop, from a watch of this one Node."""

        def annotations(items: list[dict[str, Any]]) -> dict[str, str]:
            if not items:
                raise error_for_status(404, f"get node {node}: 404 not found")
            return {str(k): str(v) for k, v in ((items[0].get("metadata") or {}).get("annotations") or {}).items()}

        return Watched(self.node_informer(node), annotations)

    def pods_informer(self, node: str) -> Informer:
        """This node's pods, kept by a watch; `pods_from_objects(informer.items(), node)` reads them."""
        return self._informer(f"pods of node {node}", self._core.list_pod_for_all_namespaces,
                              f"spec.nodeName={node}")

    def node_informer(self, node: str) -> Informer:
        """This node's own Node object (its reclaim-plan annotation), kept by a watch."""
        return self._informer(f"node {node}", self._core.list_node, f"metadata.name={node}")

    def _informer(self, what: str, fn: Callable[..., Any], selector: str) -> Informer:
        return Informer(what, lambda: self._list(what, fn, selector),
                        lambda version, opened: self._watch(what, answered(fn, opened), selector, version))

    def _list(self, what: str, fn: Callable[..., Any], selector: str) -> tuple[list[dict[str, Any]], str]:
        try:
            resp = fn(field_selector=selector, _preload_content=False, _request_timeout=10)
            data = json.loads(resp.data)
        except Exception as exc:  # ApiException, urllib3 errors, bad JSON: one mapped error
            raise _mapped(exc, f"list {what}") from exc
        return list(data.get("items") or []), str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, what: str, fn: Callable[..., Any], selector: str, version: str) -> Iterator[dict[str, Any]]:
        from kubernetes import watch

        # return_type "object": events stay dicts (deserialize=False would skip the client's ERROR handling)
        stream = watch.Watch(return_type="object").stream(
            fn, field_selector=selector, resource_version=version, timeout_seconds=self.watch_seconds,
            allow_watch_bookmarks=True, _request_timeout=self.watch_seconds + 10)
        try:
            for event in stream:
                yield {"type": event["type"], "object": event["raw_object"]}
        except Exception as exc:  # noqa: BLE001 - 410 lists again, the rest resumes after a backoff
            err = _mapped(exc, f"watch {what}")
            raise (Gone(str(err)) if err.status == Gone.status else err) from exc

    def eviction_body(self, namespace: str, name: str, dry_run: bool, uid: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": namespace}}
        options: dict[str, Any] = {"dryRun": ["All"]} if dry_run else {}
        if uid:
            options["preconditions"] = {"uid": uid}  # this pod, not a namesake created elsewhere since (409)
        if options:
            body["deleteOptions"] = options
        return body

    def evict(self, namespace: str, name: str, dry_run: bool = True, node: str | None = None,
              uid: str | None = None) -> None:
        """POST an Eviction (policy/v1) of a pod on this agent's node: `node` is the pod's `spec.nodeName`
        as read (any other node, or none, is refused here, unsent), `uid` its uid (a precondition);
        with `dry_run` the API server checks it and changes nothing."""
        self._own_node(f"evict {namespace}/{name}", node)
        body = self.eviction_body(namespace, name, dry_run, uid)
        try:
            self._core.create_namespaced_pod_eviction(name, namespace, body,  # type: ignore[arg-type]  # a dict serialises as is
                                                      dry_run="All" if dry_run else None, _request_timeout=10)
        except Exception as exc:
            raise _mapped(exc, f"evict {namespace}/{name}") from exc

    def get_cnr(self, name: str) -> dict[str, Any] | None:
        """This node's CustomNodeResource (RBAC: `get customnoderesources`), None when there is none."""
        try:
            resp = self._custom.get_cluster_custom_object(CNR_GROUP, CNR_VERSION, CNR_PLURAL, name,
                                                          _preload_content=False, _request_timeout=10)
            return dict(json.loads(resp.data))  # type: ignore[attr-defined]  # raw urllib3 response
        except Exception as exc:
            err = _mapped(exc, f"get customnoderesource {name}")
            if isinstance(err, NotFound):
                return None
            raise err from exc

    def create_cnr(self, name: str) -> None:
        """An empty CustomNodeResource for this node (RBAC: `create customnoderesources`)."""
        self._own_node(f"create customnoderesource {name}", name)
        body = {"apiVersion": f"{CNR_GROUP}/{CNR_VERSION}", "kind": "CustomNodeResource",
                "metadata": {"name": name}, "spec": {}}
        try:
            self._custom.create_cluster_custom_object(CNR_GROUP, CNR_VERSION, CNR_PLURAL, body, _request_timeout=10)
        except Exception as exc:
            raise _mapped(exc, f"create customnoderesource {name}") from exc

    def patch_cnr_status(self, name: str, status: dict[str, Any]) -> None:
        """A merge patch of `status` (RBAC: `patch customnoderesources/status`); lists such as
        topologyZone are replaced whole. Only this agent's own node's."""
        self._own_node(f"patch customnoderesource {name} status", name)
        try:
            self._custom.patch_cluster_custom_object_status(CNR_GROUP, CNR_VERSION, CNR_PLURAL, name,
                                                            {"status": status}, _request_timeout=10)
        except Exception as exc:
            raise _mapped(exc, f"patch customnoderesource {name} status") from exc
