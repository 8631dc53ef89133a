"""The registry refuses anything it cannot verify, and nothing in it can run code when loaded."""
import hashlib
import json
import os
import pickle

import numpy as np
import pandas as pd
import pytest

from predictor import registry
from predictor.errors import InputError
from predictor.models.gbm import GlobalGBM, QuantileTrees
from predictor.registry import RegistryError, load_last_good, load_version, read_key, write_version
from predictor.registry import writing
from predictor.pipeline.serving import forecast_version, forecast_with_registry

QS = (0.5, 0.9, 0.95, 0.99)
KEY = b"k" * 32
SERIES = "ns/Deployment/a/app/cpu"


class Boom:
    """An object whose unpickling writes a marker file (what an attacker's pickle would do)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (_explode, (self.marker,))


def _explode(marker):
    with open(marker, "w") as fh:
        fh.write("code ran")
    return "exploded"


def _daily(days=9, seed=0):
    idx = pd.date_range("2024-08-01", periods=days * 288, freq="5min", tz="UTC")
    rng = np.random.default_rng(seed)
    return pd.Series(5 + 3 * np.sin(np.arange(len(idx)) * 2 * np.pi / 288) + rng.normal(0, 0.3, len(idx)), index=idx)


@pytest.fixture(scope="module")
def gm():
    series = {f"s{i}": _daily(seed=i) * (1 + i) for i in range(3)}
    return GlobalGBM(quantiles=QS, max_iter=8, max_origins=4, max_rows=5000).fit_many(series)


def _write(tmp_path, gm=None, key=None, **kw):
    series = {SERIES: {"model": "seasonal_naive_daily", "shifts": [0.0, 0.1, 0.2, 0.3]}}
    return write_version(str(tmp_path), quantiles=QS, series=series,
                         data_window=("2024-08-01T00:00:00+00:00", "2024-08-08T00:00:00+00:00"),
                         step_seconds=300, global_model=gm, key=key, **kw)


def _reseal(folder, manifest=None):
    """What a writer of the registry volume can do without the key: rewrite the artifacts'
    checksums in the manifest and the manifest's digest so that the chain is consistent again."""
    m = manifest or json.loads((folder / "manifest.json").read_text())
    for name in m["artifacts"]:
        m["artifacts"][name]["sha256"] = registry.sha256_file(str(folder / name))
    body = json.dumps(m, indent=1).encode()
    (folder / "manifest.json").write_bytes(body)
    (folder / "manifest.sha256").write_text(f"{hashlib.sha256(body).hexdigest()}  manifest.json\n")


def test_write_then_load_round_trip_gives_bit_identical_forecasts(tmp_path, gm):
    v = _write(tmp_path, gm)
    assert os.path.islink(tmp_path / "latest") and os.readlink(tmp_path / "latest") == v
    reg = load_version(str(tmp_path))
    assert reg.version == v and reg.quantiles == QS
    man = json.loads((tmp_path / v / "manifest.json").read_text())
    assert man["schema_version"] == registry.SCHEMA_VERSION
    assert {"created", "data_window", "libraries", "artifacts"} <= set(man)
    assert set(man["artifacts"]) == {"series.json", "global_gbm.json", "global_gbm.npz"}
    assert all(len(a["sha256"]) == 64 for a in man["artifacts"].values())
    digest = (tmp_path / v / "manifest.sha256").read_text().split()[0]
    assert digest == hashlib.sha256((tmp_path / v / "manifest.json").read_bytes()).hexdigest()
    # no pickle anywhere: every array loads with pickles refused
    with np.load(tmp_path / v / "global_gbm.npz", allow_pickle=False) as z:
        assert all(z[k].dtype != object for k in z.files)
    items = [(_daily(8, seed=s), None) for s in (5, 6)]
    before = gm.predict_many(items, 288, QS)
    after = reg.global_model.predict_many(items, 288, QS)
    for a, b in zip(before, after):
        assert a.tobytes() == b.tobytes()  # bit-identical, not merely close
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith(".")) == []


