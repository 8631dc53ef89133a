"""Every setting of `tidewise serve`, in one place (issue 23): `ServeSettings` and its sections.

`tidewise serve` fills them once from the config file's `serve:` section and the flags, then passes
them down; the pure `logic/` modules take their section from here. Pure dataclasses, no I/O. One
module per group: `serve` (vpa, hpa, reclaim, guardrails, loop and the whole), `katalyst` (spd,
ihpa), `tide`, `rebalance` and `select` (what serve may write). Import them from this package."""
from autoscaler.settings.katalyst import SPD_OPT_IN, IhpaSettings, SpdSettings, katalyst_kinds
from autoscaler.settings.rebalance import RebalanceSettings
from autoscaler.settings.select import MANAGE_ANNOTATION, KindSelection, SelectSettings
from autoscaler.settings.serve import (GIB, MIB, GuardrailSettings, HpaSettings, LoopSettings, ReclaimSettings,
                                       ServeSettings, UiSettings, VpaSettings)
from autoscaler.settings.tide import TideSettings

__all__ = ["GIB", "MIB", "MANAGE_ANNOTATION", "SPD_OPT_IN", "GuardrailSettings", "HpaSettings", "IhpaSettings",
           "KindSelection", "LoopSettings", "ReclaimSettings", "RebalanceSettings", "SelectSettings",
           "ServeSettings", "SpdSettings", "TideSettings", "UiSettings", "VpaSettings", "katalyst_kinds"]
