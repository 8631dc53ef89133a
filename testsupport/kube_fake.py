"""The one local HTTP fake of the Kubernetes API server (DESIGN.md: no kube-apiserver can be installed
here), for the real `kubernetes` client of the serving loop, the scheduler extender and the node agent.

It keeps objects by path (kinds and paths in `kube_objects.KINDS`), bumps `resourceVersion` on every
write, answers a merge patch that carries a stale resourceVersion with 409 (as the API server does),
applies status-subresource patches to `status` only (and drops `status` from a create of a custom kind
that has that subresource), filters lists and watches by `fieldSelector` (`spec.nodeName`,
`metadata.name`, `metadata.namespace`), serves the kubelet's `GET /pods` (every pod) for the node
agent, and records every request (`kube_objects.Request`: method, path, query, body, Authorization).
`?watch=true` on a list path streams that kind's events after the given resourceVersion
(`watch_stream`: `watch.compact()` for 410 Gone, `watch.drop()` / `watch.drop_next()` for a cut
connection). `fail(method, pattern, status, times)` makes the next matching requests fail (404, 403,
409, 429 with Retry-After) before the real handling.

Writes of custom kinds (VPA, Katalyst CRDs) are validated against the vendored CRD schemas and
refused with 422 Invalid when they break them, as the API server does. `POST .../pods/{name}/eviction`
is the Eviction API: 409 when `deleteOptions.preconditions.uid` is not the pod's; 429 when a
PodDisruptionBudget whose `matchLabels` select the pod would be violated (healthy = matching pods not
Failed/Succeeded; `minAvailable` or `maxUnavailable`, as a count or a percentage, of the pods matching
plus those evicted and not yet replaced), else it deletes the pod (`?dryRun=All` deletes nothing).
"""
from __future__ import annotations

import copy
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler
from typing import Any, Sequence

from contracts.http_endpoint import Endpoint
from testsupport.k8s_schemas import has_status_subresource, schema_errors
from testsupport.kube_objects import BUILTIN, KINDS, PLURAL, Request, field_match, merge, object_path, selects, status
from testsupport.watch_stream import WatchLog

EVICTION = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction")
ROUTE = re.compile(r"(/api/v1|/apis/[^/]+/[^/]+)(?:/namespaces/([^/]+))?/([^/]+)(?:/([^/]+))?")
Answer = tuple[int, Any, dict[str, str]]


