"""The policy: pure functions from what was collected to a plan; no I/O, no `collect` or `enforce`."""
