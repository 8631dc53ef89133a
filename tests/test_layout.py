"""DESIGN.md's import rules, checked on the source and on a real interpreter."""
import ast
import os
import subprocess
import sys

from tests.conftest import ROOT

FORBIDDEN = {
    "predictor": {"kubernetes", "autoscaler", "training", "node_enforcer", "tidewise", "studies", "extender"},
    "autoscaler": {"training", "node_enforcer", "studies", "extender"},
    # the node agent shares only contracts/ with serve (issue 23): nothing of the predictor, not even helpers
    "node_enforcer": {"training", "autoscaler", "studies", "extender", "predictor"},
    "training": {"autoscaler", "node_enforcer", "kubernetes", "studies", "extender"},
    # offline studies drive the serving logic (autoscaler, predictor); nothing serving imports them, and
    # they import nothing from training (issue 23): the HTML page helper both share is in reports/
    "studies": {"node_enforcer", "tidewise", "training"},
    # presentation only (style, page frame, embedded figures): it knows no forecast and no decision
    "reports": {"contracts", "predictor", "training", "autoscaler", "node_enforcer", "tidewise", "studies",
                "kubernetes"},
    # a benchmark measures the shipped code; what it needs from tests moves into the package or benchmarks/
    "benchmarks": {"tests", "testsupport"},
}
# ... except benchmarks run against fakes of their surroundings (testsupport/: the API fake, the cgroup tree;
# the soak, issue 22: tests/'s Prometheus launcher): the environment measured in. File -> what it may import.
TEST_SUPPORT_USERS = {os.path.join("benchmarks", "soak.py"): {"tests"},
                      os.path.join("benchmarks", "soak_faults.py"): {"testsupport"},
                      os.path.join("benchmarks", "enforcer.py"): {"testsupport"}}
# issue 23 item 7: what tests stand on is one package, never shipped (tests/integration/test_wheel.py)
TEST_SUPPORT = "testsupport"
SIM_STUDIES = ("colocation", "tide", "rebalance")
SERVE_LAYERS = ("model", "logic", "input", "output", "routines", "features", "kube", "kube_cluster", "metrics")
# Inside the node agent, policy is pure (topology + pods + plan in, a plan out): it reads neither
# the collectors (/proc, the kubelet, the API) nor the enforcers (cgroup writes, evictions).
FORBIDDEN_INSIDE = {
    os.path.join("node_enforcer", "policy"): {"node_enforcer.collect", "node_enforcer.enforce"},
    # the simulators (issue 23): each study stands on the shared harness and imports no other study;
    # the harness imports none of them
    **{os.path.join("studies", "simulation", here): {f"studies.simulation.{s}" for s in SIM_STUDIES if s != here}
       for here in (*SIM_STUDIES, "harness")},
    # the serving package's layers (issue 23): settings are pure dataclasses on top of nothing; model/
    # (cluster objects, typed views, decisions) imports no logic/; logic/ is pure: no I/O layer, no loop
    os.path.join("autoscaler", "settings"): {f"autoscaler.{m}" for m in SERVE_LAYERS},
    os.path.join("autoscaler", "model"): {f"autoscaler.{m}" for m in SERVE_LAYERS if m != "model"},
    os.path.join("autoscaler", "logic"): {f"autoscaler.{m}" for m in SERVE_LAYERS if m not in ("model", "logic")},
}
# the shared vocabulary both halves import: the node agent must not pay for numpy/pandas through it
STDLIB_ONLY = ("contracts",)
# issue 23: the scheduler extender is a process of its own, apart from the serving loop: what it may
# import besides the standard library (an allow-list: never autoscaler, predictor, node_enforcer, ...)
EXTENDER_MAY_IMPORT = {"extender", "contracts", "kubernetes", "prometheus_client"}
# ... and its command hands it serve's Kubernetes wrapper and cluster-state file reader (one wrapper
# over the client, not two), nothing else of the serving loop
EXTENDER_COMMAND = os.path.join("tidewise", "commands", "extender.py")
EXTENDER_COMMAND_MAY_USE = {"autoscaler.kube", "autoscaler.input.cluster"}


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
            exempt = TEST_SUPPORT_USERS.get(os.path.relpath(path, ROOT), set())
            bad += [f"{os.path.relpath(path, ROOT)} imports {m}" for m in imports_of(path) if m in forbidden - exempt]
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


