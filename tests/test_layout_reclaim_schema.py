"""Issue 25 item 6's rule (tests/test_layout.py is at its 400 lines): one reclaim-plan schema. Every
reader outside `contracts/reclaim.py` takes the plan in the annotation's format (`plan_from_annotation`,
`plan_from_document`); none reads `ReclaimPlan.to_dict()` input (`plan_from_dict`, `ReclaimPlan.from_dict`),
the file format `enforce --reclaim-plan` once wanted and no command wrote."""
import ast
import os

from tests.conftest import ROOT
from tests.test_layout import python_files
from tests.test_layout_vocabulary import shipped

SCHEMA_HOME = os.path.join("contracts", "reclaim.py")
SECOND_FORMAT = {"plan_from_dict", "from_dict"}


def second_format_reads(path):
    """(line, name) of each use of a to_dict() reader: `plan_from_dict`, or `from_dict` on `ReclaimPlan`."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id == "plan_from_dict":
            out.append((n.lineno, n.id))
        elif isinstance(n, ast.Attribute) and n.attr in SECOND_FORMAT and (
                n.attr == "plan_from_dict" or (isinstance(n.value, ast.Name) and n.value.id == "ReclaimPlan")):
            out.append((n.lineno, n.attr))
        elif isinstance(n, ast.ImportFrom) and any(a.name == "plan_from_dict" for a in n.names):
            out.append((n.lineno, "import plan_from_dict"))
    return out


def test_second_format_reads_finds_imports_calls_and_the_classmethod(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from contracts.reclaim import ReclaimPlan, plan_from_dict\nimport contracts.reclaim as r\n"
                 "a = plan_from_dict({})\nb = ReclaimPlan.from_dict({})\nc = r.plan_from_dict({})\nd = x.from_dict({})\n")
    assert [line for line, _ in second_format_reads(str(f))] == [1, 3, 4, 5]


def test_no_shipped_module_reads_a_second_reclaim_plan_format():
    bad = [f"{os.path.relpath(path, ROOT)}:{line}: {name}" for pkg in shipped() for path in python_files(pkg)
           if os.path.relpath(path, ROOT) != SCHEMA_HOME for line, name in second_format_reads(path)]
    assert not bad, f"read the annotation's document (contracts.reclaim.plan_from_document) instead: {bad}"
