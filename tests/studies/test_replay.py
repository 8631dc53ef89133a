"""Replay over a recorded series (what the benchmark scores and `tidewise replay` reuses): the
stock-VPA reference and the scores agree with ../shared/eval's reference scorer, and Tidewise's
replay only ever looks at the past."""
from __future__ import annotations

import numpy as np
import pandas as pd

from studies.replay.decisions import DailyChoiceForecaster, replay_hpa, replay_vpa, replay_vpa_default
from studies.replay.scores import vpa_scores
from autoscaler.settings import HpaSettings, VpaSettings
from tests.autoscaler.test_logic_hpa import _reference


def tidal(days=10, seed=0):
    idx = pd.date_range("2026-01-01", periods=days * 288, freq="5min", tz="UTC")
    h = (idx.hour + idx.minute / 60).to_numpy()
    rng = np.random.default_rng(seed)
    return pd.Series(10 + 8 * np.sin(2 * np.pi * (h - 9) / 24) + rng.normal(0, 0.5, len(idx)), index=idx)


def test_stock_vpa_reference_and_scores_match_the_reference_scorer():
    ref = _reference()
    s = tidal()
    start, end = s.index[0] + pd.Timedelta("8D"), s.index[0] + pd.Timedelta("9D")
    ours = replay_vpa_default(s, start, end)
    theirs = ref.vpa_default(s, start, end)
    assert np.allclose(ours.to_numpy(), theirs.to_numpy())
    use = s[start:end]
    assert vpa_scores(use, ours.reindex(use.index)) == ref.vpa_scores(use, theirs.reindex(use.index))


class SpyForecaster(DailyChoiceForecaster):
    """Records the newest sample each forecast could see."""

    def _history(self, y, origin):
        h = super()._history(y, origin)
        self.__dict__.setdefault("seen", []).append((origin, h.end))
        return h


def test_replays_use_only_the_past_and_beat_a_flat_request_on_a_clean_tide():
    s = tidal()
    start, end = s.index[0] + pd.Timedelta("8D"), s.index[0] + pd.Timedelta("9D")
    fc = SpyForecaster(key="x")
    req = replay_vpa(s, start, end, VpaSettings(quantile=0.9, margin=0.0), fc)
    assert fc.seen and all(last < origin for origin, last in fc.seen)
    use = s[start:end]
    slack, viol = vpa_scores(use, req.reindex(use.index))
    default_slack, default_viol = vpa_scores(use, replay_vpa_default(s, start, end).reindex(use.index))
    assert slack < 0.8 * default_slack and viol <= max(default_viol, 0.05)
    d1, floor, serving, r0 = replay_hpa(s, start, end, per=2.0, settings=HpaSettings(quantile=0.9), forecaster=fc)
    assert len(d1) == len(floor) == len(serving) and r0 >= 1
    assert (serving >= 1).all() and (floor >= 1).all()


def test_replay_input_leaves_out_the_requests_and_replicas_of_a_fetched_history(tmp_path):
    """A history `tidewise fetch --what cpu,memory,requests,replicas` (or `tidewise demo`) wrote: replay
    reads its usage; the requests (bytes for memory, above any core count) and replicas are not usage."""
    import pytest

    from contracts.errors import InputError
    from studies.replay.inputs import load_replay_input

    y = tidal(days=3)
    ts = y.index.strftime("%Y-%m-%dT%H:%M:%SZ")
    ids = {"shop/Deployment/web/app/cpu": y.to_numpy(), "shop/Deployment/web/app/memory_request": 2.0**31,
           "shop/Deployment/web/app/cpu_request": 24.0, "shop/Deployment/web/-/replicas": 3.0}
    frame = pd.concat([pd.DataFrame({"series": k, "timestamp": ts, "value": v}) for k, v in ids.items()])
    path = tmp_path / "fetched.csv"
    frame.to_csv(path, index=False)
    assert set(load_replay_input(str(path), pd.Timedelta("5min")).history.series) == {"shop/Deployment/web/app/cpu"}
    frame[frame["series"] != "shop/Deployment/web/app/cpu"].to_csv(path, index=False)
    with pytest.raises(InputError, match="only requests and replicas series"):
        load_replay_input(str(path), pd.Timedelta("5min"))
