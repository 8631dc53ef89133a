"""What `tidewise enforce --once` prints and what --plan-out holds (the plan, the diff, evictions)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from node_enforcer.agent import ReconcileResult


def _fmt_bytes(v: int | None) -> str:
    return "-" if v is None else f"{v / 2**30:.1f}Gi" if v >= 2**30 else f"{v // 2**20}Mi"


def render(node: str, topo_summary: str, res: "ReconcileResult", dry_run: bool) -> str:
    from node_enforcer.model.topology import format_cpulist

    a, rep = res.allocation, res.report
    assert a is not None and rep is not None, "render() takes a completed reconcile"
    lines = [f"node {node}: {topo_summary}"]
    lines.append("pools: " + ", ".join(f"{k} {format_cpulist(v) or '-'} ({len(v)})"
                                       for k, v in (("reserve", a.pools["reserve"]), ("share", a.pools["share"]),
                                                    ("reclaim", a.pools["reclaim"]))))
    rows = [("POD", "QOS", "POOL", "CPUS", "MEMS", "QUOTA", "MEM MAX", "OOM ADJ")]
    for p in a.pods:
        rows.append((p.key, p.qos, p.pool, format_cpulist(p.cpus), format_cpulist(p.mems),
                     "-" if p.cpu_quota_millis is None else f"{p.cpu_quota_millis}m", _fmt_bytes(p.memory_max_bytes),
                     "-" if p.oom_score_adj is None else str(p.oom_score_adj)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    for r in a.refused:
        lines.append(f"refused {r.key}: {r.reason}")
    for pod, problem in a.problems:
        lines.append(f"malformed annotation on {pod} (treated as shared_cores): {problem}")
    for n in a.notes:
        lines.append(f"note: {n}")
    verb = "would write" if dry_run else "wrote"
    lines.append(f"{verb} {len(rep.changes)} value(s)" + (":" if rep.changes else " (nothing differs)"))
    lines += [f"  {c}" for c in rep.changes]
    for m in rep.missing:
        lines.append(f"no cgroup yet for {m} (not started, or another --cgroup-driver/--cgroup-parent)")
    for u in rep.unsupported:
        lines.append(f"unsupported here: {u}")
    for e in rep.errors:
        lines.append(f"error: {e}")
    for ev in res.evictions:
        lines.append(f"{'dry-run ' if ev.dry_run else ''}evict {ev.pod}: {ev.reason} -> {ev.result}")
    lines += _render_isolation(res)
    return "\n".join(lines)


def _render_isolation(res: "ReconcileResult") -> list[str]:
    lines = [] if res.isolation is None else res.isolation.summary()
    if res.topology_report is not None:
        lines.append(f"topology report (CustomNodeResource): {res.topology_report}")
    return lines


def plan_doc(res: "ReconcileResult", node: str, topo_summary: str, cgroup_version: int,
             dry_run: bool) -> dict[str, Any]:
    """What --plan-out holds: the allocation, the diff, what could not be written, and evictions."""
    report = res.report
    assert res.allocation is not None and report is not None, "plan_doc() takes a completed reconcile"
    return {"node": node, "topology": topo_summary, "cgroup_version": cgroup_version,
            "dry_run": dry_run, "allocation": res.allocation.to_dict(),
            "changes": [{"path": c.path, "old": c.old, "new": c.new} for c in report.changes],
            "missing": report.missing, "unsupported": report.unsupported, "errors": report.errors,
            "evictions": [ev.__dict__ for ev in res.evictions],
            "isolation": None if res.isolation is None else res.isolation.to_dict(),
            "topology_report": res.topology_report,
            "timings_ms": {k: round(v * 1000, 3) for k, v in res.timings.items()}}
