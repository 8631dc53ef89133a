"""LightGBM's text model is checked in Python before LightGBM reads it: every edit that makes
LightGBM's loader abort, read past the text or predict from outside its arrays is refused with a
ModelTextError, and a model as `model_to_string` writes it passes and predicts the same (the
edits: tests/registry_damage.py)."""
from __future__ import annotations

import numpy as np
import pytest

lightgbm = pytest.importorskip("lightgbm")

from predictor.models.lightgbm_text import ModelTextError, checked_model_text  # noqa: E402
from tests.registry_damage import EDITS, OTHER, resized, tamper  # noqa: E402

N_FEATURES = 6


def fitted(y: np.ndarray | None = None) -> tuple[str, np.ndarray]:
    """(model_to_string of a small quantile booster, rows to predict) on seeded data."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, N_FEATURES))
    x[::9, 2] = np.nan
    y = x[:, 0] * 2 + np.nan_to_num(x[:, 2]) + rng.normal(size=400) if y is None else y
    m = lightgbm.LGBMRegressor(objective="quantile", alpha=0.9, n_estimators=12, num_leaves=7, min_child_samples=10,
                               verbose=-1, n_jobs=1).fit(x, y)
    return m.booster_.model_to_string(), x


@pytest.fixture(scope="module")
def model() -> tuple[str, np.ndarray]:
    return fitted()


def test_a_model_as_lightgbm_writes_it_passes_and_predicts_the_same(model):
    text, x = model
    checked = checked_model_text(text, N_FEATURES)
    assert checked.endswith("end of trees\n") and "parameters:" not in checked and text.startswith(checked)
    np.testing.assert_array_equal(lightgbm.Booster(model_str=checked).predict(x), lightgbm.Booster(model_str=text).predict(x))
    assert checked_model_text(resized(text), N_FEATURES) == checked  # the test's own resizing changes nothing


def test_one_leaf_trees_pass():
    """A constant target fits trees of one leaf, which LightGBM writes with empty inner arrays."""
    text, x = fitted(np.ones(400))
    assert "num_leaves=1\n" in text
    checked = checked_model_text(text, N_FEATURES)
    np.testing.assert_array_equal(lightgbm.Booster(model_str=checked).predict(x), np.ones(len(x)))


@pytest.mark.parametrize("how", [*EDITS, *OTHER])
def test_every_edit_that_breaks_the_loader_or_the_tree_is_refused(model, how):
    text, _ = model
    edited = tamper(text, how)
    assert edited != text
    with pytest.raises(ModelTextError) as err:
        checked_model_text(edited, N_FEATURES)
    assert "\n" not in str(err.value)


def test_the_feature_count_is_the_one_asked_for(model):
    with pytest.raises(ModelTextError, match="max_feature_idx"):
        checked_model_text(model[0], N_FEATURES + 1)


@pytest.mark.parametrize("text", ["", "tree", "booster\nversion=v4\n", "tree\nversion=v4\n", "tree\r\nversion=v4\r\n",
                                  "tree\n\u00e9=1\n\n"])
def test_what_is_not_a_model_text_is_refused(text):
    with pytest.raises(ModelTextError):
        checked_model_text(text, N_FEATURES)


def one_tree(text: str, left: list[int], right: list[int]) -> str:
    """A model of `text`'s header and one tree with these children (every split on feature 0 at 0.5)."""
    n = len(left) + 1
    inner = lambda v: " ".join([v] * (n - 1))  # noqa: E731
    tree = "\n".join(["Tree=0", f"num_leaves={n}", "num_cat=0", f"split_feature={inner('0')}", f"threshold={inner('0.5')}",
                      f"decision_type={inner('2')}", f"left_child={' '.join(map(str, left))}",
                      f"right_child={' '.join(map(str, right))}", "leaf_value=" + " ".join(map(str, range(n))),
                      "is_linear=0", "shrinkage=1"])
    return resized(text.split("\n\nTree=0\n", 1)[0] + "\n\n" + tree + "\n\n\nend of trees\n")


def test_children_apart_from_the_root_are_refused(model):
    """Nodes 1 and 2 name each other: each node and leaf is some node's child once, yet no walk from
    the root reaches them."""
    good = one_tree(model[0], [1, -1], [-2, -3])
    assert lightgbm.Booster(model_str=checked_model_text(good, N_FEATURES)).predict(np.full((1, N_FEATURES), 0.7)) == [1]
    with pytest.raises(ModelTextError, match="cannot be reached from the root"):
        checked_model_text(one_tree(model[0], [-1, 2, 1], [-2, -3, -4]), N_FEATURES)
