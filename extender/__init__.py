"""`tidewise extender`: a kube-scheduler extender (filter and prioritize) that places reclaimed
(batch) pods where reclaimable resources fit and last, NUMA-bound dedicated pods where a whole NUMA
node is free, and every pod where the node's forecast leaves room. See docs/scheduler-extender.md.

A process of its own, apart from the serving loop: it imports `contracts`, `kubernetes`,
`prometheus_client` and the standard library only (tests/test_layout.py), never numpy or pandas.
The Kubernetes wrapper it watches through is handed in by the command (`tidewise/commands/extender.py`).
"""
