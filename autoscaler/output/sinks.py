"""Where changes go: the API (`ApiSink`), YAML files for GitOps review (`FileSink`), or nowhere but
the log (`DryRunSink`, the default). Each `write` returns what happened; none raises for one object."""
from __future__ import annotations

import copy
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml

from autoscaler.kube import Kube
from autoscaler.model.views import HpaView
from autoscaler.output.objects import Change
from contracts.errors import InputError
from contracts.kube_errors import Conflict, Forbidden, KubeError, NotFound, TooManyRequests
from contracts.atomic import check_output_path, replace_or_stage, write_text_atomic

log = logging.getLogger(__name__)
SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present

WRITTEN, DRY_RUN, NOT_FOUND, FORBIDDEN, THROTTLED, CONFLICT, FAILED = (
    "written", "dry-run", "not-found", "forbidden", "throttled", "conflict", "failed")


@dataclass
class WriteResult:
    key: str
    outcome: str
    detail: str = ""


class Sink(Protocol):
    name: str

    def write(self, change: Change) -> WriteResult: ...

    def close(self) -> None: ...


@dataclass
class DryRunSink:
    """Logs each change and keeps it (for the command's summary and for tests); writes nothing."""

    name: str = "dry-run"
    changes: list[Change] = field(default_factory=list)

    def write(self, change: Change) -> WriteResult:
        self.changes.append(change)
        log.info("dry-run: would write %s: %s", change.key, json.dumps(change.patch, sort_keys=True)[:500])
        return WriteResult(change.key, DRY_RUN)

    def close(self) -> None:
        pass


def file_path(out_dir: str, change: Change) -> str:
    """One YAML per object: DIR/<kind>/<namespace>/<name>.yaml (cluster-scoped: DIR/<kind>/<name>.yaml)."""
    parts = [out_dir, change.kind.lower()] + ([change.namespace] if change.namespace else []) + [f"{change.name}.yaml"]
    return os.path.join(*parts)


@dataclass
class FileSink:
    """Writes each changed object whole, as YAML, atomically; `decisions.json` next to them keeps every
    change's reasons (what forecast, quantile, margin and guardrail produced each number)."""

    out_dir: str
    name: str = "file"
    written: dict[str, str] = field(default_factory=dict)  # key -> path
    reasons: dict[str, Any] = field(default_factory=dict)
    objects: dict[str, Any] = field(default_factory=dict)  # key -> the object as last written this run
    locks: dict[str, Any] = field(default_factory=dict)  # key -> its lock: two changes to one object in turn

    def write(self, change: Change) -> WriteResult:
        with self.locks.setdefault(change.key, threading.Lock()):  # dict.setdefault is atomic
            return self._write(change)

    def _write(self, change: Change) -> WriteResult:
        path = file_path(self.out_dir, change)
        if change.key in self.objects:
            # a second change to one object in a run (an HPA's floor and its target utilisation): the
            # file shows both, its patch applied over what the first wrote
            body = copy.deepcopy(change.patch)
            (body.get("metadata") or {}).pop("resourceVersion", None)
            change = Change(change.kind, change.api_version, change.namespace, change.name,
                            merge_patch(self.objects[change.key], body), change.patch, change.subresource,
                            change.safe_direction, change.reasons)
        try:
            # temp file + rename: a reader never sees half a file. No fsync per file: thousands of
            # review files are not worth thousands of disk flushes (a crash loses a run, not a file's sense)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # rename replaces whatever is there: only a regular file or nothing may be (no folder, device)
            check_output_path(path, what="file sink output")
            tmp = f"{path}.tmp{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as fh:
                yaml.dump(change.obj, fh, Dumper=SafeDumper, sort_keys=False, default_flow_style=False)
            replace_or_stage(tmp, path, what="file sink output")  # `serve --once`: with --report, or not at all
        except InputError as exc:
            return WriteResult(change.key, FAILED, str(exc))
        except OSError as exc:
            return WriteResult(change.key, FAILED, f"{path}: {exc}")
        self.written[change.key] = path
        self.objects[change.key] = change.obj
        self.reasons[change.key] = {**self.reasons.get(change.key, {}), **change.reasons}
        return WriteResult(change.key, WRITTEN, path)

    def close(self) -> None:
        if self.reasons:
            write_text_atomic(os.path.join(self.out_dir, "decisions.json"), reasons_json(self.reasons),
                              what="file sink output")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: `patch` applied to `target` (null removes a key), as the API server applies a merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def reasons_json(reasons: dict[str, Any]) -> str:
    """One JSON object, one change per line (sorted): diffs of a review folder show the changes
    that moved. Each line goes through json's C encoder; `indent=` would switch to the pure-Python
    one, which took seconds a run at 10,000 changes."""
    lines = [f"{json.dumps(str(k))}: {json.dumps(reasons[k], sort_keys=True, default=str)}" for k in sorted(reasons)]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def rebase_hpa(change: Change, fresh: dict[str, Any]) -> Change:
    """The HPA patch again, against the object as it is now: fresh resourceVersion, and the floor
    clamped to a maxReplicas that may have been lowered meanwhile."""
    patch = copy.deepcopy(change.patch)
    mx = HpaView(fresh).spec.get("maxReplicas")
    if isinstance(mx, int) and patch["spec"]["minReplicas"] > mx:
        patch["spec"]["minReplicas"] = mx
    patch["metadata"]["resourceVersion"] = (fresh.get("metadata") or {}).get("resourceVersion")
    return Change(change.kind, change.api_version, change.namespace, change.name, change.obj, patch,
                  change.subresource, change.safe_direction, change.reasons)


