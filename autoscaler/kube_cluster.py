"""The cluster-level calls of the serving side's Kubernetes wrapper: PodDisruptionBudgets and the
Eviction API (rebalancing, tidal node pools), and Katalyst's ServiceProfileDescriptor,
IntelligentHorizontalPodAutoscaler and TideNodePool objects. A mixin of `autoscaler.kube.Kube`,
kept apart so that each file stays one concern; every call goes through `Kube.call` (errors mapped,
429 retried)."""
from __future__ import annotations

from typing import Any, Callable

SPD = ("workload.katalyst.kubewharf.io", "v1alpha1", "serviceprofiledescriptors")
IHPA = ("autoscaling.katalyst.kubewharf.io", "v1alpha2", "intelligenthorizontalpodautoscalers")
TIDE_POOL = ("tide.katalyst.kubewharf.io", "v1alpha1", "tidenodepools")
MERGE_PATCH = "application/merge-patch+json"


class ClusterObjects:
    """Methods that need `self.call`, `self.core` and `self.custom` of `Kube` (lists go through `Kube.list_kind`)."""

    call: Callable[..., Any]
    core: Any
    custom: Any

    # disruption ---------------------------------------------------------------------------------
    def evict_pod(self, namespace: str, name: str, *, dry_run: bool = False) -> dict[str, Any]:
        """POST the pod's `eviction` subresource: the API server refuses (429, `TooManyRequests`) when a
        PodDisruptionBudget would be broken, which is why evictions, not deletes, move pods.
        `dry_run` asks the server to check without evicting (`dryRun=All`)."""
        from kubernetes.client import V1DeleteOptions, V1Eviction, V1ObjectMeta

        body = V1Eviction(metadata=V1ObjectMeta(name=name, namespace=namespace),
                          delete_options=V1DeleteOptions(dry_run=["All"]) if dry_run else None)
        kw = {"dry_run": "All"} if dry_run else {}
        return self.call(f"evict pod {namespace}/{name}", self.core.create_namespaced_pod_eviction, name, namespace,
                         body, retries=0, **kw)

    # Katalyst objects ---------------------------------------------------------------------------
    def create_spd(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        g, v, p = SPD
        return self.call(f"create serviceprofiledescriptor {namespace}/{body['metadata']['name']}",
                         self.custom.create_namespaced_custom_object, g, v, namespace, p, body)

    def patch_spd(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        g, v, p = SPD
        return self.call(f"patch serviceprofiledescriptor {namespace}/{name}", self.custom.patch_namespaced_custom_object,
                         g, v, namespace, p, name, body, _content_type=MERGE_PATCH)

    def patch_spd_status(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        g, v, p = SPD
        return self.call(f"patch serviceprofiledescriptor {namespace}/{name}/status",
                         self.custom.patch_namespaced_custom_object_status, g, v, namespace, p, name, body,
                         _content_type=MERGE_PATCH)

    def patch_ihpa_status(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        g, v, p = IHPA
        return self.call(f"patch intelligenthorizontalpodautoscaler {namespace}/{name}/status",
                         self.custom.patch_namespaced_custom_object_status, g, v, namespace, p, name, body,
                         _content_type=MERGE_PATCH)

    def patch_tide_pool_status(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        g, v, p = TIDE_POOL
        return self.call(f"patch tidenodepool {name}/status", self.custom.patch_cluster_custom_object_status,
                         g, v, p, name, body, _content_type=MERGE_PATCH)
