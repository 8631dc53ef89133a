import json
import pathlib

import pandas as pd
import pytest

from tests.conftest import run_cli


@pytest.mark.xdist_group("demo")  # with the other tests of the session's demo (tests/studies/test_demo_studies.py)
def test_demo_writes_every_output(demo_clone):
    work, r = demo_clone  # `tidewise demo --out demo-out` (smaller: conftest.DEMO_SIZE), once a session
    out = pathlib.Path(work) / "demo-out"
    hist = pd.read_parquet(out / "history.parquet")
    fc = pd.read_csv(out / "forecasts.csv")
    profiles = json.loads((out / "profiles.json").read_text())
    html = (out / "report.html").read_text()
    series = set(hist["series"])
    workloads = {s.rsplit("/", 2)[0] for s in series}
    assert len(workloads) == 6 and len({s.split("/")[0] for s in series}) >= 3  # conftest.DEMO_SIZE
    # usage is profiled and forecast; the requests and replicas series beside it are the cluster's state
    usage = {s for s in series if s.rsplit("/", 1)[1] in ("cpu", "memory")}
    assert {s.rsplit("/", 1)[1] for s in series - usage} == {"cpu_request", "memory_request", "replicas"}
    assert set(fc["series"]) == usage and set(profiles) == usage
    assert (fc.groupby("series").size() == 288).all()
    assert {"tidal", "flat", "bursty"} <= {p["class"] for p in profiles.values()}
    assert html.count("<img") >= len(workloads) and "http://" not in html and "https://" not in html
    assert "workload" in r.stdout and "tidal" in r.stdout  # the summary table
    import yaml

    state = yaml.safe_load((out / "cluster-state.yaml").read_text())
    kinds = {o["kind"] for o in state["items"]}
    assert {"VerticalPodAutoscaler", "HorizontalPodAutoscaler", "Node", "Pod"} <= kinds
    written = {p.relative_to(out / "recommendations").parts[0] for p in (out / "recommendations").rglob("*.yaml")}
    assert {"verticalpodautoscaler", "node"} <= written
    # a small real cluster (issue 25 item 6): ReplicaSets, and pods.yaml for `enforce --pods-from file`
    assert "ReplicaSet" in kinds
    pods = yaml.safe_load((out / "pods.yaml").read_text())["items"]
    assert pods == [o for o in state["items"] if o["kind"] == "Pod"]
    assert all(p["metadata"]["uid"] and p["metadata"]["ownerReferences"][0]["controller"] for p in pods)
    # the summary ends with a dry-run rebalance and one node agent's plan, each a line with its command
    rebalance = next(line for line in r.stderr.splitlines() if line.startswith("rebalance (dry-run, ok): "))
    assert "pod(s) kept" in rebalance and "no controller" not in rebalance and "tidewise --config" in rebalance
    enforcement = next(line for line in r.stderr.splitlines() if line.startswith("enforcement plan (dry-run, node "))
    placed = int(enforcement.split("): ")[1].split(" pod(s) placed")[0])
    assert placed > 0 and "pools reserve" in enforcement and "--reclaim-plan" in enforcement
    assert "--sysfs-root demo-out/sysfs/node-0" in enforcement and (out / "sysfs" / "node-0").is_dir()


def test_profile_command_writes_json(tmp_path):
    idx = pd.date_range("2024-01-01", periods=3 * 288, freq="5min", tz="UTC")
    inp = tmp_path / "h.csv"
    pd.DataFrame({"series": "a", "timestamp": idx.strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "value": 1 + (idx.hour >= 12)}).to_csv(inp, index=False)
    out = tmp_path / "p.json"
    r = run_cli("profile", "--input", str(inp), "--output", str(out))
    assert r.returncode == 0, r.stderr
    p = json.loads(out.read_text())["a"]
    assert p["class"] in {"tidal", "flat", "bursty", "trending", "insufficient-history"}
    assert p["peak_window"]["start"] == "12:00"
    assert "profiled 1 series" in r.stderr
    # progress off a terminal: the start, the one series, the end
    assert [ln.split(" (")[0] for ln in r.stderr.splitlines() if ln.startswith("profiling: ")][:2] == \
        ["profiling: 1 ...", "profiling: 1/1"]
