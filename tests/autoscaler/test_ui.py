"""`tidewise serve --ui` (issue 25 item 3): a real serve process on the API fake, with the file sink
(review mode), serving its live page on a free loopback port. The numbers on the fleet, namespace and
workload pages equal those of /decisions.json, which equal the run's own decisions.json and review
YAML (and the cluster's requests); only GET; unknown paths 404; names escaped; headless Chromium renders
the pages without console errors. A second part drives the loop in this process: the page follows
each run, and a frozen run keeps the last good decisions, flagged."""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser

import pytest
import yaml

from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.loop import ServingLoop
from autoscaler.ui import pages
from autoscaler.ui.server import UiServer
from autoscaler.ui.snapshot import Snapshot
from contracts.quantity import GIB, format_units, to_units
from predictor.history import write_long
from predictor.sources.files import FileSource
from studies.demo import cluster_objects
from testsupport.kube_fake import FakeApiServer
from tests.autoscaler.conftest import StaticCluster, fast_settings
from tests.chromium import CHROMIUM, console_errors, plot_pixels, screenshot
from tests.conftest import ROOT, run_main, write_kubeconfig
from tests.integration.prometheus_server import free_port

EVIL = '<img src=x onerror="alert(1)">&'


def in_place(objects):
    """One VPA sized vertically only (no HPA) made InPlaceOrRecreate, its container resizing CPU in
    place: that workload's CPU is in the in-place regime, its memory in the restart one."""
    vpa = next(o for o in objects if o["kind"] == "VerticalPodAutoscaler"
               and "minAllowed" in o["spec"]["resourcePolicy"]["containerPolicies"][0])
    vpa["spec"]["updatePolicy"]["updateMode"] = "InPlaceOrRecreate"
    ref = vpa["spec"]["targetRef"]
    wl = next(o for o in objects if o["kind"] == ref["kind"] and o["metadata"]["name"] == ref["name"]
              and o["metadata"]["namespace"] == vpa["metadata"]["namespace"])
    for c in wl["spec"]["template"]["spec"]["containers"]:
        c["resizePolicy"] = [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]
    return f"{vpa['metadata']['namespace']}/{ref['kind']}/{ref['name']}"


def get(url, method="GET"):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


