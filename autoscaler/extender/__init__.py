"""`tidewise extender`: a kube-scheduler extender (filter and prioritize) that places reclaimed
(batch) pods where reclaimable resources fit and last, NUMA-bound dedicated pods where a whole NUMA
node is free, and every pod where the node's forecast leaves room. See docs/scheduler-extender.md."""
