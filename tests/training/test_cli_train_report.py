"""`tidewise train`, `tidewise forecast --registry` and `tidewise report`, end to end; the report
opened in headless Chromium (Debian `chromium`)."""
import json
import os
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from tests.chromium import console_errors, plot_pixels, screenshot

from tidewise.cli import main

from .conftest import small_history



@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A registry trained from a file, plus that file."""
    d = tmp_path_factory.mktemp("train")
    hist = small_history(workloads=2, days=6)
    inp = str(d / "history.csv")
    hist.to_long().to_csv(inp, index=False)
    reg = str(d / "models")
    assert main(["train", "--source", "file", "--input", inp, "--registry", reg, "--folds", "2"]) == 0
    return reg, inp, hist


def test_train_writes_latest_and_forecast_uses_it(trained, tmp_path, capsys):
    reg, inp, hist = trained
    man = json.load(open(os.path.join(reg, "latest", "manifest.json")))
    assert man["n_series"] == len(hist.series)
    out = str(tmp_path / "f.csv")
    assert main(["forecast", "--input", inp, "--output", out, "--registry", reg]) == 0
    f = pd.read_csv(out)
    assert list(f.columns) == ["series", "timestamp", "q0.5", "q0.9", "q0.95", "q0.99", "model"]
    assert len(f) == 288 * len(hist.series)
    stored = json.load(open(os.path.join(reg, "latest", "series.json")))
    for key, g in f.groupby("series"):
        assert set(g["model"]) == {stored[key]["model"]}
    q = f[["q0.5", "q0.9", "q0.95", "q0.99"]].to_numpy()
    assert (np.diff(q, axis=1) >= 0).all()


def test_train_synthetic_source_and_incremental_second_run(tmp_path, capsys):
    reg = str(tmp_path / "m")
    args = ["train", "--source", "synthetic", "--workloads", "1", "--last", "5d", "--registry", reg, "--folds", "1",
            "--no-decision-time"]  # the day-ahead part is under test (the decision-time fits: 90% of the CPU)
    assert main(args) == 0
    assert "trained 2 series, carried 0" in capsys.readouterr().err
    first = os.readlink(os.path.join(reg, "latest"))
    assert main(args) == 0
    err = capsys.readouterr().err
    # the synthetic history ends at the last midnight: same data, so everything is carried
    assert "trained 0 series, carried 2 forward" in err
    assert os.readlink(os.path.join(reg, "latest")) != first


def test_forecast_refuses_a_tampered_registry(trained, tmp_path, capsys):
    reg, inp, _ = trained
    copy = str(tmp_path / "models")
    shutil.copytree(reg, copy, symlinks=True)
    art = os.path.join(copy, "latest", "global_gbm.npz")
    data = bytearray(open(art, "rb").read())
    data[100] ^= 0xFF
    open(art, "wb").write(bytes(data))
    out = str(tmp_path / "f.csv")
    assert main(["forecast", "--input", inp, "--output", out, "--registry", copy]) == 1
    err = capsys.readouterr().err
    assert re.search(r"tidewise forecast: error: registry artifact .*global_gbm.npz fails its checksum", err)
    assert "Traceback" not in err and not os.path.exists(out)


def test_registry_key_signs_and_verifies_end_to_end(tmp_path, capsys):
    """train --registry-key signs; forecast/report verify with it; another key or an unsigned
    version is refused with one line; a bad key file path is a usage error (exit 2)."""
    hist = small_history(workloads=1, days=4)
    inp = str(tmp_path / "history.csv")
    hist.to_long().to_csv(inp, index=False)
    key, other = tmp_path / "key", tmp_path / "other"
    key.write_bytes(os.urandom(32))
    other.write_bytes(os.urandom(32))
    signed, plain = str(tmp_path / "signed"), str(tmp_path / "plain")
    base = ["train", "--source", "file", "--input", inp, "--folds", "1", "--no-global", "--no-decision-time"]
    assert main(base + ["--registry", signed, "--registry-key", str(key)]) == 0
    assert main(base + ["--registry", plain]) == 0
    assert os.path.isfile(os.path.join(signed, "latest", "manifest.sig"))
    capsys.readouterr()
    out = str(tmp_path / "f.csv")
    fc = ["forecast", "--input", inp, "--output", out]
    assert main(fc + ["--registry", signed, "--registry-key", str(key)]) == 0
    assert main(["report", "--registry", signed, "--registry-key", str(key), "--out", str(tmp_path / "r.html")]) == 0
    capsys.readouterr()
    os.unlink(out)
    for reg_dir, k, why in [(signed, other, "signature does not verify"), (plain, key, "is not signed")]:
        assert main(fc + ["--registry", reg_dir, "--registry-key", str(k)]) == 1
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1 and not os.path.exists(out)
    for cmd in (fc + ["--registry", signed], ["report", "--registry", signed, "--out", str(tmp_path / "x.html")],
                base + ["--registry", signed]):
        assert main(cmd + ["--registry-key", str(tmp_path / "missing")]) == 2
        err = capsys.readouterr().err
        assert "--registry-key" in err and "cannot read the key file" in err and "Traceback" not in err


def test_train_errors_are_clear(tmp_path, capsys):
    assert main(["train", "--source", "file", "--registry", str(tmp_path)]) == 2
    assert "--source file needs --input" in capsys.readouterr().err
    assert main(["train", "--source", "file", "--input", str(tmp_path / "none.csv"), "--registry", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err


def test_every_loop_trains_again(monkeypatch, tmp_path, capsys):
    import functools

    from tidewise.commands import train as cmd
    from training import schedule

    runs = []
    monkeypatch.setattr(cmd, "train_once", lambda args: runs.append(1) or 0)

    class Stop(Exception):
        pass

    def fake_sleep(s):
        assert 0 < s <= 3600
        if len(runs) >= 2:
            raise Stop
    # the schedule takes its sleep as an argument (bound when it is defined): hand it the fake one
    monkeypatch.setattr(schedule, "run_every", functools.partial(schedule.run_every, sleep=fake_sleep))
    with pytest.raises(Stop):
        main(["train", "--source", "synthetic", "--every", "1h", "--registry", str(tmp_path)])
    assert len(runs) == 2


def test_report_renders_in_headless_chromium(trained, tmp_path, capsys):
    reg, _, hist = trained
    out = str(tmp_path / "report.html")
    assert main(["report", "--registry", reg, "--out", out]) == 0
    # progress on stderr (not a terminal): the forecasts, then a line per tenth of the plots
    err = capsys.readouterr().err.splitlines()
    n = len(hist.series)
    assert f"forecasting {n} series: 1 ..." in err and any(ln.startswith(f"forecasting {n} series: done in ") for ln in err)
    plotted = [ln.split(" (")[0] for ln in err if re.match(r"plotting report: \d+/", ln)]
    assert plotted[-1] == f"plotting report: {n}/{n}", err
    html = open(out).read()
    # fleet table: one row per series with class, seasonality, model, skill and coverage
    assert html.count("<tr>") == len(hist.series) + 1
    for key in hist.series:
        assert key in html
    assert "skill vs seasonal naive" in html and "coverage q0.95" in html
    assert not re.search(r'(src|href)="(https?:)?//', html)

    # the detector works: a page that logs an error is caught
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><script>console.error("boom")</script></body></html>')
    assert console_errors(screenshot(f"file://{bad}", str(tmp_path / "bad.png"), str(tmp_path / "p1")))

    shot = str(tmp_path / "shot.png")
    stderr = screenshot(f"file://{out}", shot, str(tmp_path / "p2"))
    assert console_errors(stderr) == []
    non_white, blue = plot_pixels(shot)
    assert non_white > 0.02  # not blank
    # the plots rendered: the forecast band's blue is on screen (the page alone has no colour)
    assert blue > 300


def test_train_prometheus_source_calls_the_prometheus_source(monkeypatch, tmp_path, capsys):
    """--source prometheus goes through predictor.sources.prometheus.PrometheusSource.fetch with the
    --last window (the real server is exercised by tests/integration)."""
    import predictor.sources.prometheus as prom

    calls = []

    class FakeSource:
        def __init__(self, settings, *a, **kw):
            self.settings = settings

        def fetch(self, start, end, step):
            calls.append((start, end, step, self.settings.url))
            return small_history(workloads=1, days=5)

    monkeypatch.setattr(prom, "PrometheusSource", FakeSource)
    reg = str(tmp_path / "m")
    assert main(["train", "--source", "prometheus", "--prometheus-url", "http://prom.example:9090", "--last", "5d",
                 "--registry", reg, "--folds", "1"]) == 0
    (start, end, step, url), = calls
    assert url == "http://prom.example:9090" and end - start == pd.Timedelta(days=5) and step == pd.Timedelta("5min")
    assert os.path.islink(os.path.join(reg, "latest"))
