"""The container images run what deploy/ asks of them.

Two images come from the Dockerfile: the default target (`tidewise`: serve, training, the extender)
and `--target agent` (`tidewise-agent`: the node agent's DaemonSet, without numpy or pandas). No Docker
engine exists on the test machines, so `docker build` cannot run here: each build is replayed instead
(tests/integration/dockerfile.py). The stages a target is built from are read line by line, their file
set reproduced in a temporary folder from their COPY lines and `.dockerignore`, their RUN lines run as
Docker runs them into a bare virtualenv (`python -m venv`, no system site packages), and everything but
what the final stage copies is deleted. Then every container of deploy/*.yaml that runs a Tidewise
image is started in the image it names the way Kubernetes would start it (the image's ENTRYPOINT, or
the container's `command`, plus its `args`) with `--help` appended, `tidewise demo` runs end to end in
the full image and the DaemonSet's own command line reconciles the test fixtures in the agent's, with
the final stage's ENV, a home folder that does not exist (the user has none) and no path into the
checkout. The installed size of both virtualenvs is printed. The one liberty taken: pip's cache on
this machine is used (the Dockerfile turns it off to keep the images small), so the replay takes a
minute or two, not ten.

`make test` runs this file once, in its `test-installed` step (it builds its own virtualenvs, so the
pandas-2 pass would only repeat it).
"""
from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import tomllib
import urllib.request
from typing import Any, Callable, Iterator

import pytest
import yaml

from contracts.annotations import PLAN_ANNOTATION
from tests.conftest import ROOT, wait_until, write_kubeconfig
from tests.integration.prometheus_server import free_port
from tidewise.cli import COMMANDS
from tests.integration.dockerfile import (BASE_LIBRARIES, RUNTIME_PACKAGES, SYSTEM_STEPS, Replay, apt_packages,
                                         context_files, ignore_rules, ignored, parse)
from tests.node_enforcer.conftest import MIXED_PODS, RECLAIM_PLAN, TWO_SOCKET

pytestmark = pytest.mark.integration

WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job", "CronJob")
# image name in deploy/ (the last part of its repository) -> the Dockerfile target that builds it (None: the last stage)
TARGETS = {"tidewise": None, "tidewise-agent": "agent"}
# what the node agent's command path imports of the project; the rest of the wheel needs numpy
AGENT_PACKAGES = ("contracts", "node_enforcer", "tidewise")
NOT_IN_THE_AGENT = ("numpy", "pandas", "sklearn", "scipy", "statsmodels", "lightgbm", "pyarrow", "matplotlib")

Image = tuple[Replay, dict[str, str]]


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


def tidewise_containers() -> Iterator[tuple[str, dict[str, Any], str]]:
    """(file/workload/container, container, image name) for every container of deploy/ that runs a Tidewise image."""
    for path in sorted(glob.glob(os.path.join(ROOT, "deploy", "*.yaml"))):
        for doc in yaml.safe_load_all(_read(os.path.relpath(path, ROOT))):
            if not doc or doc.get("kind") not in WORKLOADS:
                continue
            spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
            pod = spec["template"]["spec"]
            for c in pod.get("initContainers", []) + pod["containers"]:
                name = repository(c["image"]).rsplit("/", 1)[-1]
                if name in TARGETS:
                    yield f"{os.path.basename(path)}/{doc['metadata']['name']}/{c['name']}", c, name


def command_line(c: dict[str, Any], entrypoint: list[str]) -> list[str]:
    """What the kubelet runs: `command` (else the image's ENTRYPOINT) + `args`, $(VAR) from env."""
    env = {e["name"]: e.get("value", f"placeholder-{e['name'].lower()}") for e in c.get("env", [])}
    argv = [*c.get("command", entrypoint), *c.get("args", [])]
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), str(a)) for a in argv]


CONTAINERS = list(tidewise_containers())


