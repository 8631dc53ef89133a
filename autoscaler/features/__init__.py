"""The serving features, as one explicit tuple (issue 23; no registration at import time).

The tuple's order is the order of their steps: the DECIDE features inside the loop's "recommend"
step (VPA, HPA, IHPA, reclaim, SPD: SPDs' skips come after the nodes'), then the ACT features
(tide, then rebalance) as steps of their own. A new feature: a module here with a class following
`base.Feature`, and one entry below.
"""
from __future__ import annotations

import pandas as pd

from autoscaler.features.base import ACT, DECIDE, Feature, ForecastNeed
from autoscaler.features.hpa import HpaDecider, HpaFeature
from autoscaler.features.ihpa import IhpaFeature
from autoscaler.features.rebalance import RebalanceFeature
from autoscaler.features.reclaim import ReclaimFeature
from autoscaler.features.spd import SpdFeature
from autoscaler.features.tide import TideFeature
from autoscaler.features.vpa import VpaFeature
from autoscaler.output.eviction import Evictor
from autoscaler.output.sinks import Sink
from autoscaler.routines.change_policy import ChangePolicy
from autoscaler.routines.context import parse_duration
from autoscaler.settings import ServeSettings

__all__ = ["ACT", "DECIDE", "Feature", "ForecastNeed", "extra_kinds", "features"]


def features(settings: ServeSettings, policy: ChangePolicy | None = None, *, step: pd.Timedelta | None = None,
             sink: Sink | None = None, evictor: Evictor | None = None) -> tuple[Feature, ...]:
    """Every feature of serve, each built once per loop (their memories span runs). `policy`: the
    loop's change policy (its memory of writes); `evictor`: serve's one Evictor (tide drains and
    rebalancing share its rate limit), None for a dry-run one each."""
    policy = policy if policy is not None else ChangePolicy(settings)
    step = step if step is not None else parse_duration(settings.loop.step, what="step")
    hpa = HpaDecider(settings, step)  # the IHPA feature decides through it (its stabilisers are shared)
    return (VpaFeature(settings, policy, step), HpaFeature(settings, hpa), IhpaFeature(settings, hpa),
            ReclaimFeature(settings, policy.memory, step), SpdFeature(settings),
            TideFeature(settings, policy, sink, evictor), RebalanceFeature(settings, policy, step, sink, evictor))


def extra_kinds(feats: tuple[Feature, ...]) -> tuple[str, ...]:
    """The optional kinds (model/cluster.py OPTIONAL_KINDS) the enabled features read, each once."""
    return tuple(dict.fromkeys(k for f in feats for k in f.kinds))
