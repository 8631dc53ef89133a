"""The first hour of a new user, on a fresh clone (no ../shared beside it): `make demo`, then every
command the README runs on the demo's files, the studies' default source, and the demo's printed
`enforce` command, which gives the plan the demo's summary shows."""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shlex

import numpy as np
import pandas as pd
import pytest
import yaml

from contracts.quantity import to_bytes, to_millicpu
from predictor.sources.prometheus import WORKLOAD_CONTAINER
from predictor.types import SeriesKey
from tests.conftest import ROOT, run_cli, run_main

# one worker runs every test of the demo's output, so the session's demo runs once (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("demo")
SIMULATION_OUT = {"colocation": "simulation-out", "tide": "tide-out", "rebalance": "rebalance-out"}


def readme_commands() -> list[str]:
    """The README's `tidewise` command lines that run on the demo's files (they name `demo-out/`), in the
    order a reader meets them: the shell blocks' (continuation lines joined, comments cut), then those
    quoted in the prose (a code span may wrap). Synopses (`[--flag]`, `a|b`) are left out."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    found = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            found.append(line.split(" #")[0].strip())
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    found += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    return [c for c in found if c.startswith("tidewise ") and "demo-out/" in c and not re.search(r"[\[\]|]", c)]


def _workloads(work: str) -> dict[str, dict]:
    """namespace/Kind/name -> the demo cluster's Deployment or StatefulSet."""
    with open(os.path.join(work, "demo-out", "cluster-state.yaml"), encoding="utf-8") as fh:
        items = yaml.safe_load(fh)["items"]
    return {f"{o['metadata']['namespace']}/{o['kind']}/{o['metadata']['name']}": o for o in items
            if o["kind"] in ("Deployment", "StatefulSet")}


def test_the_demo_history_holds_requests_and_replicas_as_fetch_writes_them(demo_clone):
    work, _ = demo_clone
    df = pd.read_parquet(os.path.join(work, "demo-out", "history.parquet"))
    workloads = _workloads(work)
    for wl, obj in workloads.items():
        ns, kind, name = wl.split("/")
        replicas = obj["spec"]["replicas"]
        (c,) = obj["spec"]["template"]["spec"]["containers"]
        requests = c["resources"]["requests"]
        # `fetch --what requests,replicas`: per container the pods' requests summed (--aggregate sum), per
        # workload its replicas under the container `-`, with the label columns of every fetched series
        want = {SeriesKey(ns, kind, name, c["name"], "cpu_request").id: replicas * to_millicpu(requests["cpu"]) / 1000,
                SeriesKey(ns, kind, name, c["name"], "memory_request").id: replicas * to_bytes(requests["memory"]),
                SeriesKey(ns, kind, name, WORKLOAD_CONTAINER, "replicas").id: float(replicas)}
        for sid, value in want.items():
            rows = df[df["series"] == sid]
            assert len(rows) and np.allclose(rows["value"], value, rtol=1e-9), (sid, value, rows["value"].unique())
            key = SeriesKey.parse(sid)
            assert rows[["namespace", "kind", "workload", "container", "resource"]].drop_duplicates().values.tolist() \
                == [[key.namespace, key.kind, key.name, key.container, key.resource]]
    # what the simulations read from it: every workload's requests and pods
    from studies.simulation.harness.history import load_user_history

    h = load_user_history(os.path.join(work, "demo-out", "history.parquet"), pd.Timedelta("5m"), days=3)
    # a workload whose last days hold an hour-long gap is left out, and said so
    assert len(h.workloads) + len(h.skipped) == len(workloads) and len(h.workloads) > len(workloads) // 2
    assert all(w.request is not None for w in h.workloads)
    assert {w.name.rsplit("/", 1)[0]: w.pods for w in h.workloads} == \
        {wl: o["spec"]["replicas"] for wl, o in workloads.items() if f"{wl}/app" not in h.skipped}


def _check_simulation(work: str, study: str, r) -> None:
    out = os.path.join(work, SIMULATION_OUT[study])
    with open(os.path.join(out, "results.json"), encoding="utf-8") as fh:
        h = json.load(fh)["history"]
    assert h["file"] == "demo-out/history.parquet" and h["workloads"] > len(_workloads(work)) // 2, h  # some may be short
    assert h["requests_from_file"] == h["workloads"] and h["pods"] > h["workloads"], h  # split into its pods
    assert "workloads in demo-out/history.parquet" in r.stderr, r.stderr
    if study != "rebalance":  # the page names the data it read, not the public traces
        page = open(os.path.join(out, "report.html"), encoding="utf-8").read()
        assert f"replaying {h['workloads']} workloads of the history demo-out/history.parquet" in page
        assert f"History: demo-out/history.parquet at 5m, {h['workloads']} workloads as {h['pods']} pods" in page
        assert "real traces" not in page and "Cloud Cluster Capacity" not in page