def test_deploy_runs_the_images_in_every_part():
    images = {n.split("/")[1]: image for n, _, image in CONTAINERS}
    assert {"tidewise-serve", "tidewise-enforcer", "tidewise-extender", "tidewise-train"} <= images.keys(), images
    # the node agent, on every node, runs the slim image; everything else the full one
    assert {w for w, image in images.items() if image == "tidewise-agent"} == {"tidewise-enforcer"}, images


@pytest.mark.parametrize("name", TARGETS)
def test_the_final_stage_runs_as_a_user_without_build_tools(name):
    replay = Replay(ROOT, "/nonexistent", TARGETS[name])
    assert replay.builds[0].name and replay.builds[0].base not in {s.name for s in replay.stages}, "a named build stage"
    final = replay.final
    assert final not in replay.builds and final.base not in {s.name for s in replay.stages}, "a fresh base"
    text = " ".join(t for _, t in final.steps).lower()
    assert not re.search(r"build-essential|\bgcc\b|\bg\+\+|\bmake\b|pip install", text), text
    installed = apt_packages(text)
    assert set(installed) <= set(RUNTIME_PACKAGES), f"the final stage installs {installed}: runtime libraries only"
    assert not installed or ("--no-install-recommends" in text and "rm -rf /var/lib/apt/lists" in text), text
    user = final.all("USER")
    assert user, "the final stage sets no USER: the container would run as root"
    uid = user[-1].split(":")[0]
    assert uid not in ("0", "root") and uid.isdigit(), f"USER {user[-1]}: a numeric non-root uid (runAsNonRoot)"
    assert all(t.startswith(f"--from={replay.builds[-1].name} ") for t in final.all("COPY")), "only the build's copy"
    assert final.all("ENTRYPOINT") == ['["tidewise"]']


def test_the_default_target_is_the_full_image_and_the_agent_s_installs_its_own_list():
    """`docker build .` builds the last stage: everything `pip install .` installs. The agent's build
    installs the wheel without its dependencies, then pyproject's `agent` list, every item of which is
    one of the dependencies with the same bounds."""
    full, agent = Replay(ROOT, "/nonexistent"), Replay(ROOT, "/nonexistent", "agent")
    assert full.final is full.stages[-1] and agent.final.name == "agent"
    assert not any("--no-deps" in t and "install" in t for t in full.build_steps("RUN"))
    runs = " ".join(agent.build_steps("RUN"))
    assert re.search(r"pip install --no-deps \S*tidewise-\*\.whl", runs) and '["agent"]' in runs, runs
    project = tomllib.loads(_read("pyproject.toml"))["project"]
    extra = project["optional-dependencies"]["agent"]
    assert extra and set(extra) <= set(project["dependencies"]), set(extra) - set(project["dependencies"])


def test_dockerignore_leaves_out_virtualenvs_models_outputs_and_git():
    rules = ignore_rules(_read(".dockerignore"))
    for rel in (".venv/bin/python", ".venv-user/bin/python", ".venv-pandas2/x", ".git/HEAD", "models/v1/model.pkl",
                "demo-out/report.html", "dist/tidewise-0.1.0-py3-none-any.whl", "build/lib/x.py",
                "tidewise.egg-info/PKG-INFO", "predictor/__pycache__/x.cpython-311.pyc"):
        assert ignored(rel, rules), f"{rel} would be sent to the docker build"
    for rel in ("pyproject.toml", "README.md", "Dockerfile", "contracts/__init__.py", "studies/demo.py"):
        assert not ignored(rel, rules), f"{rel} is left out of the build context"


@pytest.mark.parametrize("name", TARGETS)
def test_the_build_stage_copies_every_shipped_package(name):
    """Cheap and without an install: the file set the build stages copy holds every package."""
    replay = Replay(ROOT, "/nonexistent", TARGETS[name])
    files = set(context_files(ROOT, replay.rules))
    copied: set[str] = set()
    for text in replay.build_steps("COPY"):
        *srcs, _ = shlex.split(text)
        for src in map(os.path.normpath, srcs):
            copied |= {f for f in files if src == "." or f == src or f.startswith(src + "/")}
    missing = [p for p in shipped_packages() if p.replace(".", "/") + "/__init__.py" not in copied]
    assert not missing, f"pyproject.toml ships {missing}, which the Dockerfile's build stage never copies"
    assert {"pyproject.toml", "README.md"} <= copied


