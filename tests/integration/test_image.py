"""The container image runs what deploy/ asks of it.

No Docker engine exists on the test machines, so `docker build` cannot run here: the build is
replayed instead (tests/integration/dockerfile.py). The Dockerfile's build stage is read line by
line, its file set reproduced in a temporary folder from its COPY lines and `.dockerignore`, its RUN
lines run as Docker runs them into a bare virtualenv (`python -m venv`, no system site packages),
and everything but what the final stage copies is deleted. Then every container of deploy/*.yaml
that runs the Tidewise image is started the way Kubernetes would start it (the image's ENTRYPOINT,
or the container's `command`, plus its `args`) with `--help` appended, and `tidewise demo` runs end
to end, with the final stage's ENV, a home folder that does not exist (the user has none) and no
path into the checkout. The one liberty taken: pip's cache on this machine is used (the Dockerfile
turns it off to keep the image small), so the replay takes a minute or two, not ten.

`make test` runs this file once, in its `test-installed` step (it builds its own virtualenv, so the
pandas-2 pass would only repeat it).
"""
from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from typing import Any, Iterator

import pytest
import yaml

from tests.conftest import ROOT
from tidewise.cli import COMMANDS
from tests.integration.dockerfile import (BASE_LIBRARIES, RUNTIME_PACKAGES, SYSTEM_STEPS, Replay, apt_packages,
                                         context_files, ignore_rules, ignored, parse)

pytestmark = pytest.mark.integration

WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job", "CronJob")


def _read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as fh:
        return fh.read()


def shipped_packages() -> list[str]:
    """The packages `pip install .` ships: [tool.setuptools.packages.find] of pyproject.toml."""
    from setuptools import find_packages

    find = tomllib.loads(_read("pyproject.toml"))["tool"]["setuptools"]["packages"]["find"]
    return sorted(find_packages(where=ROOT, include=find["include"], exclude=find.get("exclude", ())))


def repository(image: str) -> str:
    """`registry/name` of an image reference, without its tag or digest."""
    name = image.split("@", 1)[0]
    head, _, tail = name.rpartition(":")
    return head if head and "/" not in tail else name


def tidewise_containers() -> Iterator[tuple[str, dict[str, Any]]]:
    """(file/workload/container, container) for every container of deploy/ that runs the Tidewise image."""
    for path in sorted(glob.glob(os.path.join(ROOT, "deploy", "*.yaml"))):
        for doc in yaml.safe_load_all(_read(os.path.relpath(path, ROOT))):
            if not doc or doc.get("kind") not in WORKLOADS:
                continue
            spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
            pod = spec["template"]["spec"]
            for c in pod.get("initContainers", []) + pod["containers"]:
                if repository(c["image"]).rsplit("/", 1)[-1] == "tidewise":
                    yield f"{os.path.basename(path)}/{doc['metadata']['name']}/{c['name']}", c


def command_line(c: dict[str, Any], entrypoint: list[str]) -> list[str]:
    """What the kubelet runs: `command` (else the image's ENTRYPOINT) + `args`, $(VAR) from env."""
    env = {e["name"]: e.get("value", f"placeholder-{e['name'].lower()}") for e in c.get("env", [])}
    argv = [*c.get("command", entrypoint), *c.get("args", [])]
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), str(a)) for a in argv]


CONTAINERS = list(tidewise_containers())


def test_deploy_runs_the_image_in_every_part():
    names = {n.split("/")[1] for n, _ in CONTAINERS}
    assert {"tidewise-serve", "tidewise-enforcer", "tidewise-extender", "tidewise-train"} <= names, names


def test_the_final_stage_runs_as_a_user_without_build_tools():
    stages = parse(_read("Dockerfile"))
    assert len(stages) >= 2 and stages[0].name, "a named build stage and a final stage"
    final = stages[-1]
    text = " ".join(t for _, t in final.steps).lower()
    assert not re.search(r"build-essential|\bgcc\b|\bg\+\+|\bmake\b|pip install", text), text
    installed = apt_packages(text)
    assert set(installed) <= set(RUNTIME_PACKAGES), f"the final stage installs {installed}: runtime libraries only"
    assert not installed or ("--no-install-recommends" in text and "rm -rf /var/lib/apt/lists" in text), text
    user = final.all("USER")
    assert user, "the final stage sets no USER: the container would run as root"
    uid = user[-1].split(":")[0]
    assert uid not in ("0", "root") and uid.isdigit(), f"USER {user[-1]}: a numeric non-root uid (runAsNonRoot)"
    assert all(t.startswith(f"--from={stages[0].name} ") for t in final.all("COPY")), "the final stage takes only the build"
    assert final.all("ENTRYPOINT") == ['["tidewise"]']


def test_dockerignore_leaves_out_virtualenvs_models_outputs_and_git():
    rules = ignore_rules(_read(".dockerignore"))
    for rel in (".venv/bin/python", ".venv-user/bin/python", ".venv-pandas2/x", ".git/HEAD", "models/v1/model.pkl",
                "demo-out/report.html", "dist/tidewise-0.1.0-py3-none-any.whl", "build/lib/x.py",
                "tidewise.egg-info/PKG-INFO", "predictor/__pycache__/x.cpython-311.pyc"):
        assert ignored(rel, rules), f"{rel} would be sent to the docker build"
    for rel in ("pyproject.toml", "README.md", "Dockerfile", "contracts/__init__.py", "studies/demo.py"):
        assert not ignored(rel, rules), f"{rel} is left out of the build context"


