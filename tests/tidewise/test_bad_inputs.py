"""Issue 10, section 4: a user mistake ends in exit 2 and one line naming the input and the fix (an
outside failure in exit 1 and one line), never a traceback, a wrapped integer or a replaced device."""
import http.server
import os
import stat
import threading

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli


def one_line_error(r, code=2, *needles):
    assert r.returncode == code, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def history_csv(path, days=3.0, value=lambda i: 2 + np.sin(i / 40), extra=None, start="2024-03-01"):
    ts = pd.date_range(start, periods=int(days * 288), freq="5min", tz="UTC")
    i = np.arange(len(ts))
    frame = pd.DataFrame({"series": "a", "timestamp": ts.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": value(i)})
    for k, v in (extra or {}).items():
        frame[k] = v
    frame.to_csv(path, index=False)
    return str(path)


@pytest.fixture
def good(tmp_path):
    return history_csv(tmp_path / "h.csv")


# --- replay hpa: a demand needing more replicas than Kubernetes can count ---------------------------

def test_replay_hpa_huge_demand_is_refused_not_wrapped(tmp_path):
    # a demand in any unit may be 1e12 (the unit check's bound is 1 PiB's count); per replica 1e-3 makes it absurd
    inp = history_csv(tmp_path / "huge.csv", value=lambda i: (2 + np.sin(i / 40)) * 1e12, extra={"per_replica": 1e-3})
    out = tmp_path / "r.csv"
    line = one_line_error(run_cli("replay", "hpa", "--input", inp, "--output", str(out)), 2,
                          "huge.csv", "series 'a'", "2147483647", "units")
    assert "replicas" in line and not out.exists()


def test_replay_hpa_infinite_ratio_is_refused(tmp_path):
    inp = history_csv(tmp_path / "inf.csv", value=lambda i: (2 + np.sin(i / 40)) * 1e300, extra={"per_replica": 1e-300})
    one_line_error(run_cli("replay", "hpa", "--input", inp, "--output", str(tmp_path / "r.csv")), 2, "inf.csv")


def test_replicas_needed_never_wraps():
    from autoscaler.logic.hpa import MAX_REPLICAS, TooManyReplicas, replicas_needed, simulate_reactive_hpa

    assert replicas_needed(np.array([MAX_REPLICAS - 0.5]), 1.0).tolist() == [MAX_REPLICAS]
    with pytest.raises(TooManyReplicas):
        replicas_needed(np.array([1e19]), 1.0)
    with pytest.raises(TooManyReplicas):
        simulate_reactive_hpa(np.array([1.0, 1e30]), 1.0, 1)


# --- year 2300 (the parser's range check, seen through the command line) --------------------------

@pytest.mark.parametrize("command", [["forecast"], ["replay", "vpa"]])
def test_year_2300_timestamps_are_one_line(tmp_path, command):
    inp = tmp_path / "y2300.csv"
    inp.write_text("series,timestamp,value\na,2300-01-01T00:00:00Z,1\na,2300-01-01T00:05:00Z,2\n")
    one_line_error(run_cli(*command, "--input", str(inp), "--output", str(tmp_path / "o.csv")), 2, "y2300.csv", "2300")
    assert not (tmp_path / "o.csv").exists()


def test_fetch_range_in_2300_is_refused_before_any_query(tmp_path):
    # the URL is unreachable on purpose: the range must be refused before anything is asked of it
    one_line_error(run_cli("fetch", "--prometheus-url", "http://127.0.0.1:9", "--start", "2300-01-01",
                           "--end", "2300-01-02", "--output", str(tmp_path / "h.csv")), 2, "--end", "1990..2200")


def test_origin_in_2300_is_refused(tmp_path, good):
    one_line_error(run_cli("forecast", "--input", good, "--output", str(tmp_path / "f.csv"), "--origin",
                           "2300-01-01T00:00:00Z"), 2, "--origin")


# --- a one-row series ------------------------------------------------------------------------------

def test_one_row_series(tmp_path):
    inp = tmp_path / "one.csv"
    inp.write_text("series,timestamp,value,per_replica\na,2024-01-01T00:00:00Z,1,1\n")
    out = tmp_path / "o.csv"
    one_line_error(run_cli("forecast", "--input", str(inp), "--output", str(out)), 2, "one.csv", "series 'a'", "at least 2")
    assert not out.exists()
    for kind in ("vpa", "hpa"):
        one_line_error(run_cli("replay", kind, "--input", str(inp), "--output", str(out)), 2, "one.csv", "series 'a'")
    # a profile of one value is a valid answer: the class says why nothing more can be said
    r = run_cli("profile", "--input", str(inp), "--output", str(out))
    assert r.returncode == 0, r.stderr
    assert "insufficient-history" in out.read_text()


# --- durations: overflow, negative, zero, and the forecast grid's limits ------------------------------

@pytest.mark.parametrize("flags,needle", [
    (["--horizon", "100000w"], "longer than 10 years"),
    (["--horizon", "9" * 400 + "s"], "longer than 10 years"),
    (["--horizon=-5m"], "negative"),
    (["--horizon", "0m"], "longer than zero"),
    (["--step", "0s"], "longer than zero"),
    (["--step", "0.1s"], "shorter than 1 second"),
    (["--step", "10s"], "--step 10s: use 1m to 1d"),
    (["--step", "2d"], "--step 2d: use 1m to 1d"),
    (["--horizon", "36d"], "at most 35d"),
    (["--horizon", "35d", "--step", "1m"], "50,000"),
    (["--quantiles", "1.5"], "--quantiles"),
    (["--quantiles", "nan"], "--quantiles"),
])
def test_absurd_grid_is_refused(tmp_path, good, flags, needle):
    out = tmp_path / "f.csv"
    one_line_error(run_cli("forecast", "--input", good, "--output", str(out), *flags), 2, needle)
    assert not out.exists()


def test_durations_library_limits():
    from predictor.durations import parse_duration
    from predictor.errors import InputError

    assert parse_duration("3650d") == pd.Timedelta("3650D")
    for bad in ("100000w", "-1h", "0s", "0.5s", "1e3s", ""):
        with pytest.raises(InputError):
            parse_duration(bad)


# --- output paths: only a regular file or a new name in an existing folder ---------------------------

def test_output_that_is_a_folder_is_refused(tmp_path, good):
    folder = tmp_path / "adir"
    folder.mkdir()
    one_line_error(run_cli("forecast", "--input", good, "--output", str(folder)), 2, "--output", "is a folder")
    assert folder.is_dir() and not os.listdir(folder) and sorted(os.listdir(tmp_path)) == ["adir", "h.csv"]


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root (the case the issue saw as root)")
def test_output_that_is_a_device_keeps_the_device(tmp_path, good):
    dev = tmp_path / "full"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # our own /dev/full, so nothing shared is at risk
    one_line_error(run_cli("forecast", "--input", good, "--output", str(dev)), 2, "character device")
    assert stat.S_ISCHR(os.lstat(dev).st_mode)
    one_line_error(run_cli("profile", "--input", good, "--output", str(dev)), 2, "character device")
    assert stat.S_ISCHR(os.lstat(dev).st_mode)


def test_output_that_is_a_fifo_or_a_link_to_a_folder_is_refused(tmp_path, good):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    one_line_error(run_cli("replay", "vpa", "--input", good, "--output", str(fifo)), 2, "named pipe")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "d")
    one_line_error(run_cli("forecast", "--input", good, "--output", str(tmp_path / "link")), 2, "is a folder")
    assert (tmp_path / "link").is_symlink()


def test_symlink_to_a_regular_file_is_written_through(tmp_path, good):
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    (tmp_path / "link.csv").symlink_to(target)
    r = run_cli("forecast", "--input", good, "--output", str(tmp_path / "link.csv"), "--horizon", "1h")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "link.csv").is_symlink() and target.read_text().startswith("series,timestamp")


