"""The registry refuses anything it cannot verify, before unpickling it."""
import json
import os

import numpy as np
import pandas as pd
import pytest

from predictor import registry
from predictor.registry import RegistryError, load_last_good, load_version, write_version

QS = (0.5, 0.9, 0.95, 0.99)


class Boom:
    """An artifact whose unpickling would be noticed."""

    loaded = 0

    def __reduce__(self):
        return (_explode, ())


def _explode():
    Boom.loaded += 1
    return "exploded"


def _write(tmp_path, gm=None, **kw):
    series = {"ns/Deployment/a/app/cpu": {"model": "seasonal_naive_daily", "shifts": [0.0, 0.1, 0.2, 0.3]}}
    return write_version(str(tmp_path), quantiles=QS, series=series, data_window=("2024-08-01T00:00:00+00:00", "2024-08-08T00:00:00+00:00"),
                         step_seconds=300, global_model=gm if gm is not None else {"weights": np.arange(5)}, **kw)


def test_write_then_load_round_trip(tmp_path):
    v = _write(tmp_path)
    assert os.path.islink(tmp_path / "latest") and os.readlink(tmp_path / "latest") == v
    reg = load_version(str(tmp_path))
    assert reg.version == v and reg.quantiles == QS
    np.testing.assert_array_equal(reg.global_model["weights"], np.arange(5))
    man = json.loads((tmp_path / v / "manifest.json").read_text())
    assert man["schema_version"] == registry.SCHEMA_VERSION
    assert {"created", "data_window", "libraries", "artifacts"} <= set(man)
    assert set(man["artifacts"]) == {"series.json", "global_gbm.joblib"}
    assert all(len(a["sha256"]) == 64 for a in man["artifacts"].values())
    # no temporary folder or link is left behind
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith(".")) == []


def test_flipped_byte_is_refused_before_unpickling(tmp_path):
    v = _write(tmp_path, gm=[1, 2, 3])
    art = tmp_path / v / "global_gbm.joblib"
    # replace the artifact by a pickle that would run code when loaded, then also flip one byte
    import joblib

    joblib.dump(Boom(), art)
    with pytest.raises(RegistryError, match="fails its checksum"):
        load_version(str(tmp_path))
    assert Boom.loaded == 0
    v2 = _write(tmp_path)
    data = bytearray((tmp_path / v2 / "global_gbm.joblib").read_bytes())
    data[len(data) // 2] ^= 0x01
    (tmp_path / v2 / "global_gbm.joblib").write_bytes(bytes(data))
    with pytest.raises(RegistryError, match=r"global_gbm.joblib fails its checksum.*retrain or restore"):
        load_version(str(tmp_path))


def test_tampered_series_table_is_refused(tmp_path):
    v = _write(tmp_path)
    p = tmp_path / v / "series.json"
    p.write_text(p.read_text().replace("seasonal_naive_daily", "gbm_global"))
    with pytest.raises(RegistryError, match="series.json fails its checksum"):
        load_version(str(tmp_path))


def test_incompatible_schema_is_refused(tmp_path):
    v = _write(tmp_path)
    m = tmp_path / v / "manifest.json"
    man = json.loads(m.read_text())
    man["schema_version"] = 999
    m.write_text(json.dumps(man))
    with pytest.raises(RegistryError, match="schema version 999.*retrain"):
        load_version(str(tmp_path))


def test_missing_and_unlisted_artifacts_are_refused(tmp_path):
    v = _write(tmp_path)
    (tmp_path / v / "global_gbm.joblib").unlink()
    with pytest.raises(RegistryError, match="missing"):
        load_version(str(tmp_path))
    v2 = _write(tmp_path)
    (tmp_path / v2 / "extra.joblib").write_bytes(b"x")
    with pytest.raises(RegistryError, match="unlisted"):
        load_version(str(tmp_path))


def test_no_registry_is_a_clear_error(tmp_path):
    with pytest.raises(RegistryError, match="tidewise train"):
        load_version(str(tmp_path / "nope"))
    os.makedirs(tmp_path / "empty")
    with pytest.raises(RegistryError, match="no `latest`"):
        load_version(str(tmp_path / "empty"))


def test_last_good_skips_a_tampered_latest(tmp_path):
    good = _write(tmp_path, version="20240801T000000Z-aaaaaa")
    bad = _write(tmp_path, version="20240802T000000Z-bbbbbb")
    assert os.readlink(tmp_path / "latest") == bad
    (tmp_path / bad / "series.json").write_text("{}")
    refused = []
    reg = load_last_good(str(tmp_path), on_refused=lambda v, e: refused.append(v))
    assert reg.version == good and refused == [bad]


def test_latest_switch_is_atomic_rename(tmp_path, monkeypatch):
    _write(tmp_path, version="20240801T000000Z-aaaaaa")
    calls = []
    real = os.replace
    monkeypatch.setattr(registry.os, "replace", lambda a, b: (calls.append((a, b)), real(a, b)))
    registry.switch_latest(str(tmp_path), "20240801T000000Z-aaaaaa")
    assert calls and calls[0][1].endswith("latest") and os.path.basename(calls[0][0]).startswith(".latest.")


def test_forecast_with_registry_uses_stored_choice(tmp_path):
    from predictor.forecasting import ForecastRequest
    from predictor.history import History

    idx = pd.date_range("2024-08-01", periods=4 * 288, freq="5min", tz="UTC")
    y = pd.Series(1 + np.sin(np.arange(len(idx)) * 2 * np.pi / 288), index=idx)
    _write(tmp_path)
    req = ForecastRequest(pd.Timedelta("1d"), pd.Timedelta("5min"), QS)
    fcs = registry.forecast_with_registry(str(tmp_path), History({"ns/Deployment/a/app/cpu": y, "other/x/y/z/cpu": y},
                                                                 pd.Timedelta("5min")), req)
    a, b = fcs
    assert a.model == "seasonal_naive_daily" and a.version != "adhoc"
    # the stored conformal shifts are applied: q0.99 of a noiseless series moves up by 0.3
    np.testing.assert_allclose(a.values[:, 3] - a.values[:, 0], 0.3, atol=1e-9)
    assert any("not in registry" in n for n in b.notes)
    from predictor.errors import InputError

    with pytest.raises(InputError, match="trained for 0.5,0.9,0.95,0.99"):
        registry.forecast_with_registry(str(tmp_path), History({"a": y}, pd.Timedelta("5min")),
                                        ForecastRequest(pd.Timedelta("1d"), pd.Timedelta("5min"), (0.5, 0.8)))
