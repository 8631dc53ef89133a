"""Colocation simulator (issue 6): see docs/colocation-simulator.md."""
