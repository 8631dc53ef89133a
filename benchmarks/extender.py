"""Scheduler extender (issue 16): latency of one filter and one prioritize call for 500 nodes, over
real HTTP on 127.0.0.1, in both nodeCacheCapable modes.

The 500 nodes are the recorded fixture nodes (tests/fixtures/extender/cluster-state.json: real
Node objects with a reclaim plan and a day-long node forecast in their annotations), copied under
500 names with their plans and forecasts renamed and their numbers varied, plus a
CustomNodeResource with two NUMA zones for each. With `nodeCacheCapable: false` every request
carries the 500 whole Nodes (~2 MiB of JSON, parsed per call); with `true` only the names, and the
nodes come from the extender's cache. Each call is timed from the first byte sent to the last byte
read, on one kept-alive connection as kube-scheduler keeps it; the pods are the fixtures' batch
(reclaimed), NUMA-bound dedicated and online pods. The extender is the real command
(`tidewise extender --cluster-state`) in its own process, the client this one.

    .venv/bin/python -m benchmarks.run --only extender            # full: 200 calls per case
    .venv/bin/python -m benchmarks.run --only extender --quick    # 30 calls per case
"""
from __future__ import annotations

import copy
import datetime as dt
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Any, Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "extender")
NODES = 500
TARGET_MS = 50.0


def _load(name: str) -> Any:
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as fh:
        return json.load(fh)


def _renamed(annotation: str, new: str, scale: float, now_shift: dt.timedelta) -> str:
    """An annotation document moved to node `new`, its times shifted to now, its numbers scaled."""
    doc = json.loads(annotation)
    doc["node"] = new
    for key in ("generated_at", "valid_until", "generated", "start"):
        if key in doc:
            t = dt.datetime.fromisoformat(doc[key].replace("Z", "+00:00")) + now_shift
            doc[key] = t.strftime("%Y-%m-%dT%H:%M:%SZ")
    for key in ("reclaimed_millicpu", "online_cpu_millicores", "reclaimable_millicpu"):
        if isinstance(doc.get(key), list):
            doc[key] = [int(v * scale) for v in doc[key]]
        elif isinstance(doc.get(key), int):
            doc[key] = int(doc[key] * scale)
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def cluster(n: int = NODES) -> tuple[list[dict], list[dict]]:
    """`n` nodes (valid plans and forecasts, shifted to now) and a two-zone CNR for each."""
    items = _load("cluster-state.json")["items"]
    good = [o for o in items if o["kind"] == "Node" and o["metadata"]["name"] in ("node-a", "node-b", "node-e")]
    cnr_of = {o["metadata"]["name"]: o for o in items if o["kind"] == "CustomNodeResource"}
    shift = dt.datetime.now(dt.timezone.utc).replace(minute=0, second=0, microsecond=0) - \
        dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
    nodes, cnrs = [], []
    for i in range(n):
        base = good[i % len(good)]
        name = f"node-{i:04d}"
        node = copy.deepcopy(base)
        node["metadata"]["name"] = name
        ann = node["metadata"]["annotations"]
        for key in ("tidewise.io/reclaim-plan", "tidewise.io/node-forecast"):
            ann[key] = _renamed(ann[key], name, 0.6 + (i % 9) / 10, shift)
        nodes.append(node)
        cnr = copy.deepcopy(cnr_of[base["metadata"]["name"]])
        cnr["metadata"]["name"] = name
        cnrs.append(cnr)
    return nodes, cnrs


