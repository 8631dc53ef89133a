"""A small HTTP fake of the few Kubernetes API endpoints Tidewise uses, for the real `kubernetes`
client to talk to (DESIGN.md: no kube-apiserver can be installed here).

It keeps objects by path, bumps `resourceVersion` on every write, answers a merge patch that
carries a stale resourceVersion with 409 (as the API server does), applies status-subresource
patches to `status` only, and records every request (with its query string). `?watch=true` on a
list path streams that kind's events after the given resourceVersion (`node_enforcer.testing.watch_stream`:
`watch.compact()` for 410 Gone, `watch.drop()` / `watch.drop_next()` for a cut connection). `fail(method, pattern, status, times)` makes
the next matching requests fail (404, 403, 409, 429 with Retry-After) before the real handling.

Writes of custom kinds (VPA, Katalyst CRDs) are validated against the vendored CRD schemas and
refused with 422 Invalid when they break them, as the API server does. `POST .../pods/{name}/eviction`
is the Eviction API: it answers 429 when a PodDisruptionBudget whose `matchLabels` select the pod
would be violated (healthy = matching pods not Failed/Succeeded; `minAvailable` or
`maxUnavailable`, as a count or a percentage, of the pods matching plus those evicted and not yet
replaced), else deletes the pod (`?dryRun=All` deletes nothing).
"""
from __future__ import annotations

import copy
import json
import re
import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from node_enforcer.testing.watch_stream import WatchLog
from tests.autoscaler.k8s_schemas import schema_errors

# kind -> (path prefix, plural, namespaced, api version)
KINDS = {
    "Node": ("/api/v1", "nodes", False, "v1"),
    "Pod": ("/api/v1", "pods", True, "v1"),
    "Deployment": ("/apis/apps/v1", "deployments", True, "apps/v1"),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", True, "apps/v1"),
    "HorizontalPodAutoscaler": ("/apis/autoscaling/v2", "horizontalpodautoscalers", True, "autoscaling/v2"),
    "VerticalPodAutoscaler": ("/apis/autoscaling.k8s.io/v1", "verticalpodautoscalers", True, "autoscaling.k8s.io/v1"),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True, "coordination.k8s.io/v1"),
    "CustomNodeResource": ("/apis/node.katalyst.kubewharf.io/v1alpha1", "customnoderesources", False,
                           "node.katalyst.kubewharf.io/v1alpha1"),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", True, "apps/v1"),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True, "policy/v1"),
    "ServiceProfileDescriptor": ("/apis/workload.katalyst.kubewharf.io/v1alpha1", "serviceprofiledescriptors", True,
                                 "workload.katalyst.kubewharf.io/v1alpha1"),
    "IntelligentHorizontalPodAutoscaler": ("/apis/autoscaling.katalyst.kubewharf.io/v1alpha2",
                                           "intelligenthorizontalpodautoscalers", True,
                                           "autoscaling.katalyst.kubewharf.io/v1alpha2"),
    "TideNodePool": ("/apis/tide.katalyst.kubewharf.io/v1alpha1", "tidenodepools", False,
                     "tide.katalyst.kubewharf.io/v1alpha1"),
}
PLURAL = {v[1]: k for k, v in KINDS.items()}
BUILTIN = {"Node", "Pod", "Deployment", "StatefulSet", "HorizontalPodAutoscaler", "Lease", "ReplicaSet",
           "PodDisruptionBudget"}
EVICTION = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction")


def object_path(obj: dict[str, Any]) -> str:
    prefix, plural, namespaced, _ = KINDS[obj["kind"]]
    md = obj["metadata"]
    return f"{prefix}/namespaces/{md['namespace']}/{plural}/{md['name']}" if namespaced else f"{prefix}/{plural}/{md['name']}"


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


@dataclass
class Request:
    method: str
    path: str
    content_type: str
    body: Any
    query: str = ""

    @property
    def is_watch(self) -> bool:
        return "watch=true" in self.query.lower()


