"""Reclaimable resources: exact integer arithmetic, floor at zero, dead-band and step limit."""
import numpy as np

from autoscaler.logic.reclaim import plan_node, reclaimable, smooth, split_numa
from autoscaler.settings import ReclaimSettings
from contracts.reclaim import ReclaimPlan

GIB = 2**30


def settings(**kw):
    base = dict(reserved_millicpu=1000, reserved_memory_bytes=2 * GIB, margin_fraction=0.05, deadband_millicpu=200,
                deadband_memory_bytes=256 * 2**20, max_step_fraction=1.0)
    base.update(kw)
    return ReclaimSettings(**base)


def test_reclaimable_is_allocatable_minus_reserved_demand_and_margin_exactly():
    s = settings()
    cpu = np.array([10.0, 12.3456, 11.0])  # cores: the peak 12.3456 -> 12346 millicpu (rounded up)
    mem = np.array([40 * GIB, 41 * GIB + 1, 39 * GIB], dtype=float)
    p = plan_node("n1", 32000, 128 * GIB, cpu, mem, s, "2026-01-01T00:00:00Z", 3600)
    assert p.reclaimed_millicpu == 32000 - 1000 - 12346 - 1600
    assert p.reclaimed_memory_bytes == 128 * GIB - 2 * GIB - (41 * GIB + 1) - int(np.ceil(128 * GIB * 0.05))
    assert isinstance(p.reclaimed_millicpu, int) and isinstance(p.reclaimed_memory_bytes, int)
    assert p.shared_demand_millicpu == 12346


def test_floored_at_zero_when_online_demand_exceeds_the_node():
    p = plan_node("n1", 8000, 16 * GIB, np.array([20.0]), np.array([30.0 * GIB]), settings(), "t", 3600)
    assert (p.reclaimed_millicpu, p.reclaimed_memory_bytes) == (0, 0)
    assert reclaimable(100, 50, 80, 10) == 0


def test_deadband_and_step_limit():
    assert smooth(10000, 10150, 200, 5000) == (10000, "inside the dead-band (150 < 200): kept 10000")
    assert smooth(10000, 20000, 200, 3000)[0] == 13000  # increases climb by the step limit
    assert smooth(10000, 1000, 200, 3000) == (1000, None)  # decreases are immediate
    prev = ReclaimPlan("n1", "t", 3600, 10000, 50 * GIB)
    p = plan_node("n1", 32000, 128 * GIB, np.array([20.0]), np.array([40.0 * GIB]), settings(), "t", 3600, prev)
    assert p.reclaimed_millicpu == 32000 - 1000 - 20000 - 1600 == 9400  # a drop of 600 > dead-band: published


def test_numa_split_is_exact():
    parts = split_numa(10001, 4)
    assert sum(parts.values()) == 10001 and max(parts.values()) - min(parts.values()) <= 1
    p = plan_node("n1", 32000, 128 * GIB, np.array([5.0]), np.array([GIB * 1.0]), settings(), "t", 3600, numa_nodes=2)
    assert sum(n.millicpu for n in p.numa.values()) == p.reclaimed_millicpu
    assert sum(n.memory_bytes for n in p.numa.values()) == p.reclaimed_memory_bytes


def test_non_finite_demand_is_refused():
    import pytest

    with pytest.raises(ValueError):
        plan_node("n1", 32000, GIB, np.array([np.nan]), np.array([1.0]), settings(), "t", 3600)
