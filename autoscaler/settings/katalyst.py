"""Settings of serve's Katalyst objects: the ServiceProfileDescriptor it writes (`serve.spd`) and the
IntelligentHorizontalPodAutoscaler it serves (`serve.ihpa`). Both are on by default and both are
harmless by default: an SPD is written only for a workload that opts in with the annotation below,
an IHPA only where one exists, and every write is a dry run unless serve runs with --apply."""
from __future__ import annotations

from dataclasses import dataclass

from contracts.errors import InputError

SPD_OPT_IN = "spd.katalyst.kubewharf.io/enable"
PERIODS = ("day", "week")


@dataclass
class SpdSettings:
    # list SPDs and write one per opted-in workload (False: SPDs are neither read nor written)
    enabled: bool = True
    annotation: str = SPD_OPT_IN  # on the Deployment/StatefulSet; "true" opts in (Katalyst's own switch)
    # status.aggMetrics holds one item per hour of the day (24) or of the week (168): a week needs two
    # weeks of history to say anything a day does not, and is 7x the object (~40 KB at two containers)
    period: str = "day"
    quantiles: tuple[float, ...] = (0.5, 0.95)  # one aggMetrics entry per quantile of each hour's usage
    # whole days of history a profile needs; 2, as the service profile's daily shape (predictor/profile.py)
    min_days: int = 2

    def __post_init__(self) -> None:
        if self.period not in PERIODS:
            raise InputError(f"serve.spd.period {self.period!r}: use one of {list(PERIODS)}")
        self.quantiles = tuple(float(q) for q in self.quantiles)
        if not self.quantiles or not all(0 < q < 1 for q in self.quantiles):
            raise InputError(f"serve.spd.quantiles {list(self.quantiles)}: give quantiles between 0 and 1")
        if self.min_days < 1:
            raise InputError(f"serve.spd.min_days {self.min_days}: at least 1 whole day is needed")


@dataclass
class IhpaSettings:
    # read IHPAs and write their status (a cluster without the CRD has none: nothing is read or written)
    enabled: bool = True
    # an HPA owned by an IHPA whose scaleStrategy is not Auto (Katalyst's default, Preview, promises not
    # to change replicas) keeps the minReplicas its user set; False raises it like any other HPA
    respect_preview: bool = True


def katalyst_kinds(spd: SpdSettings, ihpa: IhpaSettings) -> tuple[str, ...]:
    """The optional kinds (`model/cluster.py` OPTIONAL_KINDS) these features read."""
    return (("ServiceProfileDescriptor",) if spd.enabled else ()) + \
        (("IntelligentHorizontalPodAutoscaler",) if ihpa.enabled else ())
