"""Layout rules of issue 24's serving side (kept out of tests/test_layout.py, which is at its 400-line
limit): the regime of a VPA container resource is read from the cluster in one place and decided in
one place, so no other serve path (or a replay that reuses it) can tell a different story."""
from __future__ import annotations

import ast
import os

from tests.conftest import ROOT

AUTOSCALER = os.path.join(ROOT, "autoscaler")


def _modules():
    for folder, _, files in os.walk(AUTOSCALER):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                with open(path, encoding="utf-8") as fh:
                    yield os.path.relpath(path, ROOT), ast.parse(fh.read(), path)


def _strings(tree: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _names(tree: ast.AST) -> set[str]:
    out = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    out |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    return out


def test_only_the_views_read_the_fields_a_regime_is_made_of():
    fields = {"resizePolicy", "updatePolicy", "updateMode"}
    readers = {path for path, tree in _modules() if _strings(tree) & fields}
    assert readers == {"autoscaler/model/views.py"}, readers


def test_only_logic_regime_decides_the_regime():
    users = {path for path, tree in _modules() if "resizes_in_place" in _names(tree)}
    assert users <= {"autoscaler/model/views.py", "autoscaler/logic/regime.py"}, users
    assert "autoscaler/logic/regime.py" in users


def test_only_routines_tidal_walks_a_budget_level_or_plans_a_day():
    """Serve's tidal requests (the hour-peak model at a budget level, the day plan) are made in one
    module, the one whose state the loop keeps between runs: a second maker would keep a second level."""
    users = {path for path, tree in _modules() if _names(tree) & {"BudgetLevel", "DayPlanner"}}
    assert users == {"autoscaler/routines/tidal.py"}, users
