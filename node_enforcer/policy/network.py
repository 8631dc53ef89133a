"""Egress bandwidth for reclaimed (batch) pods: HTB classes on the node's uplink. Pure.

    1:    htb, default 1:10 (anything unclassified is online traffic)
    1:1   the link (`link_bit_rate`)
    1:10  online: rate = link - batch cap, ceil = the link, prio 0 (served first, borrows everything)
    1:30  reclaimed: rate = ceil = `reclaimed_bit_rate`, prio 7 (never more than its cap)

Reclaimed pods' sockets are put in class 1:30 by cgroup, one of two ways (`classifier`):

- `priority` (v1 `net_prio`): the pod's `net_prio.ifpriomap` maps the uplink to priority 0x10030;
  HTB takes a packet whose `skb->priority` equals one of its class ids straight into that class, so
  no tc filter is needed. What this kernel supports (it has no `cls_cgroup`).
- `classid` (v1 `net_cls`): the pod's `net_cls.classid` is 0x10030 and a `cgroup` tc filter on the
  root reads it (kernels built with CONFIG_NET_CLS_CGROUP).

Cgroup v2 has no file for either: there the class can only be set by an eBPF classifier, which the
agent does not load; the plan says so and shapes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from contracts.errors import InputError

CLASSIFIERS = ("priority", "classid")
HANDLE = 1
ONLINE_MINOR, RECLAIMED_MINOR = 0x10, 0x30


@dataclass(frozen=True)
class NetworkSettings:
    enabled: bool = False  # off by default: the uplink's name and speed are the node's own
    device: str = ""  # the uplink (eth0, bond0); its root qdisc is replaced by the HTB tree
    link_bit_rate: int = 10_000_000_000  # the uplink's speed, bit/s (10 Gbit/s)
    reclaimed_bit_rate: int = 1_000_000_000  # batch egress cap, bit/s (1 Gbit/s: 10% of a 10G link)
    classifier: str = "priority"  # priority (v1 net_prio) | classid (v1 net_cls + tc cgroup filter)

    def check(self) -> None:
        """InputError naming the first bad value."""
        if not self.enabled:
            return
        if not self.device or "/" in self.device or len(self.device) > 15:
            raise InputError(f"enforcer.network.device {self.device!r}: give the uplink's interface name (eth0)")
        for key in ("link_bit_rate", "reclaimed_bit_rate"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InputError(f"enforcer.network.{key} {v!r}: give a positive integer, bit/s")
        if self.reclaimed_bit_rate >= self.link_bit_rate:
            raise InputError(f"enforcer.network.reclaimed_bit_rate {self.reclaimed_bit_rate} must be below "
                             f"link_bit_rate {self.link_bit_rate}")
        if self.classifier not in CLASSIFIERS:
            raise InputError(f"enforcer.network.classifier {self.classifier!r}: use one of {list(CLASSIFIERS)}")


@dataclass(frozen=True)
class HtbClass:
    classid: str  # "1:30"
    parent: str  # "1:" or "1:1"
    rate: int  # bit/s
    ceil: int  # bit/s
    prio: int


@dataclass(frozen=True)
class NetPlan:
    device: str
    classifier: str
    default_minor: int
    classes: tuple[HtbClass, ...]
    reclaimed_uids: tuple[str, ...]  # whose cgroups get the class

    @property
    def mark(self) -> int:
        """The value of net_cls.classid / the ifpriomap priority: 0x10030 for class 1:30."""
        return (HANDLE << 16) | RECLAIMED_MINOR


def plan_network(reclaimed_uids: Sequence[str], s: NetworkSettings) -> NetPlan | None:
    """The HTB tree and which pods go to the batch class; None when shaping is off."""
    if not s.enabled:
        return None
    link, cap = s.link_bit_rate, s.reclaimed_bit_rate
    classes = (HtbClass(f"{HANDLE}:1", f"{HANDLE}:", link, link, 0),
               HtbClass(f"{HANDLE}:{ONLINE_MINOR:x}", f"{HANDLE}:1", link - cap, link, 0),
               HtbClass(f"{HANDLE}:{RECLAIMED_MINOR:x}", f"{HANDLE}:1", cap, cap, 7))
    return NetPlan(s.device, s.classifier, ONLINE_MINOR, classes, tuple(sorted(reclaimed_uids)))