def test_plain_trees_predict_exactly_what_scikit_learn_predicts():
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(3)
    x = rng.normal(size=(3000, 6))
    x[::5, 2] = np.nan  # missing values take each split's missing-value branch
    y = x[:, 0] * 2 + np.nan_to_num(x[:, 2]) + rng.normal(size=3000)
    m = HistGradientBoostingRegressor(loss="quantile", quantile=0.9, max_iter=30, max_leaf_nodes=15).fit(x, y)
    trees = QuantileTrees.from_estimator(m)
    xt = rng.normal(size=(500, 6))
    xt[::3, 2] = np.nan
    assert trees.predict(xt).tobytes() == m.predict(xt).tobytes()


def test_a_pickle_put_in_place_of_the_model_never_runs(tmp_path, gm):
    """The attacker can write the volume: swaps the model for a pickle and reseals the checksum
    chain. Loading refuses the version and the pickle's code never runs."""
    v = _write(tmp_path, gm)
    folder = tmp_path / v
    marker = tmp_path / "pwned"
    models = [n for n in json.loads((folder / "manifest.json").read_text())["artifacts"]
              if not n.endswith((".json", ".parquet"))]
    assert models
    for name in models:
        (folder / name).write_bytes(pickle.dumps(Boom(marker)))
    _reseal(folder)
    with pytest.raises(RegistryError, match="verifies but does not load"):
        load_version(str(tmp_path))
    assert not marker.exists()


def test_a_stray_pickle_beside_the_artifacts_is_refused_unread(tmp_path, gm):
    v = _write(tmp_path, gm)
    marker = tmp_path / "pwned"
    (tmp_path / v / "global_gbm.joblib").write_bytes(pickle.dumps(Boom(marker)))
    with pytest.raises(RegistryError, match=r"unlisted files \['global_gbm.joblib'\]"):
        load_version(str(tmp_path))
    # listing it in a resealed manifest does not make anything load it either
    man = json.loads((tmp_path / v / "manifest.json").read_text())
    man["artifacts"]["global_gbm.joblib"] = {"sha256": "", "bytes": 0}
    _reseal(tmp_path / v, man)
    load_version(str(tmp_path))
    assert not marker.exists()


def test_editing_any_manifest_field_is_detected(tmp_path):
    v = _write(tmp_path)
    m = tmp_path / v / "manifest.json"
    original = m.read_bytes()
    for field, value in [("quantiles", [0.5, 0.9, 0.95, 0.999]), ("step_seconds", 60), ("n_series", 7)]:
        man = json.loads(original)
        man[field] = value
        m.write_text(json.dumps(man, indent=1))
        with pytest.raises(RegistryError, match="does not match manifest.sha256.*edited after training"):
            load_version(str(tmp_path))
    m.write_bytes(original)
    load_version(str(tmp_path))
    (tmp_path / v / "manifest.sha256").unlink()
    with pytest.raises(RegistryError, match="has no manifest.sha256"):
        load_version(str(tmp_path))


def test_per_series_choices_are_covered_by_the_chain(tmp_path):
    v = _write(tmp_path)
    p = tmp_path / v / "series.json"
    p.write_text(p.read_text().replace("seasonal_naive_daily", "decaying_histogram"))
    with pytest.raises(RegistryError, match="series.json fails its checksum"):
        load_version(str(tmp_path))