class FakeApiServer:
    def __init__(self, objects: list[dict[str, Any]] = ()):
        self.objects: dict[str, dict[str, Any]] = {}
        self.watch = WatchLog()
        self.lock = threading.Lock()
        self.requests: list[Request] = []
        self.faults: list[list[Any]] = []  # [method, regex, status, remaining, headers]
        self.disrupted: dict[str, int] = {}  # PDB path -> pods evicted and not yet replaced
        for o in objects:
            self.put(o)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> "FakeApiServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    @property
    def rv(self) -> int:
        return self.watch.rv

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        path = object_path(obj)
        if obj["kind"] == "Pod" and path not in self.objects:  # a replacement pod ends a disruption
            for pdb in self._budgets(obj):
                if self.disrupted.get(object_path(pdb), 0) > 0:
                    self.disrupted[object_path(pdb)] -= 1
        obj = self.watch.record("MODIFIED" if path in self.objects else "ADDED",
                                dict(obj, apiVersion=obj.get("apiVersion") or KINDS[obj["kind"]][3]))
        self.objects[path] = obj
        return copy.deepcopy(obj)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        path = object_path({"kind": kind, "metadata": {"name": name, "namespace": namespace}})
        self.watch.record("DELETED", self.objects.pop(path))

    def lists(self, plural: str) -> list[Request]:
        """The list (not watch) requests of one kind, e.g. `lists("pods")`."""
        return [r for r in self.requests if r.method == "GET" and r.path.endswith(f"/{plural}") and not r.is_watch]

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self.objects[object_path({"kind": kind, "metadata": {"name": name, "namespace": namespace}})]

    def fail(self, method: str, pattern: str, status: int, times: int = 1, headers: dict[str, str] | None = None) -> None:
        self.faults.append([method, re.compile(pattern), status, times, headers or {}])

    def writes(self, method: str | None = None) -> list[Request]:
        return [r for r in self.requests if r.method in ("PATCH", "PUT", "POST") and (method is None or r.method == method)]

    # HTTP ---------------------------------------------------------------------------------------
    def _watch(self, handler: BaseHTTPRequestHandler, path: str, query: str) -> None:
        with self.lock:
            self.requests.append(Request("GET", path, "", None, query))
        q = urllib.parse.parse_qs(query)
        m = re.fullmatch(r"(/api/v1|/apis/[^/]+/[^/]+)(?:/namespaces/([^/]+))?/([^/]+)", path)
        kind = PLURAL.get(m.group(3)) if m else None
        ns = m.group(2) if m else None
        self.watch.serve(handler, (q.get("resourceVersion") or ["0"])[0], float((q.get("timeoutSeconds") or ["30"])[0]),
                         lambda o: o.get("kind") == kind and (ns is None or o["metadata"].get("namespace") == ns))

    def evictions(self) -> list[Request]:
        """Every eviction request (allowed or refused), oldest first."""
        return [r for r in self.requests if r.method == "POST" and EVICTION.fullmatch(r.path)]

    def _budgets(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        """The PodDisruptionBudgets whose `matchLabels` select `pod`."""
        ns, labels = pod["metadata"].get("namespace"), pod["metadata"].get("labels") or {}
        return [o for o in self.objects.values() if o["kind"] == "PodDisruptionBudget"
                and o["metadata"].get("namespace") == ns and _selects(o, labels)]

    def _pdb_allows(self, pod: dict[str, Any]) -> str | None:
        """None when evicting `pod` keeps every budget that selects it, else the budget's name. Expected
        pods = those matching now + those evicted and not yet replaced (the controller's count)."""
        ns = pod["metadata"].get("namespace")
        for pdb in self._budgets(pod):
            matched = [o for o in self.objects.values() if o["kind"] == "Pod" and o["metadata"].get("namespace") == ns
                       and _selects(pdb, o["metadata"].get("labels") or {})]
            healthy = sum((p.get("status") or {}).get("phase") not in ("Failed", "Succeeded") for p in matched)
            expected = len(matched) + self.disrupted.get(object_path(pdb), 0)
            spec = pdb["spec"]

            def count(v: Any) -> int:
                return -(-expected * int(v[:-1]) // 100) if isinstance(v, str) and v.endswith("%") else int(v)
            if "minAvailable" in spec:
                allowed = healthy - count(spec["minAvailable"])
            else:
                allowed = count(spec.get("maxUnavailable", 0)) - (expected - healthy)
            if allowed < 1:
                return pdb["metadata"]["name"]
        return None

    def _evict(self, ns: str, name: str, query: str) -> tuple[int, Any, dict[str, str]]:
        path = object_path({"kind": "Pod", "metadata": {"name": name, "namespace": ns}})
        pod = self.objects.get(path)
        if pod is None:
            return 404, status(404, "NotFound", f'pods "{name}" not found'), {}
        blocking = self._pdb_allows(pod)
        if blocking is not None:
            return 429, status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption "
                                                       f"budget ({blocking})."), {}
        if "dryrun=all" not in query.lower():
            for pdb in self._budgets(pod):
                self.disrupted[object_path(pdb)] = self.disrupted.get(object_path(pdb), 0) + 1
            self.delete("Pod", name, ns)
        return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}, {}

    def _write(self, obj: dict[str, Any], code: int) -> tuple[int, Any, dict[str, str]]:
        errors = schema_errors(obj)
        if errors:
            return 422, status(422, "Invalid", f"{obj['kind']} {obj['metadata'].get('name')!r} is invalid: "
                                               + "; ".join(errors[:3])), {}
        return code, self.put(obj), {}

    def _handle(self, method: str, path: str, ctype: str, body: Any, query: str = "") -> tuple[int, Any, dict[str, str]]:
        self.requests.append(Request(method, path, ctype, body, query))
        for f in self.faults:
            if f[0] == method and f[1].search(path) and f[3] > 0:
                f[3] -= 1
                reason = {404: "NotFound", 403: "Forbidden", 409: "Conflict", 429: "TooManyRequests"}.get(f[2], "Error")
                return f[2], status(f[2], reason, f"injected {reason} for {path}"), f[4]
        evict = EVICTION.fullmatch(path)
        if evict and method == "POST":
            return self._evict(evict.group(1), evict.group(2), query)
        sub = None
        if path.endswith("/status"):
            path, sub = path[: -len("/status")], "status"
        m = re.fullmatch(r"(/api/v1|/apis/[^/]+/[^/]+)(?:/namespaces/([^/]+))?/([^/]+)(?:/([^/]+))?", path)
        if not m:
            return 404, status(404, "NotFound", f"no route {path}"), {}
        prefix, ns, plural, name = m.groups()
        kind = PLURAL.get(plural)
        if kind is None or KINDS[kind][0] != prefix:
            return 404, status(404, "NotFound", f"the server could not find the requested resource ({path})"), {}
        if name is None and method == "GET":
            items = [copy.deepcopy(o) for p, o in sorted(self.objects.items())
                     if o["kind"] == kind and (ns is None or o["metadata"].get("namespace") == ns)]
            if kind in BUILTIN:
                for o in items:  # the API server omits kind/apiVersion on list items of built-in kinds
                    o.pop("kind", None)
                    o.pop("apiVersion", None)
            return 200, {"kind": f"{kind}List", "apiVersion": KINDS[kind][3],
                         "metadata": {"resourceVersion": str(self.rv)}, "items": items}, {}
        if name is None and method == "POST":
            obj = dict(body, kind=kind, apiVersion=KINDS[kind][3])
            obj.setdefault("metadata", {})["namespace"] = ns
            if object_path(obj) in self.objects:
                return 409, status(409, "AlreadyExists", f"{plural} {obj['metadata']['name']} already exists"), {}
            return self._write(obj, 201)
        key = path
        cur = self.objects.get(key)
        if cur is None:
            return 404, status(404, "NotFound", f'{plural} "{name}" not found'), {}
        if method == "GET":
            return 200, cur, {}
        if method == "DELETE":
            self.delete(kind, name, ns)
            return 200, status(200, "", f"{plural} {name} deleted") | {"status": "Success"}, {}
        sent_rv = ((body or {}).get("metadata") or {}).get("resourceVersion")
        if sent_rv is not None and sent_rv != cur["metadata"]["resourceVersion"]:
            return 409, status(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": the object has '
                                                "been modified; please apply your changes to the latest version"), {}
        if method == "PUT":
            new = dict(body, kind=kind, apiVersion=KINDS[kind][3])
            return self._write(new, 200)
        if method == "PATCH":
            if ctype != "application/merge-patch+json":
                return 415, status(415, "UnsupportedMediaType", f"this fake takes merge patches, got {ctype}"), {}
            body = dict(body)
            body.get("metadata", {}).pop("resourceVersion", None) if isinstance(body.get("metadata"), dict) else None
            if sub == "status":
                new = dict(cur, status=merge(cur.get("status"), body.get("status") or {}))
            else:
                new = merge(cur, {k: v for k, v in body.items() if k != "status"})
            return self._write(new, 200)
        return 405, status(405, "MethodNotAllowed", method), {}

    def _handler(self):
        fake = self

        class H(BaseHTTPRequestHandler):
            def _do(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                path, _, query = self.path.partition("?")
                if method == "GET" and "watch=true" in query.lower():
                    return fake._watch(self, path, query)
                with fake.lock:
                    code, out, headers = fake._handle(method, path, self.headers.get("Content-Type", ""), body, query)
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                self._do("GET")

            def do_PATCH(self):  # noqa: N802
                self._do("PATCH")

            def do_PUT(self):  # noqa: N802
                self._do("PUT")

            def do_POST(self):  # noqa: N802
                self._do("POST")

            def do_DELETE(self):  # noqa: N802
                self._do("DELETE")

            def log_message(self, *a):
                pass

        return H


def _selects(pdb: dict[str, Any], labels: dict[str, str]) -> bool:
    sel = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return bool(sel) and all(labels.get(k) == v for k, v in sel.items())


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}
