"""The studies package's shape: its modules import each other without a cycle (function-level
imports included, since a lazy import is how a cycle hides), and the shared page helper has one home."""
import ast
import os

from tests.conftest import ROOT


def module_imports(package: str) -> dict[str, set[str]]:
    """Every module of `package` -> the modules of the same package it imports, at any depth."""
    graph: dict[str, set[str]] = {}
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(folder, f)
            name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
            tree = ast.parse(open(path, encoding="utf-8").read(), path)
            found = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.add(node.module)
                elif isinstance(node, ast.Import):
                    found.update(a.name for a in node.names)
            graph[name] = {m for m in found if m.split(".")[0] == package and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_cycle_finder_sees_a_lazy_two_module_cycle():
    assert cycles({"p.a": {"p.b"}, "p.b": {"p.a"}}) == [["p.a", "p.b", "p.a"]]
    assert cycles({"p.a": {"p.b"}, "p.b": set()}) == []


def test_studies_modules_import_each_other_without_a_cycle():
    graph = module_imports("studies")
    assert "studies.simulation.colocation.report" in graph and "studies.simulation.colocation.runner" in graph
    assert cycles(graph) == []


def test_one_page_helper():
    """HTML pages share reports/pages.py (the style, the frame, embedded figures): no second CSS."""
    defining = []
    for pkg in ("reports", "training", "studies", "autoscaler"):
        for folder, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(folder, f)
                    tree = ast.parse(open(path, encoding="utf-8").read(), path)
                    if any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "CSS" for t in n.targets)
                           for n in tree.body):
                        defining.append(os.path.relpath(path, ROOT))
    assert defining == [os.path.join("reports", "pages.py")]
