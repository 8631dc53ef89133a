"""`tidewise extender` as a user runs it: a real process answering over HTTP, stopped by SIGTERM;
user mistakes exit 2 with one line naming the flag."""
from __future__ import annotations

import datetime as dt
import json
import signal
import subprocess
import sys

import pytest

from contracts.node_forecast import FORECAST_ANNOTATION
from contracts.reclaim import PLAN_ANNOTATION, utc
from tests.extender.test_extender import NOW, fixture, post
from tests.conftest import ROOT, run_cli
from tests.tidewise.test_bad_inputs import one_line_error


def shifted(items: list, shift: dt.timedelta) -> list:
    """`items` (Nodes and others) with the times of their reclaim plans and node forecasts moved by `shift`."""
    def moved(text: str) -> str:
        return (utc(text) + shift).strftime("%Y-%m-%dT%H:%M:%SZ")

    for o in items:
        ann = o["metadata"].get("annotations") or {}
        for key, fields in ((PLAN_ANNOTATION, ("generated_at", "valid_until")),
                            (FORECAST_ANNOTATION, ("generated", "valid_until", "start"))):
            if key in ann:
                doc = json.loads(ann[key])
                ann[key] = json.dumps(dict(doc, **{f: moved(doc[f]) for f in fields}))
    return items


def state_at(now: dt.datetime, path) -> str:
    """The fixture's cluster state with every time shifted so that its 12:20 is `now` (the command
    reads the real clock)."""
    state = json.loads(fixture("cluster-state.json"))
    shifted(state["items"], now - NOW)
    path.write_text(json.dumps(state))
    return str(path)


def payload_at(now: dt.datetime, name: str) -> bytes:
    """A recorded extender payload whose Nodes' plans and forecasts are shifted as `state_at` shifts the state."""
    args = json.loads(fixture(name))
    if args.get("Nodes"):
        shifted(args["Nodes"]["items"], now - NOW)
    return json.dumps(args).encode()


def test_the_command_serves_from_a_cluster_state_file_and_stops_on_sigterm(tmp_path):
    now = dt.datetime.now(dt.timezone.utc)
    state = state_at(now, tmp_path / "state.json")
    proc = subprocess.Popen([sys.executable, "-m", "tidewise", "extender", "--listen", "127.0.0.1:0",
                             "--cluster-state", state], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert "listening on http://127.0.0.1:" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = line.split("listening on ", 1)[1].split()[0]
        code, r = post(url, "filter", fixture("filter-reclaimed-names.json"))
        assert code == 200 and r["NodeNames"] == ["node-a", "node-e"]
        assert set(r["FailedAndUnresolvableNodes"]) == {"node-c", "node-d"}
        code, r = post(url, "prioritize", payload_at(now, "prioritize-online-nodes.json"))
        scores = {h["Host"]: h["Score"] for h in r}
        assert code == 200 and scores["node-a"] == 0 and scores["node-c"] == 5 and scores["node-e"] > 5
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err


@pytest.mark.parametrize("flags, needle", [
    (["--listen", "nowhere"], "--listen 'nowhere'"),
    (["--listen", "127.0.0.1:99999"], "HOST:PORT"),
    (["--listen", "999.1.1.1:8888"], "--listen '999.1.1.1:8888': '999.1.1.1' is not an IPv4 or IPv6 address"),
    (["--stale-after", "soon", "--cluster-state", "x.json"], "--stale-after 'soon'"),
    (["--explain-pods", "-1", "--cluster-state", "x.json"], "--explain-pods"),
    (["--cluster-state", "/nonexistent/state.json"], "/nonexistent/state.json: no such file"),
    (["--no-topology=yes"], "--no-topology"),
    (["--listen", "127.0.0.1:0", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_flags_exit_2_with_one_line(flags, needle):
    one_line_error(run_cli("extender", *flags, timeout=60), 2, needle)


def test_the_extender_listens_on_loopback_unless_told_otherwise():
    """Outside its manifest (which says 0.0.0.0:8888 behind its NetworkPolicy) nothing else reaches it."""
    from tidewise.cli import build_parser
    from tidewise.commands.extender import _listen

    assert _listen(build_parser().parse_args(["extender"]).listen) == ("127.0.0.1", 8888)


def test_a_cluster_state_that_is_not_yaml_is_one_line(tmp_path):
    bad = tmp_path / "state.yaml"
    bad.write_text("items: [unclosed\n")
    one_line_error(run_cli("extender", "--listen", "127.0.0.1:0", "--cluster-state", str(bad), timeout=60), 2,
                   "state.yaml", "not valid YAML")