def test_the_extender_imports_only_contracts_kubernetes_prometheus_client_and_the_standard_library():
    assert os.path.isdir(os.path.join(ROOT, "extender"))
    allowed = set(sys.stdlib_module_names) | EXTENDER_MAY_IMPORT
    bad = [f"{os.path.relpath(path, ROOT)} imports {m}" for path in python_files("extender")
           for m in imports_of(path) if m not in allowed]
    assert not bad, bad


def test_the_extender_command_takes_only_the_kubernetes_wrapper_from_the_serving_loop():
    used = {m for m in modules_of(os.path.join(ROOT, EXTENDER_COMMAND)) if m.split(".")[0] == "autoscaler"}
    bad = {m for m in used if not any(m == a or m.startswith(a + ".") for a in EXTENDER_COMMAND_MAY_USE)}
    assert not bad, f"{EXTENDER_COMMAND} imports {sorted(bad)}"


# issue 22 item 9: serve's incremental history wraps any HistorySource, and knows none of them by name
INCREMENTAL = os.path.join("autoscaler", "input", "incremental.py")


def test_the_incremental_history_knows_no_particular_source():
    used = {m for m in modules_of(os.path.join(ROOT, INCREMENTAL)) if m.startswith("predictor.sources")}
    assert used <= {"predictor.sources.base", "predictor.sources.base.HistorySource"}, used


# issue 11: rooms stay small enough to read in one sitting
SIZED = ("contracts", "predictor", "training", "autoscaler", "extender", "node_enforcer", "tidewise", "studies", "benchmarks")
SIZED += ("reports",)  # issue 23: the HTML page helper's own package
SIZED += (TEST_SUPPORT,)
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def oversized(path):
    """`path` if it is over MAX_MODULE_LINES, and each function/method in it over MAX_FUNCTION_LINES
    (decorators and docstring included: what a reader has to hold at once)."""
    source = open(path, encoding="utf-8").read()
    rel = os.path.relpath(path, ROOT)
    n_lines = len(source.splitlines())
    if n_lines > MAX_MODULE_LINES:
        yield f"{rel}: module of {n_lines} lines"
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = node.end_lineno - first + 1
            if length > MAX_FUNCTION_LINES:
                yield f"{rel}:{node.lineno} {node.name}() of {length} lines"


# issue 23, the serving package's layers: a cluster object's spec and status are read through the typed
# views of autoscaler/model/ (`HpaView(hpa).bounds()`, `PodView(pod).phase`, ...); only the output layer's
# writers index the patches they build and send. A dict literal {"spec": ...} or a store is no read.
RAW_PARTS_MAY = tuple(os.path.join("autoscaler", *p) for p in (("model", ""), ("output", "objects.py"),
                                                                ("output", "sinks.py")))


def raw_part_reads(path):
    """Lines that read `x["spec"]`/`x["status"]` or call `x.get|setdefault|pop("spec"|"status")`."""
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        key = node.slice if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args and \
                node.func.attr in ("get", "setdefault", "pop"):
            key = node.args[0]
        if isinstance(key, ast.Constant) and key.value in ("spec", "status"):
            yield node.lineno


def test_raw_part_reads_finds_subscripts_and_gets_not_literals_or_stores(tmp_path):
    (tmp_path / "m.py").write_text('a = o["spec"]\nb = o.get("status") or {}\nc = {"spec": a}\no["status"] = c\n')
    assert list(raw_part_reads(str(tmp_path / "m.py"))) == [1, 2]


