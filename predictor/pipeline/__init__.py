"""The forecasting pipeline: which model runs for a series, its fallbacks and calibration, in one
layer above the estimators of `predictor.models`.

A history series passes through it in one direction, and every module here imports only modules
listed before it (tests/test_layout.py holds both rules; `predictor.models`, `features`, `types`,
`history` and `registry` import nothing from here):

- `calibration`: conformal shifts from backtest residuals, pinball and coverage, and the online
  adaptive-conformal offsets of the decision-time quantiles;
- `choice`: models by name, and `ChoiceForecaster`, which runs a stored `predictor.types.Choice`;
- `selection`: the rolling-origin backtest of the candidates and the per-series choice;
- `fallback`: the no-backtest default and what runs when the chosen model cannot;
- `batched`: seasonal naive for many series as one array (the serving loop's hot path);
- `forecasting`: the entry point (`ForecastRequest`, `forecast_history`, `forecast_series`);
- `serving`: forecasting with a loaded registry version (`forecast_version`);
- `decision`: the decision-time walk and overlay that serve and replay share.
"""

