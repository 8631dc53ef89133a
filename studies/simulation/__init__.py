"""The offline simulators, one folder per study over one shared harness.

`harness` (trace loading, the cluster built from them, the batch queue, the rolling-origin forecast
and its cache, the settings sweep, outputs and the report page's common parts), then one folder per
study: `colocation` (issue 6, `tidewise simulate colocation`: docs/colocation-simulator.md), `tide`
(issue 17, `tidewise simulate tide`: docs/tide-simulator.md) and `rebalance` (`tidewise simulate
rebalance`: docs/rebalance.md). A study imports the harness, never another study.
"""
