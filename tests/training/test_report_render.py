"""render_report: a self-contained page with one embedded plot per forecast and no outside URL."""
import base64
import re

import numpy as np
import pandas as pd

from predictor.history import History
from predictor.types import Forecast
from training.report import render_report


def _history_and_forecasts(n: int = 3):
    idx = pd.date_range("2024-08-01", periods=3 * 288, freq="5min", tz="UTC")
    series, fcs = {}, []
    for i in range(n):
        key = f"ns/Deployment/app{i}/app/cpu"
        y = pd.Series(1 + np.sin(np.arange(len(idx)) * 2 * np.pi / 288) * 0.5, index=idx)
        series[key] = y
        fidx = pd.date_range(idx[-1] + pd.Timedelta("5min"), periods=288, freq="5min")
        vals = np.column_stack([np.full(288, 1.0 + k * 0.1) for k in range(4)])
        fcs.append(Forecast(key, fidx, (0.5, 0.9, 0.95, 0.99), vals, "seasonal_naive_daily"))
    return History(series, pd.Timedelta("5min")), fcs


def test_render_report_embeds_one_png_per_series(tmp_path):
    hist, fcs = _history_and_forecasts(3)
    out = tmp_path / "report.html"
    render_report(str(out), hist, fcs, {fcs[0].series: {"class": "tidal", "peak_window": {"start_hour": 13, "end_hour": 15}}})
    text = out.read_text()
    pngs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(pngs) == 3
    assert all(base64.b64decode(p)[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    for f in fcs:
        assert f.series in text
    # self-contained: no outside reference of any kind
    assert not re.search(r'(src|href)="(https?:)?//', text)
    assert "<script" not in text


def test_render_report_fleet_table(tmp_path):
    hist, fcs = _history_and_forecasts(2)
    out = tmp_path / "r.html"
    fleet = [{"series": f.series, "class": "tidal", "model": "gbm_global", "skill": 0.7, "coverage": 0.95} for f in fcs]
    render_report(str(out), hist, fcs, fleet=fleet)
    text = out.read_text()
    assert text.count("<tr>") == 3  # header + 2 rows
    assert "gbm_global" in text and "0.700" in text