def test_missing_parent_folder_is_refused_not_created(tmp_path, good):
    out = tmp_path / "nope" / "deeper" / "f.csv"
    one_line_error(run_cli("forecast", "--input", good, "--output", str(out)), 2, "does not exist; create it first")
    assert not (tmp_path / "nope").exists()
    one_line_error(run_cli("demo", "--out", str(tmp_path / "nope" / "demo")), 2, "create it first")
    assert not (tmp_path / "nope").exists()


def test_atomic_write_library_refuses_what_it_would_replace(tmp_path):
    from contracts.atomic import write_text_atomic
    from tidewise.paths import prepare_output_dir
    from predictor.errors import InputError

    (tmp_path / "d").mkdir()
    with pytest.raises(InputError, match="is a folder"):
        write_text_atomic(str(tmp_path / "d"), "x")
    with pytest.raises(InputError, match="create it first"):
        write_text_atomic(str(tmp_path / "a" / "b" / "c.txt"), "x")
    with pytest.raises(InputError, match="create it first"):
        write_text_atomic(str(tmp_path / "a" / "b" / "c.txt"), "x", create_folder=True)  # never a chain
    write_text_atomic(str(tmp_path / "a" / "c.txt"), "x", create_folder=True)  # the last folder only
    assert (tmp_path / "a" / "c.txt").read_text() == "x"
    assert prepare_output_dir(str(tmp_path / "new")) and (tmp_path / "new").is_dir()
    with pytest.raises(InputError, match="not a folder"):
        prepare_output_dir(str(tmp_path / "a" / "c.txt"))


