"""`tidewise enforce` end to end on the 2-socket fixture (a copy of its cgroup v2 tree)."""
import ast
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import write_kubeconfig
from tests.node_enforcer.conftest import MIXED_PODS, RECLAIM_PLAN, ROOT, TWO_SOCKET
from tidewise.cli import main


@pytest.fixture
def cg(tmp_path):
    dst = tmp_path / "cgroup"
    shutil.copytree(os.path.join(TWO_SOCKET, "fs", "cgroup"), dst)
    return dst


def _args(cg, tmp_path, *extra):
    return ["enforce", "--once", "--node", "fixture-node", "--pods-from", "file", "--pods", MIXED_PODS,
            "--sysfs-root", TWO_SOCKET, "--cgroup-root", str(cg), "--reclaim-plan", RECLAIM_PLAN,
            "--checkpoint", str(tmp_path / "ck.json"), "--no-eviction", *extra]


def _tree(root):
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f)).read()
            for d, _, fs in os.walk(root) for f in fs}


def test_once_dry_run_prints_the_plan_and_writes_nothing(cg, tmp_path, capsys):
    before = _tree(cg)
    rc = main(_args(cg, tmp_path, "--dry-run", "--plan-out", str(tmp_path / "plan.json")))
    out = capsys.readouterr().out
    assert rc == 0 and _tree(cg) == before and not (tmp_path / "ck.json").exists()
    assert "node fixture-node: 2 socket(s), 2 NUMA node(s), 16 cores, 32 threads" in out
    assert "pools: reserve 0,16 (2), share 3-6,19-22 (8), reclaim 7,23 (2)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("kube-system/", "shop/", "ml/", "batch/"))}
    assert rows["shop/redis-0"][1:5] == ["dedicated_cores", "dedicated", "1-2,17-18", "0"]
    assert rows["shop/search-0"][1:5] == ["dedicated_cores", "dedicated", "8-15,24-31", "1"]
    assert rows["kube-system/node-agent"][2:4] == ["reserve", "0,16"]
    assert rows["shop/web-7d9f"][2:4] == ["share", "3-6,19-22"] and rows["shop/cart-5c6b"][2] == "share"
    assert rows["batch/spark-exec-2"][2:] == ["reclaim", "7,23", "0-1", "2000m", "16.0Gi", "100"]
    assert rows["ml/ml-train-0"][2] == "share" and "other-node-pod" not in out
    assert "refused ml/ml-train-0: numa_binding needs 6 free core(s) on one NUMA node" in out
    assert "malformed annotation on shop/cart-5c6b" in out
    # 42 per-pod values plus the reclaimed root (kubepods/besteffort holds only batch pods): memory.max
    # at the plan's 16 GiB and memory.high at 95% of it
    assert "would write 44 value(s):" in out
    assert f"kubepods/besteffort/memory.high: max -> {int(16 * 2**30 * 0.95) // 4096 * 4096}" in out
    assert "besteffort/pod0a000000-0000-4000-8000-000000000006/cpu.max: max 100000 -> 200000 100000" in out
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["dry_run"] and len(doc["changes"]) == 44 and doc["allocation"]["pools"]["reclaim"] == "7,23"
    assert doc["allocation"]["refused"][0]["pod"] == "ml/ml-train-0"


def test_once_applies_then_a_rerun_writes_nothing(cg, tmp_path, capsys):
    assert main(_args(cg, tmp_path)) == 0
    assert "wrote 44 value(s):" in capsys.readouterr().out
    pod = cg / "kubepods/besteffort/pod0a000000-0000-4000-8000-000000000007"
    assert (pod / "cpuset.cpus").read_text() == "7,23" and (pod / "c0ffee07/cpuset.cpus").read_text() == "7,23"
    assert (pod / "memory.max").read_text() == str(16 * 2**30)
    assert json.loads((tmp_path / "ck.json").read_text())["payload"]["dedicated"] == {
        "0a000000-0000-4000-8000-000000000002": "1-2,17-18", "0a000000-0000-4000-8000-000000000003": "8-15,24-31"}
    assert main(_args(cg, tmp_path)) == 0
    assert "wrote 0 value(s) (nothing differs)" in capsys.readouterr().out


