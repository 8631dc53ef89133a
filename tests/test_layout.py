"""DESIGN.md's import rules, checked on the source and on a real interpreter."""
import ast
import os
import subprocess
import sys

from tests.conftest import ROOT

FORBIDDEN = {
    "predictor": {"kubernetes", "autoscaler", "training", "node_enforcer", "tidewise", "studies"},
    "autoscaler": {"training", "node_enforcer", "studies"},
    "node_enforcer": {"training", "autoscaler", "studies"},
    "training": {"autoscaler", "node_enforcer", "kubernetes", "studies"},
    # offline studies drive the serving logic (autoscaler, predictor, training); nothing serving imports them
    "studies": {"node_enforcer", "tidewise"},
}


def imports_of(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module.split(".")[0]


def test_packages_respect_the_import_rules():
    bad = []
    for pkg, forbidden in FORBIDDEN.items():
        for folder, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(folder, f)
                    bad += [f"{os.path.relpath(path, ROOT)} imports {m}" for m in imports_of(path) if m in forbidden]
    assert not bad, bad


def test_forecast_command_never_loads_kubernetes():
    code = ("import sys\nfrom tidewise.cli import build_parser\nbuild_parser()\n"
            "import predictor.forecasting, predictor.sources.prometheus, predictor.profile\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'autoscaler', 'node_enforcer')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_models_folder_holds_only_gitkeep_in_git():
    r = subprocess.run(["git", "ls-files", "models"], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.split() in ([], ["models/.gitkeep"])
