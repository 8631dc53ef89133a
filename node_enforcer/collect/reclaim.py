"""The reclaim plan the serving loop publishes for this node, read every pass.

Two sources. In a cluster (`--reclaim-plan-from api`, what deploy/enforcer-daemonset.yaml runs):
`tidewise serve --apply` writes it to the node's own `tidewise.io/reclaim-plan` annotation and the
agent reads it with a `get` of its Node. Offline (`--reclaim-plan FILE`): a JSON or YAML file
holding that annotation's own JSON, or the Node carrying it (what `serve --sink file` and `tidewise
demo` write under recommendations/node/). The plan, its annotation schema and its checks live in `contracts.reclaim`,
shared with the publisher (standard library only: the per-node agent must not pay for numpy and
pandas, about 120 MiB of resident memory against its 80 MiB budget).

A plan the agent cannot trust — missing, malformed, another schema, another node's, not yet valid
(generated in the future) or past its `valid_until`, from the annotation or a file alike — is refused and replaced by `zero_plan` (reclaim nothing beyond the
pool's floor): the agent fails closed instead of lending the online pods' room on stale numbers.
An absurd one is cut to what a well-formed plan could say: honoured at most `MAX_PLAN_WINDOW` after
its generation, and lending at most the node's CPUs and memory, per NUMA node too (`node_capacity`).
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
from typing import Callable, Mapping

from contracts.errors import InputError, TidewiseError
from contracts.reclaim import (PLAN_ANNOTATION, NodeCapacity, ReclaimPlan, check_plan_in_force, document_in,
                               plan_from_annotation, plan_from_document, within_capacity, zero_plan)
from node_enforcer.model.topology import Topology

log = logging.getLogger(__name__)


def load_reclaim_plan(path: str, node: str | None = None) -> ReclaimPlan:
    """The plan in the file at `path` (the annotation's document, or a Node carrying it), for `node`
    (any node when None); its window is not checked against a clock here. InputError names the file."""
    what = f"--reclaim-plan {path}"
    if not os.path.isfile(path):
        raise InputError(f"{what}: no such file" if not os.path.exists(path) else f"{what}: not a file")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise InputError(f"{what}: not text ({exc.reason}); give the {PLAN_ANNOTATION} annotation's JSON") from None
    except ValueError:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InputError(f"{what}: neither JSON nor YAML ({str(exc).splitlines()[0]}); give the "
                             f"{PLAN_ANNOTATION} annotation's JSON or the Node carrying it") from None
    return plan_from_document(document_in(data, what), node or None, what)


def node_capacity(topology: Topology, proc_root: str = "/proc") -> NodeCapacity:
    """The node's CPUs (its online threads) and memory (the NUMA nodes' MemTotal, else /proc/meminfo's;
    None when neither is readable), what no plan may lend more than."""
    memory: int | None = sum(topology.numa_memory_bytes.values()) or None
    if memory is None or set(topology.numa_memory_bytes) != set(topology.numa_nodes):
        try:
            with open(os.path.join(proc_root, "meminfo"), encoding="utf-8") as fh:
                m = re.search(r"^MemTotal:\s+(\d+)\s*kB", fh.read(), re.M)
            memory = int(m.group(1)) * 1024 if m else memory
        except OSError:
            pass
    return NodeCapacity(len(topology.cpus) * 1000, memory,
                        {n: len(c) * 1000 for n, c in topology.numa_cpus.items()}, dict(topology.numa_memory_bytes))


def reclaim_loader(path: str | None, node: str,
                   now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
                   annotations: Callable[[], Mapping[str, str]] | None = None,
                   capacity: NodeCapacity | None = None) -> Callable[[], ReclaimPlan | None]:
    """Re-read the plan every pass (the publisher rewrites it): from the node's annotation when
    `annotations` is given (it returns this Node's annotations), else from the file at `path`.

    Fails closed: a plan that is missing, unreadable, malformed, another node's or expired is
    refused with a warning (once per distinct reason) and replaced by `zero_plan` — the reclaim pool
    keeps only its floor. A plan valid too long or lending more than `capacity` is cut (the plan's
    `reasons` say how, logged once per distinct cut). No source at all (no path, no annotations)
    means no plan: None."""
    last: list[str] = [""]

    def warn(msg: str) -> None:  # once per distinct problem, not every pass
        log.log(logging.DEBUG if msg == last[0] else logging.WARNING, msg)
        last[0] = msg

    def read(at: dt.datetime) -> ReclaimPlan:
        if annotations is not None:
            return plan_from_annotation(annotations().get(PLAN_ANNOTATION), node, at)
        p = load_reclaim_plan(path or "", node or None)
        # the annotation's checks: not expired, not generated in the future
        check_plan_in_force(p, at, f"--reclaim-plan {path}", start_key="generated_at")
        return p

    def load() -> ReclaimPlan | None:
        if annotations is None and not path:
            return None
        at = now()
        try:
            p = read(at)
        except TidewiseError as exc:
            warn(f"reclaim plan refused, reclaiming nothing beyond the floor: {exc}")
            return zero_plan(node, at)
        if capacity is not None:
            p = within_capacity(p, capacity)
        if p.reasons:
            warn("reclaim plan cut to what a well-formed plan could grant: " + "; ".join(p.reasons))
        else:
            last[0] = ""
        return p

    return load
