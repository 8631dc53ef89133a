"""Offline studies: what Tidewise would have decided, measured away from any cluster.

`simulation` (the colocation simulator behind `tidewise simulate colocation`), `replay` (VPA/HPA
decisions replayed on a recorded history, and their scores, behind `tidewise replay`) and `demo`
(one offline run of the serving loop over a synthetic cluster, behind `tidewise demo`). The
decisions come from the serving package's pure logic (`autoscaler.logic`); this package only
drives and scores them. Nothing on the serving path imports it (tests/test_layout.py).
"""
