"""The package as a user installs it, against a real Prometheus: correct dates end to end.

`make test` runs this file a second time with TIDEWISE_INSTALLED pointing at a virtualenv made by a
plain `pip install .` (no extras, not editable, today's releases of every dependency), from a
folder outside the checkout so that the installed package — not the source tree — is what runs.
Without the variable it runs the development install the same way.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from studies.demo import cluster_objects

INSTALLED = os.environ.get("TIDEWISE_INSTALLED")  # a virtualenv's bin/ folder


def tidewise(*args: str, cwd: str) -> subprocess.CompletedProcess:
    cmd = [os.path.join(INSTALLED, "tidewise")] if INSTALLED else [sys.executable, "-m", "tidewise"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def test_the_installed_command_is_the_one_under_test(tmp_path):
    r = tidewise("--version", cwd=str(tmp_path))
    assert r.returncode == 0 and "tidewise" in (r.stdout + r.stderr).lower()
    if INSTALLED:
        code = "import predictor, sys; print(predictor.__file__)"
        where = subprocess.run([os.path.join(INSTALLED, "python"), "-c", code], capture_output=True, text=True,
                               cwd=str(tmp_path), check=True).stdout.strip()
        assert os.path.dirname(os.path.dirname(__file__)) not in where and "site-packages" in where, where


def test_the_installed_package_holds_no_test_support(tmp_path):
    """What `pip install .` put in the user's virtualenv (tidewise's RECORD) has none of what the tests
    stand on; tests/integration/test_wheel.py checks a clean build, this one the install itself (a stale
    `build/` in the checkout would add files that are no longer in the sources)."""
    if not INSTALLED:
        pytest.skip("the development install is the checkout itself; TIDEWISE_INSTALLED names a real install")
    code = "import importlib.metadata as m; print('\\n'.join(str(f) for f in m.files('tidewise')))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    files = subprocess.run([os.path.join(INSTALLED, "python"), "-c", code], capture_output=True, text=True,
                           cwd=str(tmp_path), env=env, check=True).stdout.split()
    assert "tidewise/cli.py" in files
    leaked = [f for f in files if f.startswith(("testsupport/", "tests/", "node_enforcer/testing/"))]
    assert not leaked, leaked


def test_the_docs_and_the_prices_example_are_reachable_from_the_installed_package(tmp_path):
    """A pip user has no checkout: `--help` names the installed docs, and `tidewise docs` finds the
    prices example (a valid prices file) and the README there, outside the checkout when installed."""
    from studies.cost.prices import load_prices

    r = tidewise("--help", cwd=str(tmp_path))
    assert r.returncode == 0 and "`tidewise docs`" in r.stdout and "README.md" not in r.stdout, r.stdout
    r = tidewise("docs", "--path", "prices.example.yaml", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    path = r.stdout.strip()
    assert load_prices(path).currency and " ".join(os.path.dirname(path).split()) in " ".join(
        tidewise("--help", cwd=str(tmp_path)).stdout.split())
    r = tidewise("docs", "readme", cwd=str(tmp_path))
    assert r.returncode == 0 and "## Configuration" in r.stdout
    # every relative link of the installed README and docs reaches an installed file
    readme = tidewise("docs", "--path", "readme", cwd=str(tmp_path)).stdout.strip()
    pages = [readme] + [os.path.join(os.path.dirname(path), f) for f in os.listdir(os.path.dirname(path)) if f.endswith(".md")]
    links = [(page, target) for page in pages
             for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", open(page, encoding="utf-8").read())]
    assert len(links) > 20 and any(t.startswith("docs/") for _, t in links)
    broken = [(p, t) for p, t in links if not os.path.exists(os.path.join(os.path.dirname(p), t))]
    assert not broken, broken
    if INSTALLED:
        checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        assert not path.startswith(os.path.join(checkout, "docs") + os.sep) and path.startswith(os.path.dirname(INSTALLED.rstrip("/"))), path


def test_the_installed_kustomize_install_renders_as_the_checkout_s(tmp_path):
    """`kubectl apply -k <prefix>/share/tidewise/kustomize/review` (README): the installed base and
    overlays render, by the real kubectl, to exactly the checkout's objects."""
    from tests.test_kustomize import render, rendered

    readme = tidewise("docs", "--path", "readme", cwd=str(tmp_path)).stdout.strip()
    share = os.path.dirname(readme)
    if INSTALLED:
        assert share.startswith(os.path.dirname(INSTALLED.rstrip("/"))), share
    for target in ("deploy", "kustomize/review", "kustomize/apply", "kustomize/review-rwo", "kustomize/apply-rwo"):
        assert render(os.path.join(share, target)) == list(rendered(target)), target


def test_demo_forecasts_start_after_its_history(tmp_path):
    r = tidewise("demo", "--out", str(tmp_path / "demo"), "--workloads", "4", "--nodes", "2", "--days", "9",
                 cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    history = pd.read_parquet(tmp_path / "demo" / "history.parquet")
    last = pd.to_datetime(history["timestamp"], utc=True).max()
    fc = pd.read_csv(tmp_path / "demo" / "forecasts.csv")
    first = pd.to_datetime(fc["timestamp"], utc=True).min()
    assert last.year >= 2020 and first > last and first - last <= pd.Timedelta("1h"), (last, first)


def test_fetch_forecast_and_serve_once_against_real_prometheus(prometheus_server, tmp_path):
    server, cluster = prometheus_server
    now = pd.Timestamp.now(tz="UTC")
    hist = tmp_path / "history.csv"
    r = tidewise("fetch", "--prometheus-url", server.url, "--last", "3d", "--step", "5m", "--what", "cpu",
                 "--output", str(hist), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    ts = pd.to_datetime(pd.read_csv(hist)["timestamp"], utc=True)
    # the backfill ends two hours before now (tests/integration/conftest.py): dates are today's, not 1970's
    assert now - pd.Timedelta(days=4) < ts.min() and ts.max() <= now and now - ts.max() < pd.Timedelta("3h")

    out = tmp_path / "forecast.csv"
    r = tidewise("forecast", "--input", str(hist), "--output", str(out), "--horizon", "2h", "--step", "5m",
                 "--model", "seasonal_naive_daily", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    first = pd.to_datetime(pd.read_csv(out)["timestamp"], utc=True).min()
    assert first == ts.max() + pd.Timedelta("5min")

    state = tmp_path / "cluster-state.yaml"
    state.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": cluster_objects(cluster)}))
    now_flag = (cluster.end - pd.Timedelta("5min")).strftime("%Y-%m-%dT%H:%M:%SZ")
    r = tidewise("serve", "--once", "--source", "prometheus", "--prometheus-url", server.url,
                 "--cluster-state", str(state), "--sink", "file", "--out", str(tmp_path / "recs"),
                 "--model", "seasonal_naive_daily", "--now", now_flag, "--port", "0", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "stale" not in r.stderr and "1970" not in r.stderr
    decisions = json.loads((tmp_path / "recs" / "decisions.json").read_text())
    assert decisions, "serve decided nothing"
