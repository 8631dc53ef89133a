"""The rebalancing study: hot nodes shed pods, reactive vs forecast (docs/rebalance.md)."""
