"""The Tidewise node agent (DESIGN.md, "Node enforcer"), split collect -> policy -> enforce:

- collect: `topology` (sysfs), `pods` + `qos` (kubelet, API server or a file), `pressure` (/proc);
- policy: `policy` (pure: topology + pods + reclaim plan -> `CpuAllocation`);
- enforce: `cgroups` (v1/v2 drivers, cgroupfs/systemd paths), `writers`, `enforce`, `checkpoint`,
  `eviction` (through the thin Kubernetes wrapper in `kube`);
- `agent` runs the reconcile loop as a fixed list of named, timed steps.

It imports `predictor` types only, never `autoscaler` or `training`, and keeps its import cost
small (the agent runs on every node): `kubernetes` is imported only when the API is used.
"""
