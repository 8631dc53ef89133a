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
# on a VPA: the share of 5-minute steps usage may exceed the request, a number in (0, 0.5]
BUDGET_ANNOTATION = "tidewise.io/violation-budget"

# written by serve
USER_MIN_ANNOTATION = "tidewise.io/user-min-replicas"  # on an HPA: the minReplicas the user had set
# on an HPA whose CPU target utilisation serve rewrites with the VPA's CPU request (scale point kept):
HPA_USER_TARGET_ANNOTATION = "tidewise.io/user-target-utilization"  # the averageUtilization the user had set
HPA_ANCHOR_ANNOTATION = "tidewise.io/scale-point-request"  # pod CPU request (millicpu) at Tidewise's first rewrite
REASON_ANNOTATION = "tidewise.io/reason"  # on a written object: why, in a line
PLAN_ANNOTATION = "tidewise.io/reclaim-plan"  # on a node: its reclaim plan (contracts/reclaim.py)
FORECAST_ANNOTATION = "tidewise.io/node-forecast"  # on a node: its forecast (contracts/node_forecast.py)
TIDE_MOVED_ANNOTATION = "tidewise.io/tide-moved-at"  # on a node: when the tide last moved it (dwell)
