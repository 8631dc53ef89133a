"""A registry version whose LightGBM text, manifest fields or stored history are malformed but
whose checksums were fixed up (as a writer of the volume without the key can) is refused by
`load_version` with one line (UnloadableVersion: a bad input to a command), never a crash of the
process: the text is checked in Python and probed in a child process before LightGBM loads it
here (the edits: tests/registry_damage.py)."""
from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("lightgbm")

from predictor.history import History  # noqa: E402
from predictor.models.decision_time import DecisionTimeGBM  # noqa: E402
from predictor.models.gbm import GlobalGBM  # noqa: E402
from predictor.registry import UnloadableVersion, load_version  # noqa: E402
from tests.predictor.test_decision_time import fleet  # noqa: E402
from tests.registry_damage import QS, damage, write  # noqa: E402

STEP = pd.Timedelta("5min")
LIGHTGBM_EDITS = ("split_feature 99999, tree_sizes left", "split_feature 99999", "truncated", "left child out of range",
                  "NaN threshold")
# how -> what the refusal names
FIELD_EDITS = {"negative recent_step_seconds": "recent_step_seconds is -300", "negative step_seconds": "step_seconds is -300",
               "recent.parquet not Parquet": "recent.parquet is not a Parquet file", "quantiles not numbers": "quantiles"}


@pytest.fixture(scope="module")
def history() -> History:
    return History(fleet(days=8), STEP)


@pytest.fixture(scope="module")
def decision_models(history) -> dict[str, DecisionTimeGBM]:
    quick = dict(max_iter=8, max_rows=3000, min_samples_leaf=20)
    return {"vpa": DecisionTimeGBM(span=12, features="hour_peak", **quick).fit_many(history.series, STEP),
            "hpa": DecisionTimeGBM(span=2, **quick).fit_many(history.series, STEP)}


@pytest.mark.parametrize("how", LIGHTGBM_EDITS)
def test_a_malformed_decision_time_model_refuses_the_version_with_one_line(tmp_path, history, decision_models, how):
    folder = tmp_path / write(tmp_path, history, decision_models)
    assert set(load_version(str(tmp_path)).decision_models) == {"vpa", "hpa"}
    damage(folder, how)
    with pytest.raises(UnloadableVersion) as err:
        load_version(str(tmp_path))
    msg = str(err.value)
    assert "decision_time_vpa.json: the LightGBM model of quantile 0.5: tree " in msg and "\n" not in msg
    assert err.value.reason == "load"
    # forecast and report do not read the decision-time models: the version serves them
    reg = load_version(str(tmp_path), decision_models=False)
    assert reg.decision_models == {} and reg.decision_errors == {}


def test_the_global_model_in_lightgbm_is_checked_the_same_way(tmp_path, history):
    gm = GlobalGBM(quantiles=QS, backend="lightgbm", max_iter=5, max_origins=2, max_rows=2000).fit_many(history.series)
    folder = tmp_path / write(tmp_path, history, {}, global_model=gm)
    assert load_version(str(tmp_path)).global_model is not None
    damage(folder, "split_feature 99999", artifact="global_gbm.npz")
    with pytest.raises(UnloadableVersion, match=r"global_gbm.npz: the LightGBM model of quantile 0.5: tree \d+: "
                                                r"a split_feature lies outside 0\.\.\d+"):
        load_version(str(tmp_path), decision_models=False)


@pytest.mark.parametrize("how", FIELD_EDITS)
def test_a_malformed_manifest_field_or_stored_history_refuses_the_version(tmp_path, history, how):
    folder = tmp_path / write(tmp_path, history, {})
    damage(folder, how)
    with pytest.raises(UnloadableVersion) as err:
        load_version(str(tmp_path), decision_models=False)
    assert FIELD_EDITS[how] in str(err.value) and "\n" not in str(err.value)


def test_a_text_the_checks_let_through_but_that_crashes_lightgbm_is_refused_by_the_probe(tmp_path, history,
                                                                                        decision_models, monkeypatch):
    """The child-process probe is the guarantee against what the checks did not foresee: with the
    text check switched off, the model that makes LightGBM abort refuses the version, and this
    process (which would have loaded it) lives on."""
    import predictor.models.trees as trees

    folder = tmp_path / write(tmp_path, history, decision_models)
    damage(folder, "split_feature 99999, tree_sizes left")
    monkeypatch.setattr(trees, "checked_model_text", lambda text, n_features: text)
    with pytest.raises(UnloadableVersion, match=r"does not load: decision_time_vpa.json: it crashes LightGBM \(SIG"):
        load_version(str(tmp_path))


def test_the_probe_is_told_each_lightgbm_model_once(tmp_path, history, decision_models, monkeypatch):
    """A version's models are probed in one child process, and only then loaded here."""
    import predictor.registry.loading as loading

    write(tmp_path, history, decision_models)
    probed: list[int] = []
    monkeypatch.setattr(loading, "probe_lightgbm", lambda models: probed.append(len(models)))
    reg = load_version(str(tmp_path))
    assert probed == [sum(len(m.models_) for m in decision_models.values())]
    assert all(m.booster_ is not None for d in reg.decision_models.values() for m in d.models_)


def test_the_probe_names_the_model_lightgbm_refuses_or_crashes_on(decision_models):
    from predictor.registry.probe import ProbeError, probe_lightgbm
    from tests.registry_damage import tamper

    hpa = decision_models["hpa"].models_[0]
    good = (hpa.checked_, hpa.n_features)
    probe_lightgbm([good, good])
    with pytest.raises(ProbeError, match=r"LightGBM refuses it \(.*number of classes") as err:
        probe_lightgbm([good, ("tree\nversion=v4\n", hpa.n_features)])
    assert err.value.index == 1
    with pytest.raises(ProbeError, match=r"it crashes LightGBM \(SIG[A-Z]+ in a child process\)") as err:
        probe_lightgbm([good, good, (tamper(hpa.text, "split_feature 99999, tree_sizes left"), hpa.n_features)])
    assert err.value.index == 2