def build_image(root: str, target: str | None) -> Image:
    """The replayed image of `target`: (replay, the environment its containers start with)."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_NO_CACHE_DIR")}
    # the running test's virtualenv must not be where the replay finds `python`, `pip` or `tidewise`
    base["PATH"] = os.pathsep.join(p for p in base.get("PATH", "").split(os.pathsep)
                                   if not os.path.isfile(os.path.join(p, "pyvenv.cfg"))
                                   and not os.path.isfile(os.path.join(os.path.dirname(p), "pyvenv.cfg")))
    replay = Replay(ROOT, root, target)
    replay.run_build(base, drop_env=("PIP_NO_CACHE_DIR",))
    replay.keep_only_the_final_stage()
    env = replay.env(replay.final, base)
    env["HOME"] = replay.host("/home/tidewise")  # useradd --no-create-home: it does not exist
    assert not os.path.exists(env["HOME"])
    return replay, env


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Image]:
    """image name -> its replayed image, each built once, when a test first asks for it."""
    built: dict[str, Image] = {}

    def get(name: str) -> Image:
        if name not in built:
            built[name] = build_image(str(tmp_path_factory.mktemp(name)), TARGETS[name])
        return built[name]
    return get


def run(replay: Replay, env: dict[str, str], argv: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """`argv` as the container starts it: found on the image's PATH, in its root folder, with its ENV."""
    exe = shutil.which(argv[0], path=env["PATH"])
    assert exe and exe.startswith(replay.root), f"{argv[0]} is not found in the image (PATH {env['PATH']})"
    return subprocess.run([exe, *argv[1:]], cwd=replay.host("/"), env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("name", TARGETS)
def test_the_image_holds_only_the_virtualenv_and_every_package_imports(images, name):
    replay, env = images(name)
    assert not os.path.exists(replay.host("/src")), "the sources are not in the final stage"
    assert [t for t in replay.build_steps("RUN") if not t.startswith(SYSTEM_STEPS)], "no RUN was replayed"
    packages = [p for p in shipped_packages() if name == "tidewise" or p.split(".")[0] in AGENT_PACKAGES]
    code = ("import importlib, sys\n"
            "for name in sys.argv[1:]:\n"
            "    m = importlib.import_module(name)\n"
            "    assert '/site-packages/' in m.__file__, m.__file__\n")
    r = run(replay, env, ["python", "-c", code, *packages])
    assert r.returncode == 0, r.stderr[-3000:]
    r = run(replay, env, ["python", "-c", "import pip"])
    assert r.returncode != 0, "pip is left in the image"


@pytest.mark.parametrize("name", TARGETS)
def test_every_shared_library_the_image_loads_is_in_the_image(images, name):
    """Every ELF object under the virtualenv finds each library it needs in the virtualenv, the slim
    base or a package the final stage installs: the replay runs on this machine, whose /usr/lib has
    what the image may not (LightGBM's libgomp.so.1 once passed every other test here)."""
    replay, _ = images(name)
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


@pytest.mark.parametrize("name,container,image", CONTAINERS, ids=[n for n, _, _ in CONTAINERS])
def test_every_deploy_command_line_starts_in_the_image(images, name, container, image):
    replay, env = images(image)
    argv = command_line(container, replay.entrypoint())
    r = run(replay, env, [*argv, "--help"])
    assert r.returncode == 0, f"{name}: `{' '.join(argv)} --help` exit {r.returncode}\n{r.stderr[-3000:]}"
    sub = next(a for a in argv[1:] if a in COMMANDS)  # the help printed is the subcommand's own
    assert r.stdout.startswith(f"usage: tidewise {sub}"), r.stdout[:300]


def test_demo_runs_end_to_end_in_the_image(images, tmp_path):
    replay, env = images("tidewise")
    out = tmp_path / "demo"
    r = run(replay, env, [*replay.entrypoint(), "demo", "--out", str(out)])
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("history.parquet", "forecasts.csv", "profiles.json", "report.html", "cluster-state.yaml"):
        assert (out / name).stat().st_size > 0, name
    assert list((out / "recommendations").iterdir()), "the serving loop wrote no recommendation"


def test_the_agent_image_has_no_numpy_or_pandas_and_says_so_for_other_commands(images, tmp_path):
    probe = ["python", "-c", "import importlib.util, sys\n"
             "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))", *NOT_IN_THE_AGENT]
    assert run(*images("tidewise"), probe).stdout.split() == list(NOT_IN_THE_AGENT)  # the probe finds them
    replay, env = images("tidewise-agent")
    assert run(replay, env, probe).stdout.split() == []
    # a command that needs them: one line naming the full install, no traceback
    history = tmp_path / "history.csv"
    history.write_text("series,timestamp,value\na,2026-01-01T00:00:00Z,1\n")
    r = run(replay, env, [*replay.entrypoint(), "forecast", "--input", str(history), "--output", str(tmp_path / "f.csv")])
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("tidewise forecast: error: ") and ("numpy" in line or "pandas" in line), line


def _systemd_tree(src: str, dst: str) -> None:
    """The fixture's cgroupfs tree (kubepods/burstable/pod<uid>/<id>) laid out as the systemd driver names it."""
    for here, _, files in os.walk(src):
        parts, out = os.path.relpath(here, src).split(os.sep), []
        for i, part in enumerate(p for p in parts if p != "."):
            qos = parts[1] if len(parts) > 1 and parts[1] in ("burstable", "besteffort") else ""
            if i == 0:
                out.append("kubepods.slice")
            elif part in ("burstable", "besteffort") and i == 1:
                out.append(f"kubepods-{part}.slice")
            elif part.startswith("pod"):
                out.append(f"kubepods{'-' + qos if qos else ''}-{part.replace('-', '_')}.slice")
            else:
                out.append(f"cri-containerd-{part}.scope")
        os.makedirs(os.path.join(dst, *out), exist_ok=True)
        for f in files:
            shutil.copy2(os.path.join(here, f), os.path.join(dst, *out, f))


def _agent_node(tmp_path) -> tuple[list[str], dict[str, str]]:
    """The DaemonSet's container command line on the two-socket fixture: each hostPath volume mapped
    onto a folder here (its cgroup tree copied in the systemd layout the DaemonSet asks for), /proc
    (hostPID) onto a calm one; and the pods and the Node with its reclaim plan for the API fake."""
    [(_, c, _)] = [x for x in CONTAINERS if x[0].startswith("enforcer-daemonset.yaml/")]
    [ds] = [d for d in yaml.safe_load_all(_read("deploy/enforcer-daemonset.yaml")) if d and d["kind"] == "DaemonSet"]
    cgroup, proc = tmp_path / "cgroup", tmp_path / "proc"
    _systemd_tree(os.path.join(TWO_SOCKET, "fs", "cgroup"), str(cgroup))
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal: 1048576 kB\nMemAvailable: 524288 kB\n")
    host = {"/sys": TWO_SOCKET, "/sys/fs/cgroup": str(cgroup), "/var/lib/tidewise": str(tmp_path / "state")}
    volumes = {v["name"]: host[v["hostPath"]["path"]] for v in ds["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}
    mounts["/proc"] = str(proc)
    os.makedirs(mounts["/var/lib/tidewise"])
    argv = []
    for a in command_line(dict(c, env=[{"name": "NODE_NAME", "value": "fixture-node"}]), ["tidewise"]):
        flag, eq, path = a.partition("=")
        where = max((m for m in mounts if path == m or path.startswith(m + "/")), key=len, default=None)
        argv.append(f"{flag}={mounts[where]}{path[len(where):]}" if eq and where else a)
    with open(MIXED_PODS, encoding="utf-8") as fh:
        pods = yaml.safe_load(fh)["items"]
    with open(RECLAIM_PLAN, encoding="utf-8") as fh:
        node = {"metadata": {"name": "fixture-node", "annotations": {PLAN_ANNOTATION: fh.read()}}}
    return argv, {"pods": pods, "node": node}


def test_the_daemonset_s_command_line_reconciles_the_fixture_in_the_agent_image(images, tmp_path):
    """One pass, dry-run (`--once --dry-run`, the metrics flags dropped: they serve a loop), through the
    API fake; the plan printed is the policy's over the fixture's pods and cgroups."""
    from testsupport.kube_fake import FakeApiServer

    replay, env = images("tidewise-agent")
    argv, objs = _agent_node(tmp_path)
    argv = [a for a in argv if not a.startswith("--metrics-")]
    with FakeApiServer.of_node(objs["pods"], [objs["node"]]) as fake:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake.url)
        r = run(replay, env, [*argv, "--once", "--dry-run", "--kubeconfig", kubeconfig], timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "pools: reserve 0,16 (2), share 3-6,19-22 (8), reclaim 7,23 (2)" in r.stdout, r.stdout[:2000]
    assert re.search(r"would write [1-9]\d* value\(s\)", r.stdout) and "no cgroup yet" not in r.stdout, r.stdout
    assert [q.path for q in fake.requests if q.method != "GET"] == [], "a dry run writes nothing"
    assert {"/api/v1/pods", "/api/v1/nodes/fixture-node"} <= {q.path for q in fake.requests}  # pods and the plan


def test_the_daemonset_s_loop_serves_metrics_in_the_agent_image(images, tmp_path):
    """The DaemonSet's command line as it runs, dry-run added and the metrics on a free local port:
    it watches the fake, passes, answers /healthz and /metrics, and stops on SIGTERM."""
    from testsupport.kube_fake import FakeApiServer

    replay, env = images("tidewise-agent")
    argv, objs = _agent_node(tmp_path)
    port = free_port()
    argv = [f"--metrics-port={port}" if a.startswith("--metrics-port=") else
            "--metrics-address=127.0.0.1" if a.startswith("--metrics-address=") else a for a in argv]
    with FakeApiServer.of_node(objs["pods"], [objs["node"]]) as fake:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake.url)
        exe = shutil.which(argv[0], path=env["PATH"])
        proc = subprocess.Popen([exe, *argv[1:], "--dry-run", "--kubeconfig", kubeconfig], cwd=replay.host("/"),
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            def scraped() -> str:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as m:
                        return m.read().decode()
                except OSError:
                    return ""
            assert wait_until(lambda: "tidewise_enforcer_last_success_timestamp_seconds{" in scraped()
                              or proc.poll() is not None, timeout=120), "no pass within 2 min"
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as h:
                assert h.status == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]


def _installed_bytes(folder: str) -> int:
    return sum(os.lstat(os.path.join(here, f)).st_size for here, _, files in os.walk(folder) for f in files)


def test_both_images_sizes_are_measured_and_the_agent_s_is_small(images, capsys):
    """What each image adds to the slim base (python:3.11-slim, the same for both): its virtualenv."""
    sizes = {}
    for name in TARGETS:
        replay, _ = images(name)
        sizes[name] = sum(_installed_bytes(replay.host(k)) for k in replay.kept)
    with capsys.disabled():
        print("\nimage virtualenvs, installed: " + ", ".join(f"{n} {b / 2**20:.1f} MiB" for n, b in sizes.items())
              + f"; the agent's is {sizes['tidewise-agent'] / sizes['tidewise']:.1%} of the full one")
    assert sizes["tidewise-agent"] < sizes["tidewise"] / 3  # a generous ceiling: no numpy, pandas or scikit-learn
