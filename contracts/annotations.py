"""Every `tidewise.io/...` key Tidewise reads or writes on a Kubernetes object, defined once.

Serve, the node agent and the scheduler extender read one another's annotations, and users set
some of them by hand (docs/); a key spelled twice drifts apart silently, so the layout test
(tests/test_layout.py) refuses a `tidewise.io/` string anywhere else in the shipped packages.
"""
from __future__ import annotations

PREFIX = "tidewise.io/"  # ours: annotations, and the scopes of the aggregated metrics on an SPD

# set by users (or the demo) on the objects Tidewise may manage
MANAGE_ANNOTATION = "tidewise.io/manage"  # "true" on a VPA/HPA selects it; any other value opts it out
EVICT_ANNOTATION = "tidewise.io/evict"  # any false word on a pod refuses its eviction (eviction_markers)
IO_ANNOTATION = "tidewise.io/io-limits"  # a pod's disk I/O limits, a JSON object (node agent)
DURATION_ANNOTATION = "tidewise.io/expected-duration"  # how long a pod runs, `2h` (scheduler extender)
NUMA_ANNOTATION = "tidewise.io/numa-nodes"  # a node's NUMA node count, when known

# written by serve
USER_MIN_ANNOTATION = "tidewise.io/user-min-replicas"  # on an HPA: the minReplicas the user had set
REASON_ANNOTATION = "tidewise.io/reason"  # on a written object: why, in a line
PLAN_ANNOTATION = "tidewise.io/reclaim-plan"  # on a node: its reclaim plan (contracts/reclaim.py)
FORECAST_ANNOTATION = "tidewise.io/node-forecast"  # on a node: its forecast (contracts/node_forecast.py)
TIDE_MOVED_ANNOTATION = "tidewise.io/tide-moved-at"  # on a node: when the tide last moved it (dwell)
