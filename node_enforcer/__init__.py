"""The Tidewise node agent (docs/node-enforcer.md), split collect -> policy -> enforce:

- `model`: the data the three share (`topology`: cores, NUMA nodes, cpu lists; `pod`; `qos`: the
  Katalyst annotations read into a `QosSpec`; `pressure`: a memory-pressure reading);
- `collect`: `topology` (sysfs), `pods` (kubelet, API server or a file), `qos` (resolution, each
  malformed annotation logged once), `reclaim` (the serving loop's plan, refused when stale),
  `pressure` (/proc/meminfo, memory and I/O PSI), `devices` (/sys/block);
- `policy` (pure, imports neither `collect` nor `enforce`): `plan` (topology + pods + reclaim plan
  -> `CpuAllocation`, built on `cores`), `eviction` (whether to evict under pressure, and whom),
  `isolation` (disk I/O in `io`, batch egress classes in `network`, the reclaimed root's memory),
  `topology_report` (the Katalyst CustomNodeResource status);
- `enforce`: `files` (the filesystem port the drivers read through and every write goes through),
  `cgroups` (v1/v2 drivers, cgroupfs/systemd paths), `apply` (write only what differs), `checkpoint`,
  `evictor` (rate limit, then the Eviction API through the thin Kubernetes wrapper in `kube`),
  `isolation` (I/O, net-class and reclaimed-root files), `tc` (the HTB tree), `cnr` (the report);
- `agent` runs the reconcile loop as a fixed list of named, timed steps; `settings` is its
  `enforcer:` section, with the policy's and the eviction's settings nested.

It imports the shared vocabulary in `contracts` only, never `predictor`, `autoscaler` or `training`,
and keeps its import cost small (the agent runs on every node): `kubernetes` is imported only when
the API is used.
"""
