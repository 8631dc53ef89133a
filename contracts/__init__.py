"""The vocabulary both halves of Tidewise speak: the serving side (`autoscaler`, `predictor`) and the
per-node agent (`node_enforcer`).

Standard library only (tests/test_layout.py checks it): the node agent imports it without paying
for numpy or pandas (its memory budget is 80 MiB), and a name defined here is defined once.

- `errors`: the root of the user-facing error tree (`TidewiseError`, `InputError`, `SourceError`);
- `kube_errors`: the Kubernetes API error classes (not found, conflict, too many requests, forbidden);
- `quantity`: Kubernetes resource quantities, parsed and printed exactly (Decimal);
- `durations`: the duration grammar (`24h`, `1h30m`) and its limits, as seconds;
- `qos`: Katalyst QoS levels, annotation keys, the reclaimed extended resource names and the one
  fail-closed reading of a pod's QoS annotations (`parse_qos`);
- `eviction_markers`: the pod markers that refuse an eviction (`safe-to-evict`, `tidewise.io/evict`,
  local storage), read alike by serve and the node agent;
- `reclaim`: the reclaim plan serve publishes and the agent enforces, and its annotation schema.
- `annotations`: every `tidewise.io/` annotation key, defined once;
- `atomic`: safe output paths and atomic file writes (temp file, fsync, rename), for serve's
  outputs, the predictor's files and the agent's checkpoint alike.
"""