def test_spec_and_status_are_read_only_through_the_typed_views():
    bad = [f"{rel}:{line}" for path in python_files("autoscaler")
           if not (rel := os.path.relpath(path, ROOT)).startswith(RAW_PARTS_MAY) for line in raw_part_reads(path)]
    assert not bad, bad


def test_serve_settings_are_defined_only_in_the_settings_package():
    home = os.path.join("autoscaler", "settings") + os.sep
    bad = [f"{rel}: class {n.name}" for path in python_files("autoscaler")
           if not (rel := os.path.relpath(path, ROOT)).startswith(home)
           for n in ast.walk(ast.parse(open(path, encoding="utf-8").read())) if isinstance(n, ast.ClassDef)
           and n.name.endswith("Settings")]
    assert not bad, bad


def test_the_loaded_registry_is_read_by_its_attributes_not_getattr():
    """`predictor.registry.RegistryVersion` is the type the loop holds: no duck typing of it."""
    def named(n):
        return n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else ""
    bad = [f"{os.path.relpath(path, ROOT)}:{n.lineno}" for path in python_files("autoscaler")
           for n in ast.walk(ast.parse(open(path, encoding="utf-8").read())) if isinstance(n, ast.Call)
           and named(n.func) == "getattr" and n.args and named(n.args[0]) in ("registry", "loaded", "reg")]
    assert not bad, bad


def test_oversized_flags_a_long_function_and_a_long_module(tmp_path):
    long_function = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
    path = tmp_path / "long.py"
    path.write_text(long_function + "\n" * (MAX_MODULE_LINES - MAX_FUNCTION_LINES))
    found = list(oversized(str(path)))
    assert len(found) == 2, found
    assert found[0].endswith(": module of 401 lines") and found[1].endswith(":1 f() of 61 lines"), found
    path.write_text("def f():\n" + "    x = 1\n" * (MAX_FUNCTION_LINES - 1))
    assert list(oversized(str(path))) == []


def test_no_module_or_function_is_oversized():
    bad = [problem for pkg in SIZED for path in python_files(pkg) for problem in oversized(path)]
    assert not bad, "split these (issue 11: modules <= 400 lines, functions <= 60):\n" + "\n".join(bad)


def loaded_packages(code, packages):
    """Which of `packages` a fresh interpreter has loaded after running `code`."""
    probe = f"{code}\nimport sys\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & {set(packages)!r}))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_forecast_command_never_loads_kubernetes():
    code = ("from tidewise.cli import build_parser\nbuild_parser()\n"
            "import predictor.pipeline.forecasting, predictor.sources.prometheus, predictor.profile")
    assert loaded_packages(code, ("kubernetes", "autoscaler", "node_enforcer")) == "[]"


def test_contracts_load_neither_numpy_nor_pandas_nor_the_predictor():
    code = "import contracts.errors, contracts.kube_errors, contracts.qos, contracts.quantity, contracts.reclaim"
    assert loaded_packages(code, ("numpy", "pandas", "predictor", "kubernetes")) == "[]"


def test_the_extender_command_loads_neither_numpy_nor_pandas_nor_the_predictor():
    code = ("from tidewise.cli import build_parser\nbuild_parser()\n"
            "import tidewise.commands.extender, extender.server, extender.service, extender.nodes\n"
            "import autoscaler.kube, autoscaler.input.cluster")
    assert loaded_packages(code, ("numpy", "pandas", "predictor", "node_enforcer", "training")) == "[]"


