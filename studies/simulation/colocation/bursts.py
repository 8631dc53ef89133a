"""Within-minute bursts: each node-minute's online demand has a peak above its mean.

The traces are 1- and 5-minute means; what a node sees inside the minute is not in them. The model
is estimated from the traces themselves and extrapolated below the minute with a stated law:

- **Measured** (each 1-minute trace, its training history): the relative excess of the busiest
  1-minute value over its 5-minute window's mean, x = max(v1..v5) / mean(v1..v5) - 1, one sample per
  window. Traces recorded at 5 or 30 minutes have no such windows; their services draw from the
  pooled samples of all 1-minute traces.
- **Scaling law** (self-similar demand): the relative excess of the peak of k sub-periods over
  their window's mean, at sub-period length tau, scales as tau^(H - 1) (H, the Hurst exponent).
  H is estimated per trace from the mean excess at tau = 1 and 2 minutes (k = 5 both):
  H = 1 + log2(mean x(2 min) / mean x(1 min)). A burst is the peak of five 12-second means over the
  minute's mean (k = 5, as measured), so x(12 s) = x(1 min) * 5^(1 - H). Where a trace shows
  H > 1 (its minutes are dominated by the tide and slow drifts, which do not exist inside a
  minute), H is capped at 1: inside the minute demand is taken to be no smoother than at minutes.
- **Settings**: `none` (no bursts, the old simulator), `calibrated` (the above), `high` (H = 0.5
  for every trace: uncorrelated demand, the roughest the law allows for stationary demand: x * 5^0.5).
- **Node peak**: each service's burst is its demand times a draw from its trace's samples (times
  the factor), capped at its limit; bursts of different services are independent, so a node's
  excess is their root sum of squares (exact for Gaussian bursts; their peaks rarely coincide).

Draws are seeded apart from the batch queue: every policy sees the same bursts.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

SETTINGS = ("none", "calibrated", "high")
WINDOW = 5  # sub-periods per window, measured (1 min in 5) and simulated (12 s in 1 min)
HIGH_H = 0.5


def excess_samples(values: np.ndarray, tau: int = 1, k: int = WINDOW) -> np.ndarray:
    """Relative excess of the largest of k consecutive tau-minute means over their mean, per window
    (1-minute input values; windows with a gap or a zero mean are left out)."""
    v = np.asarray(values, dtype=float)
    n = len(v) // tau * tau
    means = v[:n].reshape(-1, tau).mean(axis=1)
    m = len(means) // k * k
    w = means[:m].reshape(-1, k)
    avg = w.mean(axis=1)
    ok = np.isfinite(w).all(axis=1) & (avg > 0)
    return w[ok].max(axis=1) / avg[ok] - 1.0


def hurst(values: np.ndarray) -> float:
    """H from the mean excess at 1- and 2-minute sub-periods (k = 5 both); NaN when undefined."""
    a, b = excess_samples(values, 1), excess_samples(values, 2)
    if len(a) == 0 or len(b) == 0 or a.mean() <= 0 or b.mean() <= 0:
        return float("nan")
    return float(1.0 + np.log2(b.mean() / a.mean()))


@dataclass
class BurstModel:
    """Per trace, the measured excess samples and the factor that carries them below the minute."""

    setting: str
    samples: dict[str, np.ndarray] = field(default_factory=dict)  # trace -> measured x (1 min in 5)
    hurst: dict[str, float] = field(default_factory=dict)  # trace -> H as measured (uncapped)
    pooled: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def factor(self, trace: str) -> float:
        """x(12 s) / x(1 min) for this trace's services: 5^(1 - H), H capped at 1 (or H = 0.5: high)."""
        if self.setting == "none":
            return 0.0
        if self.setting == "high":
            return float(WINDOW ** (1.0 - HIGH_H))
        h = self.hurst.get(trace, self.pooled_hurst())
        return float(WINDOW ** (1.0 - min(h, 1.0)))

    def pooled_hurst(self) -> float:
        hs = [h for h in self.hurst.values() if np.isfinite(h)]
        return float(np.median(hs)) if hs else 1.0

    def sample_for(self, trace: str) -> np.ndarray:
        own = self.samples.get(trace)
        return own if own is not None and len(own) else self.pooled

    def summary(self) -> dict:
        """The estimated numbers (details.json, the doc): per trace and pooled."""
        def q(x: np.ndarray, p: float) -> float:
            return float(np.quantile(x, p)) if len(x) else 0.0

        per = {name: {"windows": int(len(x)), "mean_excess": float(x.mean()) if len(x) else 0.0,
                      "p99_excess": q(x, 0.99), "hurst": self.hurst.get(name, float("nan")),
                      "factor": self.factor(name)} for name, x in self.samples.items()}
        return {"setting": self.setting, "window": WINDOW, "burst_resolution_seconds": 60 / WINDOW,
                "pooled": {"windows": int(len(self.pooled)), "mean_excess": float(self.pooled.mean())
                           if len(self.pooled) else 0.0, "p50_excess": q(self.pooled, 0.5),
                           "p99_excess": q(self.pooled, 0.99), "p999_excess": q(self.pooled, 0.999),
                           "median_hurst": self.pooled_hurst()},
                "traces": per}


def estimate(one_minute: dict[str, np.ndarray], setting: str) -> BurstModel:
    """The model from each 1-minute trace's values (history only: no peeking at the evaluation)."""
    if setting not in SETTINGS:
        raise ValueError(f"burst setting {setting!r}: use one of {', '.join(SETTINGS)}")
    samples = {name: excess_samples(v) for name, v in one_minute.items()}
    hs = {name: hurst(v) for name, v in one_minute.items()}
    pooled = np.concatenate(list(samples.values())) if samples else np.zeros(0)
    return BurstModel(setting, samples, hs, pooled)


def node_peaks(online: np.ndarray, services: list, trace_names: list[str], service_demand,
               model: BurstModel, seed: int) -> np.ndarray:
    """nodes x minutes: each node-minute's peak online demand (>= its mean `online`).

    `service_demand(s)` gives service s's capped demand per minute; `services` carry `.node`,
    `.trace` (index into trace_names) and `.limit`."""
    if model.setting == "none":
        return online.copy()
    rng = np.random.default_rng(np.random.SeedSequence([seed, 13]))
    sq = np.zeros_like(online)
    for s in services:
        name = trace_names[s.trace]
        x = model.sample_for(name)
        if not len(x):
            continue
        d = service_demand(s)
        burst = np.minimum(d * model.factor(name) * rng.choice(x, size=d.shape), s.limit - d)
        sq[s.node] += np.maximum(burst, 0.0) ** 2
    return online + np.sqrt(sq)