# --- a registry path that is a file ---------------------------------------------------------------

@pytest.mark.parametrize("command", [
    ["forecast", "--output", "{tmp}/f.csv", "--input", "{good}"],
    ["report", "--out", "{tmp}/r.html"],
    ["serve", "--once", "--source", "file", "--input", "{good}"],
    ["train", "--input", "{good}"],
])
def test_registry_that_is_a_file(tmp_path, good, command):
    reg = tmp_path / "models"
    reg.write_text("not a registry\n")
    args = [a.format(tmp=tmp_path, good=good) for a in command]
    one_line_error(run_cli(*args, "--registry", str(reg)), 2, "--registry", str(reg), "not a")
    assert reg.read_text() == "not a registry\n"


# --- fetch from a server that is not Prometheus -----------------------------------------------------

class _NotPrometheus(http.server.BaseHTTPRequestHandler):
    status = 404

    def do_GET(self):  # noqa: N802 - http.server's name
        body = b"<!DOCTYPE html><html><body>Grafana</body></html>"
        self.send_response(self.status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args):
        pass


class _HtmlOk(_NotPrometheus):
    status = 200


@pytest.mark.parametrize("handler,why", [(_NotPrometheus, "HTTP 404"), (_HtmlOk, "non-JSON")])
def test_fetch_from_a_server_that_is_not_prometheus(tmp_path, handler, why):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        out = tmp_path / "h.csv"
        # an outside failure (the URL answers, but not as Prometheus): exit 1, as for an unreachable one
        one_line_error(run_cli("fetch", "--prometheus-url", url, "--last", "1h", "--output", str(out)), 1,
                       url, "not a Prometheus API", why)
        assert not out.exists()
    finally:
        server.shutdown()
        server.server_close()


# --- enforce without credentials, and a pods file of Nodes --------------------------------------------

def _enforce(tmp_path, *extra, env=None):
    from tests.node_enforcer.conftest import TWO_SOCKET

    cg = tmp_path / "cgroup"
    cg.mkdir(exist_ok=True)
    base = ["enforce", "--once", "--dry-run", "--node", "fixture-node", "--sysfs-root", TWO_SOCKET,
            "--cgroup-root", str(cg), "--checkpoint", str(tmp_path / "ck.json")]
    return run_cli(*base, *extra, timeout=120, env=env)


def test_enforce_without_a_kubeconfig_names_how_to_give_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(HOME=str(tmp_path), KUBECONFIG=str(tmp_path / "no-kubeconfig"))
    line = one_line_error(_enforce(tmp_path, "--pods-from", "api", env=env), 2, "--kubeconfig", "service account")
    assert "pods_from api" in line
    one_line_error(_enforce(tmp_path, "--pods-from", "api", "--kubeconfig", str(tmp_path / "kc"), env=env), 2,
                   "--kubeconfig", "no such file")


def test_enforce_pods_file_of_nodes_is_refused(tmp_path):
    f = tmp_path / "nodes.yaml"
    f.write_text("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: n1, uid: u1}\n")
    one_line_error(_enforce(tmp_path, "--pods-from", "file", "--pods", str(f), "--no-eviction"), 2,
                   "nodes.yaml", "Node", "not Pods")
    assert not (tmp_path / "ck.json").exists()


