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
    # a benchmark measures the shipped code; what it needs from tests moves into the package or benchmarks/
    "benchmarks": {"tests"},
}
# Inside the node agent, policy is pure (topology + pods + plan in, a plan out): it reads neither
# the collectors (/proc, the kubelet, the API) nor the enforcers (cgroup writes, evictions).
FORBIDDEN_INSIDE = {
    os.path.join("node_enforcer", "policy"): {"node_enforcer.collect", "node_enforcer.enforce"},
}
# the shared vocabulary both halves import: the node agent must not pay for numpy/pandas through it
STDLIB_ONLY = ("contracts",)


def imports_of(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module.split(".")[0]


def modules_of(path):
    """Full dotted names imported by a file, relative imports resolved against its package."""
    package = os.path.relpath(os.path.dirname(path), ROOT).split(os.sep)
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            yield module
            yield from (f"{module}.{a.name}" for a in node.names)  # `from node_enforcer import collect`


def python_files(folder):
    for here, _, files in os.walk(os.path.join(ROOT, folder)):
        yield from (os.path.join(here, f) for f in files if f.endswith(".py"))


def test_packages_respect_the_import_rules():
    bad = []
    for pkg, forbidden in FORBIDDEN.items():
        for path in python_files(pkg):
            bad += [f"{os.path.relpath(path, ROOT)} imports {m}" for m in imports_of(path) if m in forbidden]
    assert not bad, bad


def test_subpackages_respect_the_import_rules():
    """Holds trivially for a folder that does not exist (yet)."""
    bad = []
    for folder, forbidden in FORBIDDEN_INSIDE.items():
        for path in python_files(folder):
            bad += [f"{os.path.relpath(path, ROOT)} imports {m}" for m in modules_of(path)
                    if any(m == f or m.startswith(f + ".") for f in forbidden)]
    assert not bad, bad


def test_contracts_import_only_the_standard_library():
    assert os.path.isdir(os.path.join(ROOT, "contracts"))
    allowed = set(sys.stdlib_module_names) | set(STDLIB_ONLY)
    bad = [f"{os.path.relpath(path, ROOT)} imports {m}" for pkg in STDLIB_ONLY for path in python_files(pkg)
           for m in imports_of(path) if m not in allowed]
    assert not bad, bad


def loaded_packages(code, packages):
    """Which of `packages` a fresh interpreter has loaded after running `code`."""
    probe = f"{code}\nimport sys\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & {set(packages)!r}))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_forecast_command_never_loads_kubernetes():
    code = ("from tidewise.cli import build_parser\nbuild_parser()\n"
            "import predictor.forecasting, predictor.sources.prometheus, predictor.profile")
    assert loaded_packages(code, ("kubernetes", "autoscaler", "node_enforcer")) == "[]"


def test_contracts_load_neither_numpy_nor_pandas_nor_the_predictor():
    code = "import contracts.errors, contracts.kube_errors, contracts.qos, contracts.quantity, contracts.reclaim"
    assert loaded_packages(code, ("numpy", "pandas", "predictor", "kubernetes")) == "[]"


def test_models_folder_holds_only_gitkeep_in_git():
    r = subprocess.run(["git", "ls-files", "models"], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.split() in ([], ["models/.gitkeep"])