@dataclass
class ApiSink:
    """Writes through `Kube`: 404 skipped, 403 reported, 409 retried with a fresh resourceVersion,
    429 already backed off inside `Kube` (reported as throttled when it persists)."""

    kube: Kube
    conflict_retries: int = 3
    name: str = "api"
    # its writes show in the next cluster read: the loop compares them there (the dry-run and file
    # sinks leave the cluster as it was)
    updates_cluster = True

    def _send(self, c: Change) -> None:
        if c.kind == "VerticalPodAutoscaler":
            self.kube.patch_vpa_status(c.namespace or "", c.name, c.patch)
        elif c.kind == "HorizontalPodAutoscaler":
            self.kube.patch_hpa(c.namespace or "", c.name, c.patch)
        elif c.kind == "Node":
            # two parts, two requests: the plan annotation (metadata) and the extended resources (status)
            if "metadata" in c.patch:
                self.kube.patch_node(c.name, {"metadata": c.patch["metadata"]})
            if "status" in c.patch:
                self.kube.patch_node_status(c.name, {"status": c.patch["status"]})
        elif c.kind == "CustomNodeResource":
            self.kube.patch_cnr_status(c.name, c.patch)
        elif c.kind == "ResourceRecommend":
            self.kube.patch_resource_recommend_status(c.namespace or "", c.name, c.patch)
        elif c.kind == "IntelligentHorizontalPodAutoscaler":
            self.kube.patch_ihpa_status(c.namespace or "", c.name, c.patch)
        elif c.kind == "ServiceProfileDescriptor":
            self._send_spd(c)
        else:
            raise KubeError(f"no API write for kind {c.kind}")

    def _send_spd(self, c: Change) -> None:
        """Create (the API server drops status on create: status goes in a second request), or merge
        patch the spec and the status that differ."""
        ns = c.namespace or ""
        if c.create:
            self.kube.create_spd(ns, {"apiVersion": c.api_version, "kind": c.kind, "metadata": c.patch["metadata"],
                                      "spec": c.patch["spec"]})
        elif "spec" in c.patch:
            self.kube.patch_spd(ns, c.name, {k: v for k, v in c.patch.items() if k != "status"})
        if "status" in c.patch:
            self.kube.patch_spd_status(ns, c.name, {"status": c.patch["status"]})

    def _fresh(self, change: Change) -> dict[str, Any] | None:
        """The HPA as the API holds it now (None when it cannot be read)."""
        try:
            return self.kube.get_hpa(change.namespace or "", change.name)
        except KubeError:
            return None

    def write(self, change: Change) -> WriteResult:
        attempt = 0
        while True:
            try:
                self._send(change)
                return WriteResult(change.key, WRITTEN, f"after {attempt} conflict(s)" if attempt else "")
            except Conflict as exc:
                if attempt >= self.conflict_retries:
                    log.warning("%s: still conflicting after %d retries: %s", change.key, attempt, exc)
                    return WriteResult(change.key, CONFLICT, str(exc))
                attempt += 1
                if change.kind == "HorizontalPodAutoscaler" and "metrics" in change.patch.get("spec", {}):
                    fresh = self._fresh(change)
                    if fresh is not None and change.undo is not None and \
                            HpaView(fresh).spec.get("metrics") == change.undo.patch["spec"]["metrics"]:
                        # only other fields moved (say, minReplicas in this same run): the same patch again
                        change.patch["metadata"]["resourceVersion"] = (fresh.get("metadata") or {}).get("resourceVersion")
                        continue
                    return WriteResult(change.key, CONFLICT, f"spec.metrics changed since read: {exc}")
                if change.kind == "HorizontalPodAutoscaler":
                    try:
                        change = rebase_hpa(change, self.kube.get_hpa(change.namespace or "", change.name))
                    except NotFound as gone:
                        return WriteResult(change.key, NOT_FOUND, str(gone))
                    except KubeError as other:
                        return WriteResult(change.key, FAILED, str(other))
                log.info("%s: conflict, retrying with a fresh resourceVersion (%d)", change.key, attempt)
            except NotFound as exc:
                log.info("%s: not found, skipped (%s)", change.key, exc)
                return WriteResult(change.key, NOT_FOUND, str(exc))
            except Forbidden as exc:
                log.error("%s: forbidden — check the ClusterRole in deploy/rbac.yaml (%s)", change.key, exc)
                return WriteResult(change.key, FORBIDDEN, str(exc))
            except TooManyRequests as exc:
                return WriteResult(change.key, THROTTLED, str(exc))
            except KubeError as exc:
                return WriteResult(change.key, FAILED, str(exc))

    def close(self) -> None:
        pass


def note_reason(sink: Sink | None, key: str, entry: dict[str, Any]) -> None:
    """Lists `entry` under `key` in the file sink's decisions.json (a skip, a tide move, an eviction);
    the other sinks keep no reasons."""
    if isinstance(sink, FileSink):
        sink.reasons[key] = entry