def test_pods_file_kinds():
    from node_enforcer.collect.pods import _kinds

    assert _kinds({"kind": "PodList", "items": [{"metadata": {}}]}) == {"PodList", "Pod"}
    assert _kinds([{"kind": "Pod"}, {"kind": "Service"}]) == {"Pod", "Service"}


# --- configuration: unknown sections and keys -------------------------------------------------------

def test_unknown_config_section_is_an_error_with_a_suggestion(tmp_path, good):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("prometeus:\n  url: http://x\n")
    one_line_error(run_cli("--config", str(cfg), "forecast", "--input", good, "--output", str(tmp_path / "f.csv")), 2,
                   "c.yaml", "'prometeus'", "did you mean 'prometheus'", "enforcer, prometheus, serve")
    assert not (tmp_path / "f.csv").exists()


def test_unknown_config_key_names_the_nearest(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("prometheus:\n  ulr: http://x\n")
    one_line_error(run_cli("--config", str(cfg), "fetch", "--output", str(tmp_path / "h.csv")), 2,
                   "'ulr'", "did you mean 'url'")
    cfg.write_text("serve: 3\n")
    one_line_error(run_cli("--config", str(cfg), "fetch", "--output", str(tmp_path / "h.csv")), 2,
                   "section 'serve' must be a mapping")


# --- short history: forecast, but say so -----------------------------------------------------------

def test_four_hours_forecast_a_day_ahead_warns(tmp_path):
    inp = history_csv(tmp_path / "h4.csv", days=4 / 24)
    out = tmp_path / "f.csv"
    r = run_cli("forecast", "--input", inp, "--output", str(out), "--horizon", "24h")
    assert r.returncode == 0, r.stderr
    warning = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1 and "less history than" in warning[0] and "'a'" in warning[0]
    assert "fallback" in warning[0]
    models = set(pd.read_csv(out)["model"])
    assert models and not any(m.startswith("seasonal") for m in models)


def test_long_enough_history_does_not_warn(tmp_path, good):
    r = run_cli("forecast", "--input", good, "--output", str(tmp_path / "f.csv"), "--horizon", "24h")
    assert r.returncode == 0 and "warning" not in r.stderr


# --- inputs that are folders ---------------------------------------------------------------------

@pytest.mark.parametrize("command", [["forecast", "--output", "{tmp}/o.csv"], ["profile"],
                                     ["replay", "vpa", "--output", "{tmp}/o.csv"]])
def test_input_that_is_a_folder(tmp_path, command):
    args = [a.format(tmp=tmp_path) for a in command]
    one_line_error(run_cli(*args, "--input", str(tmp_path)), 2, "is a folder")


# --- numbers that are not numbers ------------------------------------------------------------------

@pytest.mark.parametrize("command,needle", [
    (["replay", "hpa", "--input", "{hpa}", "--output", "{tmp}/r.csv", "--tolerance", "nan"], "--tolerance nan"),
    (["replay", "hpa", "--input", "{hpa}", "--output", "{tmp}/r.csv", "--tolerance", "inf"], "--tolerance inf"),
    (["demo", "--out", "{tmp}/demo", "--days", "nan"], "--days nan"),
    (["demo", "--out", "{tmp}/demo", "--days", "inf"], "--days inf"),
    (["simulate", "colocation", "--nodes", "0", "--out", "{tmp}/sim"], "--nodes 0"),
])
def test_nan_inf_and_zero_counts_are_refused(tmp_path, command, needle):
    hpa = history_csv(tmp_path / "hpa.csv", extra={"per_replica": 1.0})
    args = [a.format(tmp=tmp_path, hpa=hpa) for a in command]
    one_line_error(run_cli(*args), 2, needle)
    assert sorted(os.listdir(tmp_path)) == ["hpa.csv"]  # nothing written, no folder created


def test_enforce_plan_out_folder_is_refused_before_any_write(tmp_path):
    from tests.node_enforcer.conftest import MIXED_PODS

    (tmp_path / "plan").mkdir()
    one_line_error(_enforce(tmp_path, "--pods-from", "file", "--pods", MIXED_PODS, "--no-eviction",
                            "--plan-out", str(tmp_path / "plan")), 2, "--plan-out", "is a folder")
    assert not (tmp_path / "ck.json").exists() and not os.listdir(tmp_path / "plan")
