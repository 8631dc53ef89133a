"""Pure estimators: forecasts and cluster facts in, decisions (dataclasses) out. No I/O."""