def _payloads(nodes: list[dict]) -> dict[str, tuple[str, bytes]]:
    names = [n["metadata"]["name"] for n in nodes]
    pods = {"batch": _load("filter-reclaimed-names.json")["Pod"], "numa": _load("filter-numa-names.json")["Pod"],
            "online": _load("prioritize-online-nodes.json")["Pod"]}
    out = {}
    for mode in ("false", "true"):
        def body(pod: dict) -> bytes:
            args = {"Pod": pod, "Nodes": None, "NodeNames": names} if mode == "true" else \
                {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
            return json.dumps(args).encode()

        out[f"filter, reclaimed pod, nodeCacheCapable {mode}"] = ("filter", body(pods["batch"]))
        out[f"filter, NUMA-bound dedicated pod, nodeCacheCapable {mode}"] = ("filter", body(pods["numa"]))
        out[f"prioritize, reclaimed pod, nodeCacheCapable {mode}"] = ("prioritize", body(pods["batch"]))
        out[f"prioritize, online pod, nodeCacheCapable {mode}"] = ("prioritize", body(pods["online"]))
    return out


def _time_calls(port: int, verb: str, body: bytes, calls: int) -> tuple[list[float], int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times, size = [], 0
    try:
        for i in range(calls + 3):  # 3 warm-up calls
            t = time.perf_counter()
            conn.request("POST", f"/scheduler/{verb}", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            took = (time.perf_counter() - t) * 1000
            if resp.status != 200:
                raise RuntimeError(f"{verb}: HTTP {resp.status}: {data[:200]!r}")
            if i >= 3:
                times.append(took)
            size = len(data)
    finally:
        conn.close()
    return times, size


@contextmanager
def _extender(nodes: list[dict], cnrs: list[dict]) -> Iterator[int]:
    """`tidewise extender --cluster-state` as its own process (as in a cluster: the scheduler's calls
    do not share a GIL with it); yields its port."""
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "state.json")
        with open(state, "w", encoding="utf-8") as fh:
            json.dump({"kind": "List", "items": nodes + cnrs}, fh)
        proc = subprocess.Popen([sys.executable, "-m", "tidewise", "extender", "--listen", "127.0.0.1:0",
                                 "--cluster-state", state], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            if "listening on" not in line:
                raise RuntimeError(f"tidewise extender did not start: {line!r}")
            yield int(line.split("listening on ", 1)[1].split()[0].rsplit(":", 1)[1])
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def bench(quick: bool) -> list[dict]:
    nodes, cnrs = cluster()
    rows = []
    with _extender(nodes, cnrs) as port:
        for case, (verb, body) in _payloads(nodes).items():
            times, answer = _time_calls(port, verb, body, 30 if quick else 200)
            q = statistics.quantiles(times, n=20)
            rows.append({"case": case, "request_kib": len(body) / 1024, "answer_kib": answer / 1024,
                         "median_ms": statistics.median(times), "p95_ms": q[18], "max_ms": max(times),
                         "calls": len(times)})
    return rows


def run(quick: bool) -> str:
    load = os.getloadavg()[0]
    rows = bench(quick)
    lines = [
        "## Scheduler extender (`tidewise extender`)",
        "",
        f"One filter or prioritize call for {NODES} nodes, over real HTTP on 127.0.0.1 (one kept-alive "
        "connection, as kube-scheduler keeps it), timed from the request's first byte to the answer's last. "
        "Nodes: the recorded fixture nodes under 500 names, each with a valid reclaim plan and a 24-step "
        "node forecast, and a two-zone CustomNodeResource. `nodeCacheCapable false`: the 500 whole Nodes "
        "are in every request and parsed per call; `true`: names only, nodes from the extender's cache. "
        f"Timings are upper bounds: 2 cores shared with other work (load average {load:.1f} at the start).",
        "",
        "    .venv/bin/python -m benchmarks.run --only extender",
        "",
        "| case | request KiB | answer KiB | median ms | p95 ms | max ms | calls |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['case']} | {r['request_kib']:.0f} | {r['answer_kib']:.0f} | {r['median_ms']:.1f} | "
                     f"{r['p95_ms']:.1f} | {r['max_ms']:.1f} | {r['calls']} |")
    lines.append("")
    for mode in ("true", "false"):
        p95 = max(r["p95_ms"] for r in rows if r["case"].endswith(f"nodeCacheCapable {mode}"))
        verdict = "within" if p95 <= TARGET_MS else "OVER"
        lines.append(f"- nodeCacheCapable {mode}: worst p95 {p95:.1f} ms, {verdict} the {TARGET_MS:.0f} ms target "
                     "per call (issue 16).")
    lines += [
        "",
        "`nodeCacheCapable: true` is what deploy/scheduler-extender.yaml sets. With `false` the call's cost is "
        "mostly the standard library's JSON: decoding the ~1.7 MiB of Nodes in each request and, for a filter, "
        "encoding the passing Nodes back (the scheduler reads Nodes, not names, in that mode); in-process each is "
        "~15-20 ms here, the rest is moving 2-3 MiB between two processes on a busy machine. Parsed plans and "
        "forecasts are remembered by annotation text and NUMA zones by CNR resourceVersion, so neither mode parses "
        "them per call; sending the body without waiting for the ACK of the headers (TCP_NODELAY) removed a "
        "40 ms delayed-ACK wait from every call.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run(quick=True))
