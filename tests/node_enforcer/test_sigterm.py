"""Issue 22, low item: SIGTERM (what the kubelet sends when the agent's pod is deleted) finishes the
pass under way and exits 0; it used to kill the agent at once (exit -15), possibly between two
cgroup writes of one pod."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from node_enforcer.agent import Agent
from node_enforcer.enforce.cgroups import V2Driver
from node_enforcer.enforce.files import HostFiles
from node_enforcer.model.pressure import Pressure
from node_enforcer.settings import EnforcerSettings
from tests.node_enforcer.conftest import MIXED_PODS, RECLAIM_PLAN, ROOT, TWO_SOCKET, make_pod
from tests.node_enforcer.test_cgroups import v2_tree


def _wait_for(path, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_agent_process_exits_0_on_sigterm(tmp_path, sig):
    cg = tmp_path / "cgroup"
    shutil.copytree(os.path.join(TWO_SOCKET, "fs", "cgroup"), cg)
    ck = tmp_path / "ck.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidewise", "-v", "enforce", "--node", "fixture-node", "--pods-from", "file",
         "--pods", MIXED_PODS, "--sysfs-root", TWO_SOCKET, "--cgroup-root", str(cg), "--reclaim-plan", RECLAIM_PLAN,
         "--checkpoint", str(ck), "--no-eviction", "--interval", "30"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(ck, proc)  # the first pass wrote its checkpoint; the agent now sleeps 30 s
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "stopped after 1 pass(es): the last one finished" in err and "Traceback" not in err
    assert json.loads(ck.read_text())["payload"]["node"] == "fixture-node"


def test_a_sigterm_during_a_pass_lets_it_finish(tmp_path, two_socket):
    pods = [make_pod("db", "dedicated_cores", cpu="4"), make_pod("batch", "reclaimed_cores")]
    cg = str(tmp_path / "cg")
    v2_tree(cg, pods)
    passes = []

    def list_pods():  # the signal arrives once the pass has begun, before any cgroup is written
        passes.append(1)
        os.kill(os.getpid(), signal.SIGTERM)
        return pods

    s = EnforcerSettings(node="n1", checkpoint=str(tmp_path / "ck.json"), interval_seconds=30)
    agent = Agent(s, two_socket, list_pods, V2Driver(cg), HostFiles(),
                  read_pressure_fn=lambda: Pressure(64 * 2**30, 32 * 2**30, 0.0))
    before = signal.getsignal(signal.SIGTERM)
    agent.run_until_signalled()
    assert passes == [1] and agent.stopping
    assert agent.last is not None and os.path.exists(tmp_path / "ck.json")  # enforced and checkpointed
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is put back
