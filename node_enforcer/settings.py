"""The agent's settings: the `enforcer:` section of the settings file (flags override it).

The policy's and the eviction's own settings are nested, not copied (`policy:` and `eviction:`
sub-sections, each field with its default, unit and reason where it is used). Sections written
before the nesting put those keys flat in `enforcer:` (`reserved_cpus: 0`, `evict: true`);
`nest_section` still reads them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from contracts.errors import InputError
from node_enforcer.policy.allocation import PolicySettings
from node_enforcer.policy.eviction import EvictionSettings
from node_enforcer.policy.io import IoSettings
from node_enforcer.policy.isolation import IsolationSettings
from node_enforcer.policy.network import NetworkSettings


@dataclass(frozen=True)
class EnforcerSettings:
    """The `enforcer:` section of the settings file (flags override it)."""

    node: str = ""  # this node's name (the DaemonSet passes spec.nodeName)
    pods_from: str = "kubelet"  # kubelet | api | file
    pods_file: str | None = None  # with pods_from=file
    kubelet_url: str = "https://127.0.0.1:10250"  # the kubelet's authenticated port (needs nodes/proxy)
    kubelet_ca: str | None = None  # CA bundle for the kubelet's serving cert; None = system CAs
    sysfs_root: str = "/sys"
    cgroup_root: str = "/sys/fs/cgroup"
    cgroup_driver: str = "cgroupfs"  # the kubelet's --cgroup-driver: cgroupfs | systemd
    cgroup_version: int = 0  # 0 = detect (2 when the root has cgroup.controllers)
    # folder under each hierarchy that holds kubepods[.slice]; a mapping gives one per v1 controller
    # (`{cpuset: a, memory: b, "*": default}`), for nodes whose hierarchies differ
    cgroup_parent: str | dict[str, str] = ""
    proc_root: str = "/proc"
    # memory PSI file for eviction; None = <proc_root>/pressure/memory (the whole node). A cgroup's
    # own file (e.g. kubepods' memory.pressure on v2) measures the pods' stalls only.
    psi_path: str | None = None
    checkpoint: str = "/var/lib/tidewise/enforcer-checkpoint.json"
    reclaim_plan: str | None = None  # the serving loop's ReclaimPlan for this node (JSON file)
    # where the plan comes from: api (this Node's tidewise.io/reclaim-plan annotation, written by
    # `tidewise serve --apply`), file (reclaim_plan), none; "" = file when reclaim_plan is set, else none
    reclaim_plan_from: str = ""
    interval_seconds: float = 5.0  # reconcile period: cgroups drift (kubelet rewrites) within seconds
    dry_run: bool = False  # cgroup writes: print the diff instead
    eviction_enabled: bool = True  # False = memory pressure is not even read
    policy: PolicySettings = field(default_factory=PolicySettings)
    # eviction.dry_run (default True) sends evictions with dryRun=All; `--evict` (or the flat
    # `evict: true` of older sections) turns it off
    eviction: EvictionSettings = field(default_factory=EvictionSettings)
    io: IoSettings = field(default_factory=IoSettings)  # disk I/O limits of reclaimed pods (`io:`)
    network: NetworkSettings = field(default_factory=NetworkSettings)  # batch egress cap (`network:`)
    reclaimed_root_memory: bool = True  # memory.max/high on the QoS cgroup holding only batch pods
    reclaimed_root_memory_high_ratio: float = 0.95  # Katalyst's: reclaim-throttle batch at 95% of its cap
    # publish the topology on this node's Katalyst CustomNodeResource (status.topologyZone); needs the API
    report_topology: bool = False

    def isolation(self) -> IsolationSettings:
        return IsolationSettings(self.io, self.network, self.reclaimed_root_memory,
                                 self.reclaimed_root_memory_high_ratio)


_NESTED: dict[str, type[PolicySettings] | type[EvictionSettings]] = {"policy": PolicySettings, "eviction": EvictionSettings}


def nest_section(section: Mapping[str, Any] | None, evict: bool | None = None) -> dict[str, Any]:
    """An `enforcer:` section with the flat keys of older files moved under `policy:` / `eviction:`.

    `evict: X` (flat) and the `--evict` flag (`evict`, which wins) become `eviction.dry_run = not X`.
    A key given both flat and nested keeps the nested value. Unknown keys are left where they are,
    for the settings reader to refuse with its own message; the sub-sections are returned as dicts."""
    out = dict(section or {})
    for name, cls in _NESTED.items():
        nested = out.get(name)
        if nested is not None and not isinstance(nested, Mapping):
            raise InputError(f"config section 'enforcer': {name} must be a mapping of keys, not {type(nested).__name__}")
        merged = {f.name: out.pop(f.name) for f in fields(cls) if f.name in out and f.name != "dry_run"}
        if name == "eviction" and "evict" in out:
            merged["dry_run"] = not out.pop("evict")
        merged.update(nested or {})
        if name == "eviction" and evict is not None:  # the flag wins over the file
            merged["dry_run"] = not evict
        if merged:
            out[name] = merged
    return out