@pytest.fixture(scope="module")
def served(small, tmp_path_factory):
    """serve --ui running forever (one run: the interval is an hour) until the module is done."""
    d = tmp_path_factory.mktemp("ui")
    write_long(small[1], str(d / "history.parquet"))
    objects = cluster_objects(small[0])
    key = in_place(objects)
    fake = FakeApiServer(objects).start()
    port = free_port()
    cmd = [sys.executable, "-m", "tidewise", "serve", "--ui", "--ui-address", f"127.0.0.1:{port}",
           "--kubeconfig", write_kubeconfig(d / "kubeconfig", fake.url), "--source", "file",
           "--input", str(d / "history.parquet"), "--model", "seasonal_naive_daily", "--sink", "file",
           "--out", str(d / "out"), "--interval", "1h", "--port", "0", "--no-leader-election", "--no-watch"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        doc = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                doc = json.loads(get(base + "/decisions.json")[1])
                if doc["run"] is not None:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        assert doc and doc["run"], proc.stderr.read() if proc.poll() is not None else "no run within 90 s"
        yield base, doc, d, objects, key
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        fake.stop()


class Rows(HTMLParser):
    """`<tr class=...>` rows with their data- attributes and each classed cell's text."""

    def __init__(self, row_class):
        super().__init__()
        self.row_class, self.rows, self.row, self.cell = row_class, [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") == self.row_class:
            self.row = {k: v for k, v in a.items() if k.startswith("data-")}
            self.rows.append(self.row)
        elif tag == "td" and self.row is not None and a.get("class"):
            self.cell = a["class"].split()[0]
            self.row[self.cell] = ""

    def handle_endtag(self, tag):
        if tag == "td":
            self.cell = None
        elif tag == "tr":
            self.row = None

    def handle_data(self, data):
        if self.cell is not None:
            self.row[self.cell] += data


def rows(html, row_class):
    p = Rows(row_class)
    p.feed(html)
    return p.rows


def shown(resource, units):
    """A request or recommendation as the page shows it: cores or GiB to 3 decimals."""
    return "—" if units is None else f"{units / 1000:.3f}" if resource == "cpu" else f"{units / GIB:.3f}"


def review_yaml(d, w):
    with open(d / "out" / "verticalpodautoscaler" / w["namespace"] / f"{w['vpa']}.yaml") as fh:
        return yaml.safe_load(fh)


def test_the_page_json_is_the_run_s_decisions_json_and_review_files(served):
    base, doc, d, objects, _ = served
    assert doc["mode"] == "review" and doc["run"]["number"] == 1 and doc["run"]["outcome"] == "ok"
    with open(d / "out" / "decisions.json") as fh:
        written = json.load(fh)
    vpa_keys = {k for k in written if k.startswith("VerticalPodAutoscaler/")}
    assert vpa_keys and vpa_keys == {k for k in doc["decisions"] if k.startswith("VerticalPodAutoscaler/")}
    for k, v in doc["decisions"].items():
        assert written[k] == v, k
    pods = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects if o["kind"] == "Pod"}
    assert len(doc["workloads"]) == len(vpa_keys)
    for w in doc["workloads"]:
        recs = {r["containerName"]: r for r in review_yaml(d, w)["status"]["recommendation"]["containerRecommendations"]}
        reasons = written[f"VerticalPodAutoscaler/{w['namespace']}/{w['vpa']}"]["containers"]
        mine = [p for (ns, name), p in pods.items() if ns == w["namespace"] and name.startswith(w["name"] + "-")]
        for c in w["containers"]:
            for r in c["resources"]:
                assert r["target_text"] == recs[c["container"]]["target"][r["resource"]]
                assert r["reason"] == reasons[c["container"]][r["resource"]]
                asked = [to_units(r["resource"], next(x for x in p["spec"]["containers"] if x["name"] == c["container"])
                                  ["resources"]["requests"][r["resource"]]) for p in mine]
                assert r["request"] == round(sum(asked) / len(asked))
        for res, per in (("cpu", 1000), ("memory", GIB)):
            if res in w["totals"]:
                t = w["totals"][res]
                assert w["saves"]["cores" if res == "cpu" else "gib"] == round((t["request"] - t["target"]) * w["replicas"] / per, 3)
        assert w["change"] == "would write"


def test_the_fleet_page_shows_the_numbers_of_decisions_json(served):
    base, doc, *_ = served
    code, html, headers = get(base + "/")
    assert code == 200 and "default-src 'none'" in headers["Content-Security-Policy"]
    assert f"run {doc['run']['number']}, decision time {doc['run']['now']}" in html and "would write" in html
    on_page = {r["data-key"]: r for r in rows(html, "workload")}
    assert set(on_page) == {w["key"] for w in doc["workloads"]}
    for w in doc["workloads"]:
        row = on_page[w["key"]]
        assert row["name"] == w["name"] and row["replicas"] == str(w["replicas"]) and row["change"] == w["change"]
        for res in ("cpu", "memory"):
            t = w["totals"].get(res)
            assert row[f"{res}-target"] == (shown(res, t["target"]) if t else "—")
            assert row[f"{res}-request"] == (shown(res, t["request"]) if t else "—")
        assert row["saves-cores"] == pages.num(w["saves"]["cores"]) and row["saves-gib"] == pages.num(w["saves"]["gib"])
        assert row["regime"] == w["regime"]
    ns = doc["workloads"][0]["namespace"]
    code, html, _ = get(base + f"/ns/{ns}")
    assert code == 200 and {r["data-key"] for r in rows(html, "workload")} == \
        {w["key"] for w in doc["workloads"] if w["namespace"] == ns}


def test_a_workload_page_shows_each_resource_its_regime_reason_and_plot(served):
    base, doc, d, _, key = served
    w = next(w for w in doc["workloads"] if w["key"] == key)
    code, html, _ = get(base + "/w/" + key)
    assert code == 200
    on_page = {(r["data-container"], r["data-resource"]): r for r in rows(html, "resource")}
    assert len(on_page) == sum(len(c["resources"]) for c in w["containers"]) == 2
    for c in w["containers"]:
        for r in c["resources"]:
            row = on_page[(c["container"], r["resource"])]
            unit = " cores" if r["resource"] == "cpu" else " GiB"
            assert row["request"] == shown(r["resource"], r["request"]) + unit
            assert row["target"] == shown(r["resource"], r["target"]) + unit
            assert row["bounds"] == f"{shown(r['resource'], r['lower'])} – {shown(r['resource'], r['upper'])}{unit}"
            assert row["reason"] == r["reason"] and row["regime-why"] == r["regime_why"]
            # the reason's raw value in the page's unit, never raw millicores or bytes
            assert re.search(r" = \d[\d.,]*(m| cores| GiB| MiB| KiB)(;|$)", row["reason"]), row["reason"]
            assert row["regime"] == ("in-place" if r["resource"] == "cpu" else "restart")
            assert row["regime-why"].startswith(f"regime {row['regime']} (")
    assert w["regime"] == "mixed"
    assert html.count('<svg class="plot"') == 2 and html.count('class="band"') == 2 and 'class="usage"' in html


def test_only_get_and_head_unknown_paths_404_and_names_escaped(served):
    base, doc, *_ = served
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        code, _, headers = get(base + "/", method)
        assert code == 405 and headers["Allow"] == "GET, HEAD", method
    for path, want in (("/", 200), ("/decisions.json", 200), ("/nope", 404)):
        # HEAD: the GET's status and headers (the length of the body it would send), and no body
        code, body, headers = get(base + path, "HEAD")
        full, page, got = get(base + path)
        assert code == full == want and body == "", path
        assert headers["Content-Length"] == str(len(page.encode())) and headers["Content-Type"] == got["Content-Type"]
        assert headers["Content-Security-Policy"] == got["Content-Security-Policy"]
    for path in ("/nope", "/ns/nope", "/w/a/b", "/w/" + doc["workloads"][0]["key"] + "x", "/decisions.json/x"):
        assert get(base + path)[0] == 404, path
    code, html, _ = get(base + "/ns/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
    assert code == 404 and "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # every name from the cluster or a decision is escaped on every page
    evil = copy.deepcopy(doc)
    w = evil["workloads"][0]
    w.update(namespace=EVIL, name=EVIL, kind=EVIL, key=f"{EVIL}/{EVIL}/{EVIL}", change=EVIL)
    w["containers"][0]["container"] = EVIL
    w["containers"][0]["resources"][0]["reason"] = EVIL
    snap = Snapshot(evil)
    for html in (pages.fleet(evil, 5), pages.namespace(evil, EVIL, 5), pages.workload(snap, w["key"], 5)):
        assert "<img" not in html and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;" in html


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed (make system-deps)")
def test_chromium_renders_the_pages_without_console_errors(served, tmp_path):
    base, doc, _, _, key = served
    with ThreadPoolExecutor(2) as pool:  # two Chromium processes at once: each waits mostly on its own start
        shots = [pool.submit(screenshot, base + path, str(tmp_path / f"{name}.png"), str(tmp_path / name))
                 for name, path in (("fleet", "/"), ("workload", "/w/" + key))]
        fleet, one = (s.result() for s in shots)
    assert console_errors(fleet) == [] and console_errors(one) == []
    fleet_ink, _ = plot_pixels(str(tmp_path / "fleet.png"))
    ink, blue = plot_pixels(str(tmp_path / "workload.png"))
    assert fleet_ink > 0.01 and ink > 0.02
    assert blue > 2000  # the forecast bands and medians are drawn


def test_the_page_follows_the_loop_and_keeps_the_last_good_run_when_one_freezes(small, objects, tmp_path):
    path = tmp_path / "history.parquet"
    write_long(small[1], str(path))
    loop = ServingLoop(fast_settings(), FileSource(str(path)), StaticCluster(objects), DryRunSink())
    ui = UiServer("127.0.0.1", 0, "dry-run", 5).start()
    loop.observers.append(ui.observe)
    base = f"http://127.0.0.1:{ui.port}"
    try:
        assert "no run has completed yet" in get(base + "/")[1]
        loop.run_once()
        first = json.loads(get(base + "/decisions.json")[1])
        assert first["run"]["number"] == 1 and first["mode"] == "dry-run"
        assert first["workloads"] and {w["change"] for w in first["workloads"]} == {"would write"}
        loop.run_once()
        second = json.loads(get(base + "/decisions.json")[1])
        assert second["run"]["number"] == 2
        # the decisions were the same: nothing moved past the dead band, nothing would be written again
        assert {w["change"] for w in second["workloads"]} == {"unchanged"} and not second["decisions"]
        os.remove(path)  # the source fails: the run freezes
        loop.run_once()
        third = json.loads(get(base + "/decisions.json")[1])
        assert third["run"] == second["run"] and third["workloads"] == second["workloads"]
        assert third["latest"]["number"] == 3 and third["latest"]["outcome"] == "frozen"
        assert third["latest"]["step"] == "fetch"
        assert "the latest run (3" in get(base + "/")[1]
    finally:
        ui.stop()


@pytest.mark.parametrize("flags,says", [
    (["--ui", "--once"], "--ui shows the decisions while serve runs: drop --once"),
    (["--ui-address", "127.0.0.1:8088"], "--ui-address is only used with --ui"),
    (["--ui", "--ui-address", "localhost"], "--ui-address 'localhost' is not HOST:PORT"),
    (["--ui", "--ui-address", "127.0.0.1:0"], "port 0 is not a page"),
])
def test_usage_mistakes_exit_2_with_one_line(flags, says, tmp_path):
    r = run_main("serve", "--source", "synthetic", "--cluster-state", str(tmp_path / "none.yaml"), *flags)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_busy_ui_address_exits_2(small, objects, tmp_path):
    import socket

    state = tmp_path / "cluster-state.yaml"
    state.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_main("serve", "--source", "synthetic", "--cluster-state", str(state), "--port", "0",
                     "--ui", "--ui-address", f"127.0.0.1:{port}")
    assert r.returncode == 2 and f"--ui-address 127.0.0.1:{port}: cannot listen" in r.stderr, r.stderr
