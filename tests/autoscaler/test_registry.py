"""The loop with a real `predictor.registry`: a version failing its checksum is refused, the last
good one keeps serving; with no good version left nothing is written."""
from __future__ import annotations

import datetime as dt
import os

import pytest

from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.loop import FROZEN, OK, ServingLoop
from tests.autoscaler.conftest import StaticCluster, fast_settings, source_of

registry = pytest.importorskip("predictor.registry")
QS = (0.5, 0.9, 0.95, 0.99)


def write(reg_dir, history, minute):
    series = {k: {"model": "seasonal_naive_daily", "shifts": [0.0] * len(QS)} for k in history.series}
    return registry.write_version(str(reg_dir), quantiles=QS, series=series, step_seconds=300,
                                  data_window=("2026-10-24T00:00:00Z", "2026-11-02T00:00:00Z"),
                                  now=dt.datetime(2026, 11, 2, 0, minute, tzinfo=dt.timezone.utc))


def tamper(reg_dir, version):
    with open(os.path.join(reg_dir, version, "series.json"), "a") as fh:
        fh.write(" ")


def loop_for(objects, history, reg_dir, sink):
    s = fast_settings()
    s.loop.forecast_refresh = None
    return ServingLoop(s, source_of(history), StaticCluster(objects), sink, registry_dir=str(reg_dir))


def test_a_new_version_failing_its_checksum_leaves_the_last_good_one_serving(objects, history, tmp_path):
    v1 = write(tmp_path, history, 0)
    sink = DryRunSink()
    loop = loop_for(objects, history, tmp_path, sink)
    first = loop.run_once()
    assert first.outcome == OK and first.registry == v1
    v2 = write(tmp_path, history, 5)
    tamper(tmp_path, v2)
    second = loop.run_once()
    assert second.outcome == OK and second.registry == v1
    assert all(f"@{v1}" in d.containers[0].resources[r].reason.model
               for d in second.vpa for r in d.containers[0].resources)


def test_with_no_verifiable_version_nothing_is_written(objects, history, tmp_path):
    v1 = write(tmp_path, history, 0)
    sink = DryRunSink()
    loop = loop_for(objects, history, tmp_path, sink)
    assert loop.run_once().outcome == OK
    n = len(sink.changes)
    tamper(tmp_path, v1)
    rep = loop.run_once()
    assert rep.outcome == FROZEN and "forecast" in rep.reason
    assert rep.changes == [] and len(sink.changes) == n


def reseal(folder):
    """Rewrite the checksum chain after an edit, as a writer of the volume without the key can."""
    import hashlib
    import json

    m = json.load(open(os.path.join(folder, "manifest.json")))
    for name in m["artifacts"]:
        m["artifacts"][name]["sha256"] = registry.sha256_file(os.path.join(folder, name))
    body = json.dumps(m, indent=1).encode()
    open(os.path.join(folder, "manifest.json"), "wb").write(body)
    open(os.path.join(folder, "manifest.sha256"), "w").write(f"{hashlib.sha256(body).hexdigest()}  manifest.json\n")


