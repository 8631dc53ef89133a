"""A compact builder of Kubernetes Pod objects (dicts, as the API server returns them) with the
Katalyst QoS annotations, for demos, benchmarks and tests; `make_pod` reads one back as a `Pod`."""
from __future__ import annotations

import json
from typing import Any

from node_enforcer.collect.pods import pod_from_object
from node_enforcer.model.pod import Pod

_counter = iter(range(1, 10**6))


def make_pod_obj(name: str, qos: str | None = None, cpu: str | None = None, memory: str | None = None,
                 limit_cpu: str | None = None, limit_memory: str | None = None, priority: int = 0,
                 cpu_enh: Any = None, mem_enh: Any = None, uid: str | None = None, ns: str = "default",
                 node: str = "n1", containers: int = 1, k8s_qos: str | None = None) -> dict[str, Any]:
    ann: dict[str, str] = {}
    if qos is not None:
        ann["katalyst.kubewharf.io/qos_level"] = qos
    for key, val in (("cpu_enhancement", cpu_enh), ("memory_enhancement", mem_enh)):
        if val is not None:
            ann[f"katalyst.kubewharf.io/{key}"] = val if isinstance(val, str) else json.dumps(val)
    uid = uid or f"00000000-0000-4000-8000-{next(_counter):012d}"
    res: dict[str, Any] = {}
    if cpu or memory:
        res["requests"] = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    if limit_cpu or limit_memory:
        res["limits"] = {k: v for k, v in (("cpu", limit_cpu), ("memory", limit_memory)) if v}
    cs = [{"name": f"c{i}", "resources": res} for i in range(containers)]
    status: dict[str, Any] = {"phase": "Running",
                              "containerStatuses": [{"name": f"c{i}", "containerID": f"containerd://{uid[-8:]}{i:02d}"}
                                                    for i in range(containers)]}
    if k8s_qos:
        status["qosClass"] = k8s_qos
    return {"metadata": {"name": name, "namespace": ns, "uid": uid, "annotations": ann},
            "spec": {"nodeName": node, "priority": priority, "containers": cs}, "status": status}


def make_pod(*args: Any, **kw: Any) -> Pod:
    return pod_from_object(make_pod_obj(*args, **kw))
