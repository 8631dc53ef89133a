"""The pure rebalance choice (`autoscaler/logic/rebalance.py`): hot by forecast peak, pods taken
until the target, only to a node with room under its low threshold, QoS order, owner and run
limits, disruption budgets, and a reason for every pod on a hot node that stays."""
from __future__ import annotations

import numpy as np
import pytest

from autoscaler.logic.rebalance import Candidate, NodeLoad, plan_rebalance
from autoscaler.settings import RebalanceSettings

GIB = 2.0**30
STEPS = 24


def pod(name: str, cores: float | list[float], qos: str = "shared_cores", owner: str | None = None,
        blocked: str | None = None, budget: str | None = None, gib: float = 1.0) -> Candidate:
    cpu = np.full(STEPS, cores) if np.isscalar(cores) else np.asarray(cores, dtype=float)
    return Candidate("ns", name, owner if owner is not None else f"ns/Deployment/{name}", qos, cpu,
                     np.full(STEPS, gib * GIB), blocked, budget)


def node(name: str, pods: list[Candidate], cores: float = 10.0, accepts: bool = True) -> NodeLoad:
    return NodeLoad(name, cores, 64 * GIB, pods, accepts)


def test_a_hot_node_sheds_pods_until_under_target_and_only_as_many_as_needed():
    hot = node("hot", [pod("a", 3.0), pod("b", 3.0), pod("c", 3.0)])  # 0.9 > 0.8
    cool = node("cool", [pod("d", 1.0)], cores=20.0)
    plan = plan_rebalance([hot, cool], RebalanceSettings(), STEPS)
    assert list(plan.hot) == ["hot"] and "CPU peak 0.90" in plan.hot["hot"]
    assert [(m.pod, m.destination) for m in plan.moves] == [("a", "cool")]  # 0.6 <= target 0.7: one is enough
    assert set(plan.kept) == {"hot ns/b", "hot ns/c"}
    assert all(why.startswith("not needed") for why in plan.kept.values())
    assert "0.90->0.60" in plan.moves[0].reason


def test_the_forecast_peak_not_todays_level_makes_a_node_hot():
    """Two pods whose peaks fall at different hours do not add up to a hot node; in step they do."""
    rise, fall = [1.0] * 12 + [5.0] * 12, [5.0] * 12 + [1.0] * 12
    apart = plan_rebalance([node("n", [pod("a", rise), pod("b", fall)]), node("m", [], 20.0)],
                           RebalanceSettings(), STEPS)
    together = plan_rebalance([node("n", [pod("a", rise), pod("b", rise)]), node("m", [], 20.0)],
                              RebalanceSettings(), STEPS)
    assert apart.hot == {} and apart.moves == []
    assert list(together.hot) == ["n"] and len(together.moves) == 1


def test_no_move_without_a_destination_that_stays_under_its_fill_level():
    hot = node("hot", [pod("a", 4.5), pod("b", 4.5)])
    warm = node("warm", [pod("c", 5.0)])  # 0.5 + 0.45 = 0.95: over the target 0.7
    plan = plan_rebalance([hot, warm], RebalanceSettings(), STEPS)
    assert plan.moves == []
    assert plan.kept["hot ns/a"] == "no other node keeps its forecast peak under CPU 0.70 / memory 0.80 (target) with it"


def test_fill_to_low_keeps_destinations_cool():
    hot = node("hot", [pod("a", 4.5), pod("b", 4.5)])
    mild = node("mild", [pod("c", 2.0)])  # 0.2 + 0.45 = 0.65: under the target 0.7, over low 0.6
    to_target = plan_rebalance([hot, mild], RebalanceSettings(), STEPS)
    to_low = plan_rebalance([hot, mild], RebalanceSettings(fill_to="low"), STEPS)
    assert [m.destination for m in to_target.moves] == ["mild"]
    assert to_low.moves == [] and "under CPU 0.60 / memory 0.70 (low)" in to_low.kept["hot ns/a"]


def test_a_cordoned_node_is_no_destination():
    plan = plan_rebalance([node("hot", [pod("a", 9.0)]), node("empty", [], 20.0, accepts=False)],
                          RebalanceSettings(), STEPS)
    assert plan.moves == [] and "no other node" in plan.kept["hot ns/a"]


def test_reclaimed_before_shared_and_never_dedicated_or_blocked():
    pods = [pod("dedicated", 4.0, qos="dedicated_cores"), pod("sys", 3.0, blocked="system pod"),
            pod("shared", 2.0), pod("batch", 0.5, qos="reclaimed_cores")]
    plan = plan_rebalance([node("hot", pods), node("cool", [], 40.0)], RebalanceSettings(max_per_run=2), STEPS)
    assert [m.pod for m in plan.moves] == ["batch", "shared"]
    assert plan.kept["hot ns/dedicated"] == "dedicated_cores pod"
    assert plan.kept["hot ns/sys"] == "system pod"


def test_owner_and_run_limits_and_exhausted_budgets_are_reasons():
    pods = [pod("web-1", 3.0, owner="ns/Deployment/web"), pod("web-2", 3.0, owner="ns/Deployment/web"),
            pod("db", 3.0, budget="ns/db-pdb"), pod("q", 2.9)]
    plan = plan_rebalance([node("hot", pods, cores=12.0), node("cool", [], 60.0)],
                          RebalanceSettings(target_cpu=0.1, max_per_run=2), STEPS, budgets={"ns/db-pdb": 0})
    assert [m.pod for m in plan.moves] == ["web-1", "q"]
    assert "per workload" in plan.kept["hot ns/web-2"]
    assert plan.kept["hot ns/db"] == "disruption budget ns/db-pdb allows no more disruptions"
    run_cap = plan_rebalance([node("hot", pods, cores=12.0), node("cool", [], 60.0)],
                             RebalanceSettings(target_cpu=0.1, max_per_run=1), STEPS, budgets={"ns/db-pdb": 5})
    assert [m.pod for m in run_cap.moves] == ["db"]  # equal shares of the peak: by name
    assert run_cap.kept["hot ns/web-1"] == "limit of 1 moves a run reached"


def test_a_budget_is_spent_by_the_moves_planned_before():
    pods = [pod("a", 3.0, budget="ns/pdb"), pod("b", 3.0, budget="ns/pdb")]
    plan = plan_rebalance([node("hot", pods, cores=6.5), node("cool", [], 60.0)],
                          RebalanceSettings(target_cpu=0.1), STEPS, budgets={"ns/pdb": 1})
    assert [m.pod for m in plan.moves] == ["a"]
    assert plan.kept["hot ns/b"] == "disruption budget ns/pdb allows no more disruptions"


def test_memory_alone_can_make_a_node_hot():
    pods = [pod("a", 0.1, gib=30.0), pod("b", 0.1, gib=30.0)]  # 60 of 64 GiB = 0.94 > 0.9
    plan = plan_rebalance([node("hot", pods), node("cool", [], 20.0)], RebalanceSettings(), STEPS)
    assert "memory peak 0.94" in plan.hot["hot"] and len(plan.moves) == 1


@pytest.mark.parametrize("field,value", [("low_cpu", 0.9), ("target_memory", 0.95), ("high_cpu", 1.5),
                                         ("quantile", 1.0), ("fill_to", "high")])
def test_thresholds_out_of_order_are_refused(field, value):
    with pytest.raises(ValueError, match=field.split("_")[0]):
        RebalanceSettings(**{field: value}).check()