class FakeApiServer(Endpoint):
    def __init__(self, objects: Sequence[dict[str, Any]] = ()) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.watch = WatchLog()
        self.lock = threading.Lock()
        self.requests: list[Request] = []
        self.faults: list[list[Any]] = []  # [method, regex, status, remaining, headers, message]
        self.disrupted: dict[str, int] = {}  # PDB path -> pods evicted and not yet replaced
        for o in objects:
            self.put(o)
        super().__init__("127.0.0.1", 0, self._handler(), "kube-fake")

    @classmethod
    def of_node(cls, pods: Sequence[dict[str, Any]], nodes: Sequence[dict[str, Any]] = ()) -> "FakeApiServer":
        """A fake holding these pod and node objects (as `node_enforcer.podspec` makes them: no `kind`)."""
        return cls([dict(p, kind="Pod") for p in pods] + [dict(n, kind="Node") for n in nodes])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "FakeApiServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def api_client(self) -> Any:
        """A real `kubernetes` client on this fake, without retries."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.retries = 0
        return client.ApiClient(cfg)

    @property
    def rv(self) -> int:
        return self.watch.rv

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Add or replace `obj` (by kind, namespace and name) and tell the watches."""
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

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self.objects[object_path({"kind": kind, "metadata": {"name": name, "namespace": namespace}})]

    def objects_of(self, kind: str) -> dict[str, dict[str, Any]]:
        """The stored objects of one kind by name, e.g. `objects_of("CustomNodeResource")`."""
        return {o["metadata"]["name"]: o for o in self.objects.values() if o["kind"] == kind}

    def lists(self, plural: str) -> list[Request]:
        """The list (not watch) requests of one kind, e.g. `lists("pods")`."""
        return [r for r in self.requests if r.method == "GET" and r.path.endswith(f"/{plural}") and not r.is_watch]

    def fail(self, method: str, pattern: str, status: int, times: int = 1, headers: dict[str, str] | None = None,
             message: str | None = None) -> None:
        self.faults.append([method, re.compile(pattern), status, times, headers or {}, message])

    def writes(self, method: str | None = None) -> list[Request]:
        return [r for r in self.requests if r.method in ("PATCH", "PUT", "POST") and (method is None or r.method == method)]

    def evictions(self) -> list[Request]:
        """Every eviction request (allowed or refused), oldest first."""
        return [r for r in self.requests if r.method == "POST" and EVICTION.fullmatch(r.path)]

    # the Eviction API ---------------------------------------------------------------------------
    def _budgets(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        """The PodDisruptionBudgets whose `matchLabels` select `pod`."""
        ns, labels = pod["metadata"].get("namespace"), pod["metadata"].get("labels") or {}
        return [o for o in self.objects.values() if o["kind"] == "PodDisruptionBudget"
                and o["metadata"].get("namespace") == ns and selects(o, labels)]

    def _pdb_allows(self, pod: dict[str, Any]) -> str | None:
        """None when evicting `pod` keeps every budget that selects it, else the budget's name. Expected
        pods = those matching now + those evicted and not yet replaced (the controller's count)."""
        ns = pod["metadata"].get("namespace")
        for pdb in self._budgets(pod):
            matched = [o for o in self.objects.values() if o["kind"] == "Pod" and o["metadata"].get("namespace") == ns
                       and selects(pdb, o["metadata"].get("labels") or {})]
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

    def _evict(self, ns: str, name: str, query: str, body: Any) -> Answer:
        path = object_path({"kind": "Pod", "metadata": {"name": name, "namespace": ns}})
        pod = self.objects.get(path)
        if pod is None:
            return 404, status(404, "NotFound", f'pods "{name}" not found'), {}
        want = (((body or {}).get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
        if want and want != pod["metadata"].get("uid"):
            return 409, status(409, "Conflict", f"Precondition failed: UID in precondition: {want}, "
                                                f"UID in object meta: {pod['metadata'].get('uid')}"), {}
        blocking = self._pdb_allows(pod)
        if blocking is not None:
            return 429, status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption "
                                                       f"budget ({blocking})."), {}
        if "dryrun=all" not in query.lower():
            for pdb in self._budgets(pod):
                self.disrupted[object_path(pdb)] = self.disrupted.get(object_path(pdb), 0) + 1
            self.delete("Pod", name, ns)
        return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}, {}

    # HTTP ---------------------------------------------------------------------------------------
    def _watch(self, handler: BaseHTTPRequestHandler, path: str, query: str) -> None:
        with self.lock:
            self.requests.append(Request("GET", path, "", None, query, handler.headers.get("Authorization")))
        q = urllib.parse.parse_qs(query)
        m = ROUTE.fullmatch(path)
        kind = PLURAL.get(m.group(3)) if m else None
        ns = m.group(2) if m else None
        fields = (q.get("fieldSelector") or [""])[0]
        self.watch.serve(handler, (q.get("resourceVersion") or ["0"])[0], float((q.get("timeoutSeconds") or ["30"])[0]),
                         lambda o: o.get("kind") == kind and (ns is None or o["metadata"].get("namespace") == ns)
                         and field_match(fields, o))

    def _write(self, obj: dict[str, Any], code: int) -> Answer:
        errors = schema_errors(obj)
        if not (obj.get("metadata") or {}).get("name"):
            errors = [*errors, "metadata.name: Required value"]
        if errors:
            return 422, status(422, "Invalid", f"{obj['kind']} {obj.get('metadata', {}).get('name')!r} is invalid: "
                                               + "; ".join(errors[:3])), {}
        return code, self.put(obj), {}

    def _injected(self, method: str, path: str) -> Answer | None:
        for f in self.faults:
            if f[0] == method and f[1].search(path) and f[3] > 0:
                f[3] -= 1
                reason = {404: "NotFound", 403: "Forbidden", 409: "Conflict", 429: "TooManyRequests"}.get(f[2], "Error")
                return f[2], status(f[2], reason, f[5] or f"injected {reason} for {path}"), f[4]
        return None

    def _list(self, kind: str, ns: str | None, query: str) -> Answer:
        fields = (urllib.parse.parse_qs(query).get("fieldSelector") or [""])[0]
        items = [copy.deepcopy(o) for p, o in sorted(self.objects.items())
                 if o["kind"] == kind and (ns is None or o["metadata"].get("namespace") == ns) and field_match(fields, o)]
        if kind in BUILTIN:
            for o in items:  # the API server omits kind/apiVersion on list items of built-in kinds
                o.pop("kind", None)
                o.pop("apiVersion", None)
        return 200, {"kind": f"{kind}List", "apiVersion": KINDS[kind][3],
                     "metadata": {"resourceVersion": str(self.rv)}, "items": items}, {}

    def _create(self, kind: str, ns: str | None, plural: str, body: Any) -> Answer:
        obj = dict(body, kind=kind, apiVersion=KINDS[kind][3])
        obj.setdefault("metadata", {})["namespace"] = ns
        if has_status_subresource(kind):
            obj.pop("status", None)  # a create through the main resource ignores the status subresource
        if obj["metadata"].get("name") and object_path(obj) in self.objects:
            return 409, status(409, "AlreadyExists", f"{plural} {obj['metadata']['name']} already exists"), {}
        return self._write(obj, 201)

    def _update(self, method: str, cur: dict[str, Any], sub: str | None, ctype: str, body: Any) -> Answer:
        kind, name = cur["kind"], cur["metadata"]["name"]
        plural = KINDS[kind][1]
        sent_rv = ((body or {}).get("metadata") or {}).get("resourceVersion")
        if sent_rv is not None and sent_rv != cur["metadata"]["resourceVersion"]:
            return 409, status(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": the object has '
                                                "been modified; please apply your changes to the latest version"), {}
        if method == "PUT":
            return self._write(dict(body, kind=kind, apiVersion=KINDS[kind][3]), 200)
        if method != "PATCH":
            return 405, status(405, "MethodNotAllowed", method), {}
        if ctype != "application/merge-patch+json":
            return 415, status(415, "UnsupportedMediaType", f"this fake takes merge patches, got {ctype}"), {}
        body = dict(body)
        if isinstance(body.get("metadata"), dict):
            body["metadata"] = {k: v for k, v in body["metadata"].items() if k != "resourceVersion"}
        if sub == "status":
            new = dict(cur, status=merge(cur.get("status"), body.get("status") or {}))
        else:
            new = merge(cur, {k: v for k, v in body.items() if k != "status"})
        return self._write(new, 200)

    def _handle(self, req: Request) -> Answer:
        self.requests.append(req)
        method, path = req.method, req.path
        injected = self._injected(method, path)
        if injected is not None:
            return injected
        if path == "/pods" and method == "GET":  # the kubelet's own list of its pods
            code, out, headers = self._list("Pod", None, "")
            return code, dict(out, metadata={}), headers
        evict = EVICTION.fullmatch(path)
        if evict and method == "POST":
            return self._evict(evict.group(1), evict.group(2), req.query, req.body)
        sub = None
        if path.endswith("/status"):
            path, sub = path[: -len("/status")], "status"
        m = ROUTE.fullmatch(path)
        if not m:
            return 404, status(404, "NotFound", f"no route {path}"), {}
        prefix, ns, plural, name = m.groups()
        kind = PLURAL.get(plural)
        if kind is None or KINDS[kind][0] != prefix:
            return 404, status(404, "NotFound", f"the server could not find the requested resource ({path})"), {}
        if name is None and method == "GET":
            return self._list(kind, ns, req.query)
        if name is None and method == "POST":
            return self._create(kind, ns, plural, req.body)
        cur = self.objects.get(path)
        if cur is None:
            return 404, status(404, "NotFound", f'{plural} "{name}" not found'), {}
        if method == "GET":
            return 200, cur, {}
        if method == "DELETE":
            self.delete(kind, name, ns)
            return 200, status(200, "", f"{plural} {name} deleted") | {"status": "Success"}, {}
        return self._update(method, cur, sub, req.content_type, req.body)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class H(BaseHTTPRequestHandler):
            def _do(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                path, _, query = self.path.partition("?")
                if method == "GET" and "watch=true" in query.lower():
                    return fake._watch(self, path, query)
                req = Request(method, path, self.headers.get("Content-Type", ""), body, query,
                              self.headers.get("Authorization"))
                with fake.lock:
                    code, out, headers = fake._handle(req)
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._do("GET")

            def do_PATCH(self) -> None:  # noqa: N802
                self._do("PATCH")

            def do_PUT(self) -> None:  # noqa: N802
                self._do("PUT")

            def do_POST(self) -> None:  # noqa: N802
                self._do("POST")

            def do_DELETE(self) -> None:  # noqa: N802
                self._do("DELETE")

            def log_message(self, *a: Any) -> None:
                pass

        return H
