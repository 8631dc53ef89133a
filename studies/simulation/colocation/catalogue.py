"""Which policy settings a study runs: each policy's default, then its sweep (one knob at a time)."""
from __future__ import annotations

from studies.simulation.colocation.forecast_policy import tidewise_set
from studies.simulation.colocation.policies import Katalyst, Koordinator, NoColocation, NodeForecasts, Policy

POLICY_NAMES = ("none", "katalyst", "koordinator", "tidewise")

# The baselines' sweeps (issue 6): reserve in 1-core steps where the budget is decided, so that the
# best baseline within it is not an artefact of a coarse grid
KATALYST_RESERVES = (0.0, 1.0, 2.0, 3.0, 5.0, 6.0, 8.0)
KATALYST_FACTORS = (1.0, 1.5, 2.0)
KOORDINATOR_THRESHOLDS = (0.5, 0.55, 0.6, 0.7, 0.75, 0.8, 0.85)


def policy_set(which: str, forecasts: NodeForecasts | None, sweeps: bool = True) -> list[Policy]:
    """The default of each requested policy, then (when `sweeps`) its swept settings."""
    names = POLICY_NAMES if which == "all" else (which,)
    out: list[Policy] = []
    for name in names:
        if name == "none":
            out.append(NoColocation())
        elif name == "katalyst":
            out.append(Katalyst())
            if sweeps:
                out += [Katalyst(reserve=r, knob="reserve") for r in KATALYST_RESERVES]
                out += [Katalyst(factor=f, knob="factor") for f in KATALYST_FACTORS]
        elif name == "koordinator":
            out.append(Koordinator())
            if sweeps:
                out += [Koordinator(threshold=t, knob="threshold") for t in KOORDINATOR_THRESHOLDS]
        elif name == "tidewise":
            if forecasts is None:
                raise ValueError("the tidewise policy needs forecasts")
            out += tidewise_set(forecasts, sweeps)
        else:
            raise ValueError(f"unknown policy {name!r}: use all or one of {', '.join(POLICY_NAMES)}")
    return out
