"""The `serve: tide:` section: tidal node pools (`autoscaler/logic/tide.py` plans with it; the
studies' tide simulator sweeps it)."""
from __future__ import annotations

from dataclasses import dataclass

from contracts.annotations import TIDE_MOVED_ANNOTATION
from contracts.eviction_markers import check_rule
from predictor.durations import parse_duration


@dataclass
class TideSettings:
    """The `serve: tide:` section (off by default: `serve --tide` or `enabled: true`)."""

    enabled: bool = False
    # a node goes back to online service this long before the forecast needs it: the batch pods on it
    # are evicted, the taint swapped and online pods scheduled there before the ramp. 1h leaves room
    # for ~60 runs of rate-limited evictions and for a forecast that is half an hour late
    lead: str = "1h"
    # a node stays on a side at least this long before it is lent again (no flapping), and is lent
    # only when the forecast leaves it idle for lead + min_dwell: 2h of batch work repays a drain
    min_dwell: str = "2h"
    # online nodes are filled to at most 1 / (1 + headroom) of allocatable by requests: 0.25 (80%
    # full) leaves room for the scheduler's fragmentation and for pods without a forecast
    headroom: float = 0.25
    quantile: float = 0.9  # forecast quantile of online demand (as the VPA target's default)
    max_moves: int = 2  # nodes lent or handed back per run (a minute): a bad forecast moves 2 nodes, not 20
    # no node is lent this long after one was handed back: the hand-back said the need was higher, and
    # lending another node at the next wiggle is a drain and a refill for nothing (the simulator: pods
    # moved per node-hour lent -45% on seeds 0-2 for -3% lent, zero late minutes either way)
    hold_after_return: str = "1h"
    # "calibrated": the median forecast + the `error_quantile` of its own past errors at that hour of lead
    # (last `error_days`), floored by the requests measured now + their usual rise, packed with
    # `pack_headroom`; "fixed": the forecast's `quantile` x (1 + `headroom`). Calibrated falls back to
    # fixed until each lead hour has `error_min` of errors (a restarted serve keeps none: in memory)
    margin: str = "calibrated"
    error_quantile: float = 0.99  # the simulator: 0.97 was late on seeds 0-2, 0.99 not
    error_days: float = 3.0  # errors kept per lead hour: three days follow a change of regime
    error_min: str = "6h"
    pack_headroom: float = 0.1  # the calibrated need's packing slack (fragmentation only: the margin covers error)
    # a forecast short by at most this many nodes is waited out while the requests measured now are
    # clear of the online side (calibrated only: a one-node wiggle is noise, not a ramp)
    return_slack: int = 1
    evictions_per_minute: int = 5  # the shared Evictor's limit for tide drains
    # online pods with emptyDir/hostPath volumes lose that data when a lent node is drained: "never"
    # (kept, and the node is not lent), "memory" (emptyDir in memory may go) or "always"
    evict_local_storage: str = "never"
    moved_annotation: str = TIDE_MOVED_ANNOTATION  # on each node: when Tidewise last moved it (dwell)

    def check(self) -> None:
        """ValueError (InputError for a duration) naming the first setting that cannot work."""
        for name in ("lead", "min_dwell", "hold_after_return", "error_min"):
            parse_duration(getattr(self, name), what=f"serve.tide.{name}")
        if not 0 < self.quantile < 1:
            raise ValueError(f"quantile {self.quantile} must be between 0 and 1")
        if self.headroom < 0:
            raise ValueError(f"headroom {self.headroom} must be >= 0")
        if self.max_moves < 1 or self.evictions_per_minute < 1:
            raise ValueError("max_moves and evictions_per_minute must be at least 1")
        for name in ("error_quantile", "error_days", "pack_headroom", "return_slack"):
            value = getattr(self, name)  # a YAML string here would fail below with a traceback
            if isinstance(value, bool) or not isinstance(value, int if name == "return_slack" else (int, float)):
                raise ValueError(f"{name} {value!r} must be a {'whole ' if name == 'return_slack' else ''}number")
        if self.margin not in ("calibrated", "fixed"):
            raise ValueError(f"margin {self.margin!r} must be 'calibrated' or 'fixed'")
        check_rule(self.evict_local_storage, "evict_local_storage")
        if not 0 < self.error_quantile < 1:
            raise ValueError(f"error_quantile {self.error_quantile} must be between 0 and 1")
        if not self.error_days > 0 or self.pack_headroom < 0 or self.return_slack < 0:
            raise ValueError("error_days must be > 0, pack_headroom and return_slack >= 0")