def test_hmac_good_bad_missing(tmp_path, gm, caplog):
    signed = _write(tmp_path / "signed", gm, key=KEY)
    assert os.path.isfile(tmp_path / "signed" / signed / "manifest.sig")
    assert load_version(str(tmp_path / "signed"), key=KEY).version == signed
    with pytest.raises(RegistryError, match="signature does not verify with the given key"):
        load_version(str(tmp_path / "signed"), key=b"x" * 32)
    # without a key a signed version is accepted (its signature cannot be checked), and that is said
    with caplog.at_level("WARNING"):
        assert load_version(str(tmp_path / "signed")).version == signed
    assert "signed but no --registry-key" in caplog.text
    _write(tmp_path / "plain", gm)
    with pytest.raises(RegistryError, match="is not signed but --registry-key was given"):
        load_version(str(tmp_path / "plain"), key=KEY)
    # a writer without the key who edits and reseals everything is caught by the signature
    folder = tmp_path / "signed" / signed
    man = json.loads((folder / "manifest.json").read_text())
    man["data_window"]["end"] = "2030-01-01T00:00:00+00:00"
    _reseal(folder, man)
    load_version(str(tmp_path / "signed"))  # the digest chain alone is consistent again ...
    with pytest.raises(RegistryError, match="signature does not verify"):
        load_version(str(tmp_path / "signed"), key=KEY)  # ... the key is what stops it


def test_a_version_that_verifies_but_does_not_load_falls_back_to_the_last_good(tmp_path, gm):
    good = _write(tmp_path, gm, version="20240801T000000Z-aaaaaa")
    bad = _write(tmp_path, gm, version="20240802T000000Z-bbbbbb")
    npz = tmp_path / bad / "global_gbm.npz"
    npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])  # truncated, checksum rewritten
    _reseal(tmp_path / bad)
    refused = []
    reg = load_last_good(str(tmp_path), on_refused=lambda v, e: refused.append((v, str(e))))
    assert reg.version == good and [v for v, _ in refused] == [bad]
    assert "verifies but does not load" in refused[0][1]
    # incompatible content: a model trained on other features
    meta = tmp_path / good / "global_gbm.json"
    m = json.loads(meta.read_text())
    m["feature_names"] = m["feature_names"][:-1]
    meta.write_text(json.dumps(m))
    _reseal(tmp_path / good)
    with pytest.raises(RegistryError, match="other features"):
        load_version(str(tmp_path), good)


