"""The node agent's own thin wrapper over the official `kubernetes` client: list this node's pods,
read its own Node's annotations (the reclaim plan) and evict a pod through the Eviction API. Nothing else in `node_enforcer` touches the client, and
`kubernetes` is imported only when a `KubeApi` is made (the agent with `--pods-from file` never
loads it). Errors map to the small tree of `contracts.kube_errors`: NotFound, Conflict, TooManyRequests (a
PodDisruptionBudget refused the eviction), Forbidden.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from contracts.kube_errors import KubeError, error_for_status
from node_enforcer.collect.pods import pods_from_objects
from node_enforcer.model.pod import Pod

log = logging.getLogger(__name__)


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


class KubeApi:
    """`api_client` is injectable (tests point one at a local HTTP fake); by default the in-cluster
    service account is used, or the kubeconfig when not in a cluster."""

    def __init__(self, api_client: Any = None, kubeconfig: str | None = None) -> None:
        from kubernetes import client, config

        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config(config_file=kubeconfig)
            api_client = client.ApiClient()
        self._core = client.CoreV1Api(api_client)

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

    def eviction_body(self, namespace: str, name: str, dry_run: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": namespace}}
        if dry_run:
            body["deleteOptions"] = {"dryRun": ["All"]}
        return body

    def evict(self, namespace: str, name: str, dry_run: bool = True) -> None:
        """POST an Eviction (policy/v1); with `dry_run` the API server checks it and changes nothing."""
        body = self.eviction_body(namespace, name, dry_run)
        try:
            self._core.create_namespaced_pod_eviction(name, namespace, body,  # type: ignore[arg-type]  # a dict serialises as is
                                                      dry_run="All" if dry_run else None, _request_timeout=10)
        except Exception as exc:
            raise _mapped(exc, f"evict {namespace}/{name}") from exc