def test_every_readme_command_runs_on_the_demo_files(demo_clone):
    """`make demo`, then each command the README runs on demo-out/, in a fresh clone's folder (no
    ../shared beside it): each exits 0 and says what it did."""
    work, _ = demo_clone
    commands = readme_commands()
    starts = ["tidewise simulate colocation", "tidewise simulate tide", "tidewise simulate rebalance",
              "tidewise replay vpa", "tidewise report --cost", "tidewise serve --once", "tidewise --config",
              "tidewise enforce"]
    assert all(any(c.startswith(s) for c in commands) for s in starts), commands
    for command in commands:
        r = run_cli(*shlex.split(command)[1:], cwd=work, timeout=1800)
        assert r.returncode == 0, f"{command}\n{r.stderr[-3000:]}"
        assert "Traceback" not in r.stderr, f"{command}\n{r.stderr[-3000:]}"
        study = next((s for s in SIMULATION_OUT if command.startswith(f"tidewise simulate {s} ")), None)
        if study:
            _check_simulation(work, study, r)
        elif command.startswith("tidewise replay vpa"):
            # usage only: no requests nor replicas
            assert f"replayed vpa for {2 * len(_workloads(work))} series" in r.stderr, r.stderr
        elif command.startswith("tidewise report --cost"):
            assert "not measured" not in r.stderr and "tidal requests (VPA)" in r.stderr, r.stderr
        elif command.startswith("tidewise enforce"):
            assert "node node-0: 2 socket(s), 2 NUMA node(s), 16 cores, 32 threads" in r.stdout, r.stdout


def test_the_studies_read_the_demo_history_where_the_traces_are_missing(demo_clone, tmp_path):
    work, _ = demo_clone
    out = tmp_path / "o"
    r = run_cli("simulate", "rebalance", "--days", "1", "--no-sweeps", "--out", str(out), cwd=work)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines()[0] == ("no traces in ../shared/data: reading the demo's history, --history "
                                        "demo-out/history.parquet (--traces DIR for the public traces)")
    assert json.loads((out / "results.json").read_text())["history"]["file"] == "demo-out/history.parquet"
    # with neither, one line that names the fix; nothing written
    r = run_cli("simulate", "colocation", "--out", str(out / "none"), cwd=str(tmp_path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "no demo-out/history.parquet: run `make demo` first" in r.stderr and "--history FILE" in r.stderr
    assert not (out / "none").exists()
    help_text = run_main("simulate", "tide", "--help").stdout
    assert "demo-out/history.parquet" in " ".join(help_text.split())


def _pools(text: str) -> str:
    return re.search(r"pools (reserve .*? reclaim \S+ \(\d+\))", text).group(1)  # type: ignore[union-attr]


def test_the_printed_enforce_command_gives_the_plan_the_summary_shows(demo_clone, monkeypatch):
    """The summary's plan is made at the demo's decision time, when the reclaim plan serve wrote is in
    force: the printed command, run with the agent's clock then, plans the same topology, pools and pods."""
    work, demo = demo_clone
    line = next(ln for ln in demo.stderr.splitlines() if ln.startswith("enforcement plan (dry-run, node "))
    summary, command = line.split(" -- ", 1)
    command = command.split(" (after that time")[0]
    topology = re.search(r"node node-0, (.*?)\): ", summary).group(1)  # type: ignore[union-attr]
    placed = int(re.search(r"(\d+) pod\(s\) placed", summary).group(1))  # type: ignore[union-attr]
    assert "--sysfs-root demo-out/sysfs/node-0" in command
    plan_file = os.path.join(work, "demo-out", "recommendations", "node", "node-0.yaml")
    with open(plan_file, encoding="utf-8") as fh:
        annotation = json.loads(yaml.safe_load(fh)["metadata"]["annotations"]["tidewise.io/reclaim-plan"])
    decided = dt.datetime.fromisoformat(annotation["generated_at"].replace("Z", "+00:00"))

    import node_enforcer.collect.reclaim as reclaim

    loader = reclaim.reclaim_loader
    monkeypatch.setattr(reclaim, "reclaim_loader", lambda path, node, **kw: loader(path, node, now=lambda: decided))
    with contextlib.chdir(work):
        r = run_main(*shlex.split(command)[1:])
    assert r.returncode == 0, r.stderr
    assert f"node node-0: {topology}\n" in r.stdout, (topology, r.stdout)
    assert f"pools: {_pools(summary)}\n" in r.stdout, (summary, r.stdout)
    rows = r.stdout.split("OOM ADJ\n", 1)[1].splitlines()
    assert sum(1 for row in rows if re.match(r"\S+/\S+\s+\w+_cores\s", row)) == placed, r.stdout


def test_the_demo_sysfs_tree_reads_as_the_node_it_describes(tmp_path):
    from node_enforcer.collect.topology import read_topology
    from node_enforcer.model.topology import Topology
    from predictor.sources.synthetic import Node
    from studies.demo import write_sysfs

    for threads, numa in ((32, 2), (8, 1), (48, 4)):
        root = tmp_path / f"{threads}-{numa}"
        write_sysfs(str(root), Node("n", cpu_cores=threads, memory_bytes=64 * 2**30, numa_nodes=numa))
        got, want = read_topology(str(root)), Topology.uniform(threads, numa)
        assert got.cores == want.cores and got.numa_cpus == want.numa_cpus
        assert got.numa_memory_bytes == {n: 64 * 2**30 // numa for n in range(numa)}
