"""The colocation study (issue 6): batch placed beside online services, per policy (docs/colocation-simulator.md)."""