def test_tree_arrays_that_point_outside_their_tree_are_refused(tmp_path, gm):
    """The compiled tree walker does not bound-check: a crafted child index must not reach it."""
    v = _write(tmp_path, gm)
    npz = tmp_path / v / "global_gbm.npz"
    with np.load(npz, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    inner = np.flatnonzero(arrays["q0.is_leaf"] == 0)[0]
    arrays["q0.left"] = arrays["q0.left"].copy()
    arrays["q0.left"][inner] = 10**6
    np.savez(npz, **arrays)
    _reseal(tmp_path / v)
    with pytest.raises(RegistryError, match="left child lies outside its tree"):
        load_version(str(tmp_path))


def test_unknown_model_in_a_resealed_series_table_is_refused_on_load(tmp_path):
    v = _write(tmp_path)
    p = tmp_path / v / "series.json"
    p.write_text(p.read_text().replace("seasonal_naive_daily", "os_system"))
    _reseal(tmp_path / v)
    with pytest.raises(RegistryError, match="names model 'os_system'"):
        load_version(str(tmp_path))


def test_old_schema_is_refused(tmp_path):
    v = _write(tmp_path)
    man = json.loads((tmp_path / v / "manifest.json").read_text())
    man["schema_version"] = 1
    _reseal(tmp_path / v, man)
    with pytest.raises(RegistryError, match="schema version 1.*retrain"):
        load_version(str(tmp_path))


def test_missing_artifact_is_refused(tmp_path, gm):
    v = _write(tmp_path, gm)
    (tmp_path / v / "global_gbm.npz").unlink()
    with pytest.raises(RegistryError, match="missing"):
        load_version(str(tmp_path))


def test_key_files(tmp_path):
    with pytest.raises(InputError, match="--registry-key .*nope: cannot read the key file"):
        read_key(str(tmp_path / "nope"))
    (tmp_path / "short").write_bytes(b"abc\n")
    with pytest.raises(InputError, match="the key has 3 bytes; use at least 16"):
        read_key(str(tmp_path / "short"))
    (tmp_path / "k").write_bytes(KEY + b"\n")  # a Secret written with a trailing newline
    assert read_key(str(tmp_path / "k")) == KEY


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
    monkeypatch.setattr(writing.os, "replace", lambda a, b: (calls.append((a, b)), real(a, b)))
    registry.switch_latest(str(tmp_path), "20240801T000000Z-aaaaaa")
    assert calls and calls[0][1].endswith("latest") and os.path.basename(calls[0][0]).startswith(".latest.")


def test_forecast_with_registry_uses_stored_choice(tmp_path):
    from predictor.pipeline.forecasting import ForecastRequest
    from predictor.history import History

    y = _daily(4)
    y[:] = 1 + np.sin(np.arange(len(y)) * 2 * np.pi / 288)
    _write(tmp_path)
    req = ForecastRequest(pd.Timedelta(days=1), pd.Timedelta("5min"), QS)
    fcs = forecast_with_registry(str(tmp_path), History({SERIES: y, "other/x/y/z/cpu": y}, pd.Timedelta("5min")), req)
    a, b = fcs
    assert a.model == "seasonal_naive_daily" and a.version != "adhoc"
    # the stored conformal shifts are applied: q0.99 of a noiseless series moves up by 0.3
    np.testing.assert_allclose(a.values[:, 3] - a.values[:, 0], 0.3, atol=1e-9)
    assert any("not in registry" in n for n in b.notes)
    with pytest.raises(InputError, match="trained for 0.5,0.9,0.95,0.99"):
        forecast_with_registry(str(tmp_path), History({"a": y}, pd.Timedelta("5min")),
                               ForecastRequest(pd.Timedelta(days=1), pd.Timedelta("5min"), (0.5, 0.8)))


def test_a_loaded_version_changed_on_disk_is_refused_on_use(tmp_path):
    from predictor.pipeline.forecasting import ForecastRequest
    from predictor.history import History

    _write(tmp_path)
    reg = load_version(str(tmp_path))
    (tmp_path / reg.version / "series.json").write_text("{}")
    with pytest.raises(RegistryError):
        forecast_version(reg, History({SERIES: _daily(3)}, pd.Timedelta("5min")),
                         ForecastRequest(pd.Timedelta(days=1), pd.Timedelta("5min"), QS))


def test_workers_forecast_the_global_model_exactly_as_one_process(tmp_path, gm):
    """With jobs > 1 each worker runs the global model's batch for its own series: the numbers must
    not depend on how the fleet was split."""
    from predictor.pipeline.forecasting import ForecastRequest
    from predictor.history import History

    keys = [f"ns/deployment/w{i}/c/cpu" for i in range(6)]
    series = {k: {"model": "gbm_global", "shifts": [0.0, 0.0, 0.0, 0.0]} for k in keys}
    series[SERIES] = {"model": "seasonal_naive_daily", "shifts": [0.0, 0.1, 0.2, 0.3]}
    write_version(str(tmp_path), quantiles=QS, series=series,
                  data_window=("2024-08-01T00:00:00+00:00", "2024-08-09T00:00:00+00:00"), step_seconds=300,
                  global_model=gm)
    reg = load_version(str(tmp_path))
    hist = History({k: _daily(8, seed=i) * (1 + i % 3) for i, k in enumerate(keys + [SERIES])}, pd.Timedelta("5min"))
    req = ForecastRequest(pd.Timedelta(hours=6), pd.Timedelta("5min"), QS)
    one = {f.series: f for f in forecast_version(reg, hist, req, jobs=1)}
    two = {f.series: f for f in forecast_version(reg, hist, req, jobs=2)}
    assert set(one) == set(two) == set(keys + [SERIES])
    assert {one[k].model for k in keys} == {"gbm_global"}  # the global model ran, no fallback
    for k in one:
        assert one[k].values.tobytes() == two[k].values.tobytes()
