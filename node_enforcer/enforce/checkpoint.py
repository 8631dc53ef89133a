"""The agent's checkpoint: which cores each dedicated pod holds, saved atomically with a checksum.

A restarted agent restores the allocation from it, so that it neither moves a running dedicated
pod nor hands its cores to another. A checkpoint that is missing, unreadable, fails its checksum or
was written for another node is rebuilt from the cgroups (each dedicated pod's `cpuset.cpus`), never
a crash. It is rewritten only when the allocation changed (a no-op reconcile writes nothing) or
the file on disk is not a verified copy of it (a corrupted payload is replaced on the next save).
Before any cgroup write the agent checks that the checkpoint can be saved (`path_problem`): an
agent that enforces but cannot save would move dedicated pods after its next restart.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import stat
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from contracts.atomic import write_text_atomic
from contracts.qos import QosLevel, parse_qos
from node_enforcer.enforce.cgroups import CgroupDriver
from node_enforcer.enforce.files import FilePort
from node_enforcer.model.pod import Pod
from node_enforcer.model.qos import QosSource
from node_enforcer.model.topology import format_cpulist, parse_cpulist
from node_enforcer.policy.allocation import CpuAllocation

log = logging.getLogger(__name__)
SCHEMA = 1


class CheckpointError(Exception):
    """The checkpoint exists but cannot be trusted (message says why)."""


@dataclass(frozen=True)
class Restored:
    dedicated: dict[str, frozenset[int]]  # pod uid -> cpus
    source: str  # checkpoint | cgroups | empty
    reason: str = ""


def _digest(payload: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def payload_of(node: str, allocation: CpuAllocation) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "node": node,
        "pools": {k: format_cpulist(v) for k, v in sorted(allocation.pools.items())},
        "dedicated": {uid: format_cpulist(c) for uid, c in sorted(allocation.dedicated.items())},
    }


def path_problem(path: str) -> str | None:
    """Why the checkpoint could not be saved at `path` (None when it can): the path must be a
    regular file or absent, in a folder this process may write (or whose parent it may create it in)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # absent (the folder checks below say whether it can be made)
        st = None
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        return f"is {kind}; give a file path (the checkpoint is written through a temporary file and a rename)"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        if os.path.exists(folder):
            return f"{folder} is not a folder"
        parent = os.path.dirname(folder)
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
            return f"folder {folder} does not exist and cannot be created"
        return None  # saving creates the one missing folder
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"folder {folder} is not writable (read-only mount or permissions)"
    return None


def save_checkpoint(path: str, node: str, allocation: CpuAllocation) -> bool:
    """Write the checkpoint unless the file already holds this allocation, verified: its stored
    payload must hash to its stored checksum too, so that a corrupted payload under an intact
    checksum is replaced, not trusted. Returns whether it wrote."""
    payload = payload_of(node, allocation)
    digest = _digest(payload)
    try:
        with open(path, encoding="utf-8") as fh:
            old = json.load(fh)
        if old.get("sha256") == digest:
            if _digest(old.get("payload")) == digest:
                return False
            log.warning("checkpoint %s: its payload does not match its checksum; discarded and rewritten", path)
    except FileNotFoundError:
        pass
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        log.warning("checkpoint %s is unreadable (%s); rewritten", path, exc)
    doc = {"sha256": digest, "saved": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "payload": payload}
    write_text_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n", what="checkpoint", create_folder=True)
    log.info("checkpoint saved: %d dedicated pod(s) -> %s", len(payload["dedicated"]), path)
    return True


def load_checkpoint(path: str, node: str) -> dict[str, frozenset[int]] | None:
    """The dedicated allocation saved in `path`; None when there is no file; CheckpointError when corrupt."""
    if not os.path.exists(path):
        return None
    if not os.path.isfile(path):  # a folder, or a FIFO whose open would block the agent
        raise CheckpointError(f"checkpoint {path} is not a regular file")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        payload, digest = doc["payload"], doc["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {path} is unreadable: {exc}") from exc
    if _digest(payload) != digest:
        raise CheckpointError(f"checkpoint {path} fails its sha256 checksum")
    if payload.get("schema") != SCHEMA:
        raise CheckpointError(f"checkpoint {path} has schema {payload.get('schema')!r}, expected {SCHEMA}")
    if payload.get("node") != node:
        raise CheckpointError(f"checkpoint {path} is for node {payload.get('node')!r}, not {node!r}")
    try:
        return {str(uid): parse_cpulist(text) for uid, text in payload["dedicated"].items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {path}: bad dedicated entry: {exc}") from exc


def rebuild_from_cgroups(pods: Sequence[Pod], driver: CgroupDriver, files: FilePort,
                         resolver: QosSource | None = None) -> dict[str, frozenset[int]]:
    """Each running dedicated pod's current `cpuset.cpus`; the policy keeps those that still fit."""
    out = {}
    for pod in pods:
        spec = resolver.resolve(pod) if resolver is not None else parse_qos(pod.annotations)
        if spec.level is not QosLevel.DEDICATED:
            continue
        cpus = driver.read_cpuset(pod, files)
        if cpus:
            out[pod.uid] = cpus
    return out


def restore(path: str, node: str, pods: Sequence[Pod], driver: CgroupDriver, files: FilePort,
            resolver: QosSource | None = None) -> Restored:
    """What a starting agent believes each dedicated pod holds."""
    live = {p.uid for p in pods}
    try:
        saved = load_checkpoint(path, node)
    except CheckpointError as exc:
        log.warning("%s; rebuilding the allocation from the cgroups", exc)
        return Restored(rebuild_from_cgroups(pods, driver, files, resolver), "cgroups", str(exc))
    if saved is None:
        rebuilt = rebuild_from_cgroups(pods, driver, files, resolver)
        return Restored(rebuilt, "cgroups" if rebuilt else "empty", f"no checkpoint at {path}")
    return Restored({uid: cpus for uid, cpus in saved.items() if uid in live}, "checkpoint")