def test_the_build_stage_copies_every_shipped_package():
    """Cheap and without an install: the file set the build stage copies holds every package."""
    replay = Replay(ROOT, "/nonexistent")
    files = set(context_files(ROOT, replay.rules))
    copied: set[str] = set()
    for text in replay.build.all("COPY"):
        *srcs, _ = shlex.split(text)
        for src in map(os.path.normpath, srcs):
            copied |= {f for f in files if src == "." or f == src or f.startswith(src + "/")}
    missing = [p for p in shipped_packages() if p.replace(".", "/") + "/__init__.py" not in copied]
    assert not missing, f"pyproject.toml ships {missing}, which the Dockerfile's build stage never copies"
    assert {"pyproject.toml", "README.md"} <= copied


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Replay, dict[str, str]]:
    """The replayed image: (replay, the environment its containers start with)."""
    root = str(tmp_path_factory.mktemp("image"))
    base = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_NO_CACHE_DIR")}
    # the running test's virtualenv must not be where the replay finds `python`, `pip` or `tidewise`
    base["PATH"] = os.pathsep.join(p for p in base.get("PATH", "").split(os.pathsep)
                                   if not os.path.isfile(os.path.join(p, "pyvenv.cfg"))
                                   and not os.path.isfile(os.path.join(os.path.dirname(p), "pyvenv.cfg")))
    replay = Replay(ROOT, root)
    replay.run_build(base, drop_env=("PIP_NO_CACHE_DIR",))
    replay.keep_only_the_final_stage()
    env = replay.env(replay.final, base)
    env["HOME"] = replay.host("/home/tidewise")  # useradd --no-create-home: it does not exist
    assert not os.path.exists(env["HOME"])
    return replay, env


def run(replay: Replay, env: dict[str, str], argv: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """`argv` as the container starts it: found on the image's PATH, in its root folder, with its ENV."""
    exe = shutil.which(argv[0], path=env["PATH"])
    assert exe and exe.startswith(replay.root), f"{argv[0]} is not found in the image (PATH {env['PATH']})"
    return subprocess.run([exe, *argv[1:]], cwd=replay.host("/"), env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_image_holds_only_the_virtualenv_and_every_package_imports(image):
    replay, env = image
    assert not os.path.exists(replay.host("/src")), "the sources are not in the final stage"
    assert [t for t in replay.build.all("RUN") if not t.startswith(SYSTEM_STEPS)], "no RUN was replayed"
    packages = shipped_packages()
    code = ("import importlib, sys\n"
            "for name in sys.argv[1:]:\n"
            "    m = importlib.import_module(name)\n"
            "    assert '/site-packages/' in m.__file__, m.__file__\n")
    r = run(replay, env, ["python", "-c", code, *packages])
    assert r.returncode == 0, r.stderr[-3000:]
    r = run(replay, env, ["python", "-c", "import pip"])
    assert r.returncode != 0, "pip is left in the image"


def test_every_shared_library_the_image_loads_is_in_the_image(image):
    """Every ELF object under the virtualenv finds each library it needs in the virtualenv, the slim
    base or a package the final stage installs: the replay runs on this machine, whose /usr/lib has
    what the image may not (LightGBM's libgomp.so.1 once passed every other test here)."""
    replay, _ = image
    readelf = shutil.which("readelf")
    assert readelf, "readelf (binutils) is needed to read the image's shared objects"
    final = replay.final
    venvs = replay.kept  # what the final stage copies from the build: the virtualenv
    installed = apt_packages(" ".join(t for _, t in final.steps).lower())
    provided = BASE_LIBRARIES.union(*(RUNTIME_PACKAGES[p] for p in installed))
    objects, own = [], set()
    for venv in venvs:
        for folder, _, names in os.walk(replay.host(venv)):
            own.update(names)
            objects += [os.path.join(folder, n) for n in names if re.search(r"\.so(\.[\d.]+)?$", n)]
    assert objects, f"no shared object under {venvs}"
    needed: dict[str, set[str]] = {}
    for path in objects:
        out = subprocess.run([readelf, "-d", path], capture_output=True, text=True, check=True).stdout
        for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out):
            needed.setdefault(lib, set()).add(os.path.relpath(path, replay.root))
    missing = {lib: sorted(users)[:3] for lib, users in needed.items() if lib not in own and lib not in provided}
    assert not missing, f"libraries the image lacks (add their Debian package to the final stage): {missing}"
    unused = [p for p in installed if not RUNTIME_PACKAGES[p] & needed.keys()]
    assert not unused, f"the final stage installs {unused}, which no shared object of the image needs"


@pytest.mark.parametrize("name,container", CONTAINERS, ids=[n for n, _ in CONTAINERS])
def test_every_deploy_command_line_starts_in_the_image(image, name, container):
    replay, env = image
    argv = command_line(container, replay.entrypoint())
    r = run(replay, env, [*argv, "--help"])
    assert r.returncode == 0, f"{name}: `{' '.join(argv)} --help` exit {r.returncode}\n{r.stderr[-3000:]}"
    sub = next(a for a in argv[1:] if a in COMMANDS)  # the help printed is the subcommand's own
    assert r.stdout.startswith(f"usage: tidewise {sub}"), r.stdout[:300]


def test_demo_runs_end_to_end_in_the_image(image, tmp_path):
    replay, env = image
    out = tmp_path / "demo"
    r = run(replay, env, [*replay.entrypoint(), "demo", "--out", str(out)])
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("history.parquet", "forecasts.csv", "profiles.json", "report.html", "cluster-state.yaml"):
        assert (out / name).stat().st_size > 0, name
    assert list((out / "recommendations").iterdir()), "the serving loop wrote no recommendation"