def test_models_folder_holds_only_gitkeep_in_git():
    r = subprocess.run(["git", "ls-files", "models"], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.split() in ([], ["models/.gitkeep"])


def test_every_shipped_package_is_type_checked_by_make_test():
    """`make typecheck` (part of `make test`) runs mypy on TYPED; every package pyproject ships is in it."""
    import re
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        shipped = {p.rstrip("*") for p in tomllib.load(fh)["tool"]["setuptools"]["packages"]["find"]["include"]}
    with open(os.path.join(ROOT, "Makefile")) as fh:
        makefile = fh.read()
    typed = re.search(r"^TYPED := (.+)$", makefile, re.M)
    assert typed, "the Makefile names the type-checked packages in TYPED"
    assert set(typed.group(1).split()) == shipped
    recipe, side = re.search(r"^test:.*\n((?:\t.*\n)+)", makefile, re.M), re.search(r"^SIDE := (.+)$", makefile, re.M)
    runs = set(re.findall(r"\$\(MAKE\) [^;&|]*?\b(test-[\w-]+|typecheck)\b", recipe.group(1))) | set(side.group(1).split())
    assert "$(SIDE)" in recipe.group(1) and {"test-main", "test-pandas2", "test-installed", "typecheck"} <= runs, runs


def test_the_pandas2_data_path_list_names_real_modules():
    from tests.conftest import DATA_PATH_MODULES

    missing = [m for m in DATA_PATH_MODULES
               if not os.path.isfile(os.path.join(ROOT, *m.split(".")) + ".py")]
    assert not missing, f"tests/conftest.py DATA_PATH_MODULES names no such module: {missing}"


# issue 23: the shared vocabulary and the pure decisions state every signature in full
STRICT_TYPED = ("contracts", "autoscaler.logic", "node_enforcer.policy")
STRICT_FLAGS = ("disallow_untyped_defs", "disallow_incomplete_defs")


def not_strict(mypy_config, packages):
    """Packages some [[tool.mypy.overrides]] does not hold to STRICT_FLAGS (or another turns them off)."""
    def covers(pattern, package):
        return pattern in (package, f"{package}.*") or (
            pattern.endswith(".*") and package.startswith(pattern[:-1]))

    overrides = [{**o, "module": [o["module"]] if isinstance(o["module"], str) else o["module"]}
                 for o in mypy_config.get("overrides", [])]
    loose = []
    for package in packages:
        matching = [o for o in overrides if any(covers(p, package) for p in o["module"])]
        held = [o for o in matching
                if f"{package}.*" in o["module"] and all(o.get(f) is True for f in STRICT_FLAGS)]
        if not held or any(o.get(f) is False for o in matching for f in STRICT_FLAGS):
            loose.append(package)
    return loose


def test_not_strict_flags_a_dropped_or_overridden_rule():
    strict = {"module": ["a.*", "b.c.*"], "disallow_untyped_defs": True, "disallow_incomplete_defs": True}
    assert not_strict({"overrides": [strict]}, ["a", "b.c"]) == []
    assert not_strict({"overrides": [{**strict, "disallow_incomplete_defs": False}]}, ["a"]) == ["a"]
    loosened = {"module": "b.*", "disallow_untyped_defs": False}
    assert not_strict({"overrides": [strict, loosened]}, ["a", "b.c"]) == ["b.c"]
    assert not_strict({}, ["a"]) == ["a"]


def test_contracts_logic_and_node_policy_keep_strict_signatures():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        mypy_config = tomllib.load(fh)["tool"]["mypy"]
    assert not_strict(mypy_config, STRICT_TYPED) == []
    assert all(os.path.isdir(os.path.join(ROOT, *p.split("."))) for p in STRICT_TYPED), "a strict package moved"


# issue 23 item 3: one forecasting pipeline above the models. predictor/models/ holds estimators
# only (the contract and each model: no choice of model, no fallback, no calibration), and from the
# rest of the predictor it imports only what an estimator is made of:
MODELS_MAY_IMPORT = ("predictor.models", "predictor.features", "predictor.types", "predictor.errors",
                     "predictor.history", "predictor.durations", "predictor.timestamps",
                     "predictor.decaying_histogram")
PIPELINE = os.path.join("predictor", "pipeline")
# ... and the pipeline reads in one direction: each module imports only the modules before it
PIPELINE_ORDER = ("calibration", "choice", "selection", "fallback", "batched", "forecasting", "serving", "decision")


def predictor_modules_of(path):
    return {m for m in modules_of(path) if m == "predictor" or m.startswith("predictor.")}


def test_the_models_import_no_orchestration():
    paths = list(python_files(os.path.join("predictor", "models")))
    assert len(paths) >= 8
    bad = [f"{os.path.relpath(p, ROOT)} imports {m}" for p in paths for m in predictor_modules_of(p)
           if not any(m == a or m.startswith(a + ".") for a in MODELS_MAY_IMPORT)]
    assert not bad, bad


def test_nothing_below_the_pipeline_imports_it():
    """Inside the predictor only the pipeline imports the pipeline (models, features, registry,
    sources, history and the data model are below it); the old top-level homes are gone."""
    paths = [p for p in python_files("predictor") if not p.startswith(os.path.join(ROOT, PIPELINE, ""))]
    bad = [f"{os.path.relpath(p, ROOT)} imports {m}" for p in paths for m in predictor_modules_of(p)
           if m.startswith("predictor.pipeline")]
    assert not bad, bad
    old = ("forecasting", "selection", "batched", "calibration", "serving", "decision_forecast", "seasonality")
    assert not [m for m in old if os.path.exists(os.path.join(ROOT, "predictor", m + ".py"))]
    assert not os.path.exists(os.path.join(ROOT, "predictor", "models", "choice.py"))


def test_the_pipeline_reads_in_one_direction():
    names = sorted(os.path.basename(p)[:-3] for p in python_files(PIPELINE))
    assert names == sorted(("__init__", *PIPELINE_ORDER)), "place a new pipeline module in PIPELINE_ORDER"
    bad = []
    for rank, name in enumerate(PIPELINE_ORDER):
        allowed = {f"predictor.pipeline.{m}" for m in PIPELINE_ORDER[:rank]}
        for m in predictor_modules_of(os.path.join(ROOT, PIPELINE, name + ".py")):
            if m.startswith("predictor.pipeline") and not any(m == a or m.startswith(a + ".") for a in allowed):
                bad.append(f"pipeline/{name}.py imports {m}")
    assert not bad, bad


# issue 23: only autoscaler/features/ names a feature's module; the loop's core not even a feature's routines
FEATURE_MODULES = {f"autoscaler.features.{m}" for m in "vpa hpa ihpa reclaim spd tide rebalance".split()}
FEATURE_ROUTINES = {f"autoscaler.routines.{m}" for m in "ihpa spd tide tide_demand tide_margin rebalance".split()}
FEATURE_BLIND = {f"autoscaler/{f}.py" for f in "routines/loop routines/changes routines/change_policy routines/context "
                 "output/sinks kube_cluster model/cluster".split()} | {f"tidewise/commands/{c}.py" for c in ("serve", "rebalance")}


def test_only_the_features_package_names_a_feature_module():
    bad = [f"{rel} imports {m}" for pkg in ("autoscaler", "tidewise", "studies", "benchmarks") for p in python_files(pkg)
           if not (rel := os.path.relpath(p, ROOT)).startswith(os.path.join("autoscaler", "features"))
           for m in modules_of(p) if m in FEATURE_MODULES or (rel in FEATURE_BLIND and m in FEATURE_ROUTINES)]
    assert not bad, bad


def shipped_packages():
    """The top-level packages pyproject's packages.find ships (its include list)."""
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        return {p.rstrip("*") for p in tomllib.load(fh)["tool"]["setuptools"]["packages"]["find"]["include"]}


def test_no_shipped_package_imports_the_tests_or_their_support():
    assert os.path.isdir(os.path.join(ROOT, TEST_SUPPORT)) and TEST_SUPPORT not in shipped_packages()
    bad = [f"{os.path.relpath(path, ROOT)} imports {m}" for pkg in sorted(shipped_packages())
           for path in python_files(pkg) for m in imports_of(path) if m in {"tests", TEST_SUPPORT}]
    assert not bad, bad


def test_the_test_support_package_stands_without_the_tests():
    bad = [f"{os.path.relpath(path, ROOT)} imports {m}" for path in python_files(TEST_SUPPORT)
           for m in imports_of(path) if m == "tests"]
    assert not bad, bad