@pytest.mark.parametrize("extra,message", [
    (["--pods", "/nonexistent.yaml"], "--pods /nonexistent.yaml: no such file"),
    (["--reclaim-plan", "/nonexistent.json"], "--reclaim-plan /nonexistent.json: no such file"),
    (["--sysfs-root", "/nonexistent"], "sysfs root /nonexistent"),
    (["--cgroup-root", "/nonexistent"], "--cgroup-root /nonexistent: no such folder"),
])
def test_user_errors_exit_2_with_one_line(cg, tmp_path, capsys, extra, message):
    assert main(_args(cg, tmp_path, *extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tidewise enforce: error: ") and message in err[-1]


def test_pods_from_file_needs_pods_and_node(cg, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["enforce", "--once", "--pods-from", "file", "--pods", MIXED_PODS, "--cgroup-root", str(cg)]) == 2
    assert "--node is required" in capsys.readouterr().err
    assert main(["enforce", "--once", "--node", "n", "--pods-from", "file", "--cgroup-root", str(cg)]) == 2
    assert "needs --pods FILE" in capsys.readouterr().err


def test_config_section_and_unknown_keys(cg, tmp_path, capsys):
    cfg = tmp_path / "tw.yaml"
    cfg.write_text("enforcer:\n  reserved_cpus: 4\n")
    assert main(["--config", str(cfg)] + _args(cg, tmp_path, "--dry-run")) == 0
    assert "reserve 0-1,16-17 (4)" in capsys.readouterr().out
    cfg.write_text("enforcer:\n  reserved_cpu: 4\n")
    assert main(["--config", str(cfg)] + _args(cg, tmp_path, "--dry-run")) == 2
    assert "unknown key(s) ['reserved_cpu']" in capsys.readouterr().err


def test_agent_imports_stay_light_and_within_the_layout(tmp_path):
    """The agent path never imports kubernetes (file source), pandas/numpy, autoscaler, training or predictor."""
    code = (
        "import sys; from tidewise.cli import main\n"
        f"rc = main({['enforce', '--once', '--dry-run', '--node', 'fixture-node', '--pods-from', 'file', '--pods', MIXED_PODS, '--sysfs-root', TWO_SOCKET, '--cgroup-root', os.path.join(TWO_SOCKET, 'fs', 'cgroup'), '--reclaim-plan', RECLAIM_PLAN, '--checkpoint', str(tmp_path / 'ck.json')]!r})\n"
        "bad = sorted(m for m in ('kubernetes', 'pandas', 'numpy', 'autoscaler', 'training', 'predictor') if m in sys.modules)\n"
        "print('RC', rc, 'BAD', bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert "RC 0 BAD []" in out.stdout, out.stderr


def test_node_enforcer_source_imports_only_allowed_packages():
    pkg = os.path.join(ROOT, "node_enforcer")
    for name in os.listdir(pkg):
        if not name.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(pkg, name)).read())
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            for m in mods:
                assert not m.startswith(("autoscaler", "training", "tidewise", "predictor")), (name, m)


def _fixture_objs():
    import yaml

    with open(MIXED_PODS) as fh:
        return yaml.safe_load(fh)["items"]


@pytest.mark.parametrize("source", ["api", "kubelet"])
def test_pods_from_api_and_kubelet_against_a_local_fake(cg, tmp_path, capsys, monkeypatch, source):
    from testsupport.kube_fake import FakeApiServer

    for k in [k for k in os.environ if k.startswith("KUBERNETES_")]:
        monkeypatch.delenv(k)  # never the in-cluster config, even when the tests run in a pod
    with FakeApiServer.of_node(_fixture_objs()) as fake:
        args = ["enforce", "--once", "--dry-run", "--node", "fixture-node", "--pods-from", source,
                "--sysfs-root", TWO_SOCKET, "--cgroup-root", str(cg), "--checkpoint", str(tmp_path / "ck.json"),
                "--kubeconfig", write_kubeconfig(tmp_path / "kubeconfig", fake.url), "--kubelet-url", fake.url,
                "--proc-root", str(_calm_proc(tmp_path))]
        assert main(args) == 0
    out = capsys.readouterr().out
    assert "shop/redis-0" in out and "other-node-pod" not in out and "would write" in out
    paths = [r.path for r in fake.requests]
    assert paths == (["/api/v1/pods"] if source == "api" else ["/pods"])
    if source == "api":
        assert fake.requests[0].params["fieldSelector"] == ["spec.nodeName=fixture-node"]


def _calm_proc(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "meminfo").write_text("MemTotal: 1048576 kB\nMemAvailable: 524288 kB\n")
    return proc


def test_dry_run_eviction_under_pressure_goes_to_the_api_as_dry_run(cg, tmp_path, capsys, monkeypatch):
    from testsupport.kube_fake import FakeApiServer

    for k in [k for k in os.environ if k.startswith("KUBERNETES_")]:
        monkeypatch.delenv(k)
    proc = _calm_proc(tmp_path)
    (proc / "pressure").mkdir()
    (proc / "pressure" / "memory").write_text("some avg10=90.00 avg60=50.00 avg300=10.00 total=1\n")
    with FakeApiServer.of_node(_fixture_objs()) as fake:
        args = ["enforce", "--once", "--node", "fixture-node", "--pods-from", "api", "--sysfs-root", TWO_SOCKET,
                "--cgroup-root", str(cg), "--checkpoint", str(tmp_path / "ck.json"), "--proc-root", str(proc),
                "--kubeconfig", write_kubeconfig(tmp_path / "kubeconfig", fake.url)]
        assert main(args) == 0
    out = capsys.readouterr().out
    assert "dry-run evict batch/spark-exec-" in out and "memory PSI some avg10 90.0%" in out
    posts = [r for r in fake.requests if r.method == "POST"]
    assert len(posts) == 1 and posts[0].params["dryRun"] == ["All"]
    assert posts[0].path.startswith("/api/v1/namespaces/batch/pods/spark-exec-")
