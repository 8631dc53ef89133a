"""Replay input and report for `tidewise replay`; the decisions themselves come from
`studies.replay.decisions` (the serving loop's VPA and HPA logic, the same code the serving
benchmark scores)."""