@pytest.mark.parametrize("damage", ["unknown model", "truncated arrays"])
def test_a_version_that_verifies_but_does_not_load_leaves_the_last_good_serving(objects, history, tmp_path, damage):
    """A fresh loop (no version in memory) must not freeze on every run because the newest
    version's bytes match their checksums but do not load: it serves the one before."""
    from predictor.models.gbm import GlobalGBM

    gm = GlobalGBM(quantiles=QS, max_iter=3, max_origins=2, max_rows=2000).fit_many(history.series)
    series = {k: {"model": "seasonal_naive_daily", "shifts": [0.0] * len(QS)} for k in history.series}
    kw = dict(quantiles=QS, series=series, step_seconds=300, global_model=gm,
              data_window=("2026-10-24T00:00:00Z", "2026-11-02T00:00:00Z"))
    v1 = registry.write_version(str(tmp_path), now=dt.datetime(2026, 11, 2, 0, 0, tzinfo=dt.timezone.utc), **kw)
    v2 = registry.write_version(str(tmp_path), now=dt.datetime(2026, 11, 2, 0, 5, tzinfo=dt.timezone.utc), **kw)
    folder = os.path.join(tmp_path, v2)
    if damage == "unknown model":
        p = os.path.join(folder, "series.json")
        open(p, "w").write(open(p).read().replace("seasonal_naive_daily", "seasonal_naive_hourly"))
    else:
        p = os.path.join(folder, "global_gbm.npz")
        data = open(p, "rb").read()
        open(p, "wb").write(data[: len(data) // 3])
    reseal(folder)
    loop = loop_for(objects, history, tmp_path, DryRunSink())
    for _ in range(2):
        rep = loop.run_once()
        assert rep.outcome == OK and rep.registry == v1
        assert rep.vpa and all(f"@{v1}" in d.containers[0].resources[r].reason.model
                               for d in rep.vpa for r in d.containers[0].resources)


def test_with_a_key_unsigned_versions_are_refused_and_signed_ones_served(objects, history, tmp_path):
    key = tmp_path / "key"
    key.write_bytes(b"s" * 32)
    reg_dir = tmp_path / "models"
    write(reg_dir, history, 0)  # unsigned
    s = fast_settings()
    s.loop.forecast_refresh = None
    s.loop.registry_key_file = str(key)
    loop = ServingLoop(s, source_of(history), StaticCluster(objects), DryRunSink(), registry_dir=str(reg_dir))
    rep = loop.run_once()
    assert rep.registry == "none" and any("is not signed" in why for why in rep.skipped.values())
    series = {k: {"model": "seasonal_naive_daily", "shifts": [0.0] * len(QS)} for k in history.series}
    signed = registry.write_version(str(reg_dir), quantiles=QS, series=series, step_seconds=300, key=b"s" * 32,
                                    data_window=("2026-10-24T00:00:00Z", "2026-11-02T00:00:00Z"),
                                    now=dt.datetime(2026, 11, 2, 0, 9, tzinfo=dt.timezone.utc))
    rep = loop.run_once()
    assert rep.outcome == OK and rep.registry == signed


def test_serve_refuses_an_unreadable_key_file_up_front(tmp_path, capsys):
    from tidewise.cli import main

    os.makedirs(tmp_path / "models")
    code = main(["serve", "--once", "--source", "synthetic", "--registry", str(tmp_path / "models"),
                 "--registry-key", str(tmp_path / "missing"), "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "--registry-key" in err and "cannot read the key file" in err and "Traceback" not in err


def test_serve_names_the_model_that_ran_when_the_window_cannot_feed_the_stored_one(objects, history, tmp_path):
    """A version storing weekly naive choices (14 days) served from the 8-day window: decisions
    name the model that actually ran, and the registry step says those series fall back."""
    series = {k: {"model": "seasonal_naive_weekly", "shifts": [0.0] * len(QS)} for k in history.series}
    v = registry.write_version(str(tmp_path), quantiles=QS, series=series, step_seconds=300,
                               data_window=("2026-10-18T00:00:00Z", "2026-11-02T00:00:00Z"),
                               extra={"history_needed_seconds": 14 * 86400},
                               now=dt.datetime(2026, 11, 2, 0, 0, tzinfo=dt.timezone.utc))
    rep = loop_for(objects, history, tmp_path, DryRunSink()).run_once()
    assert rep.outcome == OK and rep.registry == v and rep.vpa
    models = {d.containers[0].resources[r].reason.model for d in rep.vpa for r in d.containers[0].resources}
    assert models and all(m.endswith(f"@{v}") and not m.startswith("seasonal_naive_weekly") for m in models), models
    step = next(s for s in rep.steps if s.name == "registry")
    assert "need up to 14 days" in step.detail and "fall back" in step.detail


def test_serving_runs_read_each_artifact_once_to_check_it_and_once_to_parse_it(objects, history, tmp_path,
                                                                                 monkeypatch):
    """One registry load per version: the first run hashes and parses each artifact once; later
    runs keep that loaded version and only re-check that its folder did not change (a stat per
    file) — they neither re-hash nor re-parse. Counted at the file level (every `open` of a file in
    the version folder), so the count holds whichever function reads."""
    import builtins
    import collections
    import json

    from predictor.models.gbm import GlobalGBM

    gm = GlobalGBM(quantiles=QS, max_iter=3, max_origins=2, max_rows=2000).fit_many(history.series)
    series = {k: {"model": "ensemble", "members": ["seasonal_naive_daily", "gbm_global"], "shifts": [0.0] * len(QS)}
              for k in history.series}
    v = registry.write_version(str(tmp_path), quantiles=QS, series=series, step_seconds=300, global_model=gm,
                               profiles={}, data_window=("2026-10-24T00:00:00Z", "2026-11-02T00:00:00Z"),
                               now=dt.datetime(2026, 11, 2, 0, 0, tzinfo=dt.timezone.utc))
    folder = os.path.realpath(os.path.join(tmp_path, v))
    artifacts = sorted(json.load(open(os.path.join(folder, "manifest.json")))["artifacts"])
    assert {"series.json", "profiles.json", "global_gbm.json", "global_gbm.npz"} <= set(artifacts)
    opened: collections.Counter[str] = collections.Counter()
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.path.dirname(os.path.realpath(file)) == folder:
            opened[os.path.basename(file)] += 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    loop = loop_for(objects, history, tmp_path, DryRunSink())
    for _ in range(3):
        rep = loop.run_once()
        assert rep.outcome == OK and rep.registry == v and rep.vpa
        assert all(f"@{v}" in d.containers[0].resources[r].reason.model for d in rep.vpa for r in d.containers[0].resources)
    assert {a: opened[a] for a in artifacts} == {a: 2 for a in artifacts}, opened


def test_a_loaded_version_rewritten_in_place_is_refused_on_use_even_with_its_times_restored(objects, history, tmp_path):
    """The on-use check compares file identities, not checksums: a same-size rewrite whose
    modification time is set back is still caught (its change time moves), so serving refuses it."""
    import pandas as pd

    from predictor.pipeline.forecasting import ForecastRequest
    from predictor.pipeline.serving import forecast_version

    v = write(tmp_path, history, 0)
    reg = registry.load_version(str(tmp_path))
    path = os.path.join(tmp_path, v, "series.json")
    st = os.stat(path)
    data = open(path, "rb").read()
    open(path, "wb").write(data.replace(b"seasonal_naive_daily", b"seasonal_naive_weekl"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.path.getsize(path) == st.st_size
    with pytest.raises(registry.RegistryError, match="changed on disk"):
        forecast_version(reg, history, ForecastRequest(horizon=pd.Timedelta("1h"), step=pd.Timedelta("5min"),
                                                       quantiles=QS))


def test_a_version_is_read_once_and_kept_while_latest_and_unchanged(objects, history, tmp_path):
    v1 = write(tmp_path, history, 0)
    loop = loop_for(objects, history, tmp_path, DryRunSink())
    assert loop.run_once().registry == v1
    first = loop.registry
    assert loop.run_once().registry == v1
    assert loop.registry is first  # the same loaded object: not read and verified again
    v2 = write(tmp_path, history, 5)
    assert loop.run_once().registry == v2 and loop.registry is not first
    second = loop.registry
    tamper(tmp_path, v2)  # the kept version changed on disk: verified afresh, refused, v1 serves
    rep = loop.run_once()
    assert rep.registry == v1 and loop.registry is not second


def test_a_rotated_key_verifies_the_kept_version_afresh(objects, history, tmp_path):
    from autoscaler.input.registry import RegistryReader

    key = tmp_path / "key"
    key.write_bytes(b"k" * 32)
    reg = tmp_path / "reg"
    v = registry.write_version(str(reg), quantiles=QS, series={}, step_seconds=300,
                               data_window=("2026-10-24T00:00:00Z", "2026-11-02T00:00:00Z"), key=b"k" * 32)
    reader = RegistryReader(str(key))
    kept = reader(str(reg))
    assert kept.version == v and reader(str(reg)) is kept
    key.write_bytes(b"x" * 32)  # the Secret rotated: the version signed with the old key is refused
    with pytest.raises(registry.RegistryError):
        reader(str(reg))
