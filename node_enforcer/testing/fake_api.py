"""A small local HTTP fake of the few endpoints the node agent uses, on 127.0.0.1 and a free port:

- kubelet: `GET /pods` (a PodList);
- API server: `GET /api/v1/pods?fieldSelector=spec.nodeName=X`, `GET /api/v1/nodes/X` and
  `GET /api/v1/nodes?fieldSelector=metadata.name=X`, each also as `?watch=true` (`watch_stream.py`:
  change objects with `update_pod`/`remove_pod`/`update_node`; `watch.compact()` for 410, `watch.drop()`),
  `POST /api/v1/namespaces/{ns}/pods/{name}/eviction` (429 for pods listed in `pdb_blocked`,
  404 for unknown pods, 403 when `forbidden`, 409 when `deleteOptions.preconditions.uid` is not the pod's);
- Katalyst CustomNodeResources: `GET`/`POST .../customnoderesources[/{name}]` and
  `PATCH .../customnoderesources/{name}/status` (a JSON merge patch). Every object stored is
  validated against the vendored CRD schema (schemas/k8s); an invalid one is refused with 422, as
  the real API server does.

Every request is recorded (method, path, query, JSON body) so tests assert on what was sent.
"""
from __future__ import annotations

import json
import os
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Sequence

from node_enforcer.testing.watch_stream import WatchLog

CNR_PATH = "/apis/node.katalyst.kubewharf.io/v1alpha1/customnoderesources"
CNR_CRD = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "schemas", "k8s",
                       "katalyst-node.katalyst.kubewharf.io_customnoderesources.yaml")


def cnr_schema_errors(obj: Any) -> list[str]:
    """Where `obj` breaks the vendored CustomNodeResource CRD schema ([] when it validates)."""
    import jsonschema
    import yaml

    with open(CNR_CRD, encoding="utf-8") as fh:
        crd = yaml.safe_load(fh)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class Handler(BaseHTTPRequestHandler):
    """The request handler; its server carries the `FakeApi` it serves (`server.fake`)."""

    @property
    def fake(self) -> "FakeApi":
        return self.server.fake  # type: ignore[attr-defined]

    def log_message(self, *a: Any) -> None:
        pass

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self, body: Any = None) -> tuple[str, dict[str, list[str]]]:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        self.fake.requests.append({"method": self.command, "path": url.path, "query": query, "body": body,
                              "auth": self.headers.get("Authorization")})
        return url.path, query

    def do_GET(self) -> None:
        path, query = self._record()
        if path == "/pods":
            self._send(200, {"kind": "PodList", "apiVersion": "v1", "items": self.fake.pods})
        elif path.startswith(CNR_PATH + "/"):
            _cnr_get(self.fake, self, path[len(CNR_PATH) + 1:])
        elif path.startswith(("/api/v1/pods", "/api/v1/nodes")):
            _list_or_watch(self.fake, self, path, query)
        else:
            self._send(404, {"kind": "Status", "code": 404, "message": f"{path} not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        path, _ = self._record(body)
        if path == CNR_PATH:
            return _store_cnr(self.fake, self, body, created=True)
        parts = path.strip("/").split("/")
        if len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] and parts[6] == "eviction":
            ns, name = parts[3], parts[5]
            if self.fake.forbidden:
                return self._send(403, {"kind": "Status", "code": 403, "message": "forbidden by RBAC"})
            pod = next((p for p in self.fake.pods if p["metadata"]["namespace"] == ns and p["metadata"]["name"] == name),
                       None)
            if pod is None:
                return self._send(404, {"kind": "Status", "code": 404, "message": f"pods {name!r} not found"})
            want = (((body or {}).get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
            if want and want != pod["metadata"].get("uid"):
                return self._send(409, {"kind": "Status", "code": 409, "reason": "Conflict",
                                         "message": f"Precondition failed: UID in precondition: {want}, "
                                                    f"UID in object meta: {pod['metadata'].get('uid')}"})
            if f"{ns}/{name}" in self.fake.pdb_blocked:
                return self._send(429, {"kind": "Status", "code": 429,
                                         "message": "Cannot evict pod as it would violate the pod's disruption budget."})
            return self._send(201, {"kind": "Status", "status": "Success", "code": 201})
        self._send(404, {"kind": "Status", "code": 404, "message": "not found"})

    def do_PATCH(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        path, _ = self._record(body)
        _cnr_patch(self.fake, self, path, body)


class FakeApi:
    def __init__(self, pods: list[dict[str, Any]], nodes: Sequence[dict[str, Any]] = ()) -> None:
        self.pods = pods
        self.cnrs: dict[str, dict[str, Any]] = {}  # customnoderesources by name
        self.nodes = [dict(n, kind="Node", apiVersion="v1") for n in nodes]
        self.watch = WatchLog()
        self.requests: list[dict[str, Any]] = []
        self.pdb_blocked: set[str] = set()
        self.forbidden = False
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.fake = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def update_pod(self, pod: dict[str, Any]) -> None:
        """Add or replace a pod (by namespace/name) and tell the watches."""
        pod = self.watch.record(_event(self.pods, pod), dict(pod, kind="Pod", apiVersion="v1"))
        self.pods = [p for p in self.pods if _key(p) != _key(pod)] + [pod]

    def remove_pod(self, namespace: str, name: str) -> None:
        gone = next(p for p in self.pods if _key(p) == (namespace, name))
        self.pods = [p for p in self.pods if p is not gone]
        self.watch.record("DELETED", dict(gone, kind="Pod", apiVersion="v1"))

    def update_node(self, node: dict[str, Any]) -> None:
        node = self.watch.record(_event(self.nodes, node), dict(node, kind="Node", apiVersion="v1"))
        self.nodes = [n for n in self.nodes if _key(n) != _key(node)] + [node]

    def __enter__(self) -> "FakeApi":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def api_client(self) -> Any:
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.retries = 0
        return client.ApiClient(cfg)


def _key(obj: dict[str, Any]) -> tuple[str | None, str]:
    return obj["metadata"].get("namespace"), obj["metadata"]["name"]


def _event(objects: list[dict[str, Any]], obj: dict[str, Any]) -> str:
    return "MODIFIED" if any(_key(o) == _key(obj) for o in objects) else "ADDED"


def _list_or_watch(fake: FakeApi, handler: Any, path: str, query: dict[str, list[str]]) -> None:
    """`GET /api/v1/pods`, `/api/v1/nodes` (field selector, `?watch=true`) and `/api/v1/nodes/X`."""
    plural, _, name = path.removeprefix("/api/v1/").partition("/")
    sel = (query.get("fieldSelector") or [f"metadata.name={name}" if name else ""])[0]
    field_path, _, want = sel.partition("=")

    def match(o: dict[str, Any]) -> bool:
        got = o["spec"].get("nodeName") if field_path == "spec.nodeName" else o["metadata"].get("name")
        return (o.get("kind") or "Pod") == ("Pod" if plural == "pods" else "Node") and (not sel or got == want)

    if (query.get("watch") or [""])[0].lower() == "true":
        since = (query.get("resourceVersion") or ["0"])[0]
        return fake.watch.serve(handler, since, float((query.get("timeoutSeconds") or ["30"])[0]), match)
    items = [o for o in (fake.pods if plural == "pods" else fake.nodes) if match(o)]
    if name:
        return handler._send(200, items[0]) if items else handler._send(404, {"kind": "Status", "code": 404,
                                                                            "message": f"{path} not found"})
    handler._send(200, {"kind": "PodList" if plural == "pods" else "NodeList", "apiVersion": "v1",
                        "metadata": {"resourceVersion": str(fake.watch.rv)}, "items": items})


def _cnr_get(fake: FakeApi, handler: Any, name: str) -> None:
    if name in fake.cnrs:
        return handler._send(200, fake.cnrs[name])
    handler._send(404, {"kind": "Status", "code": 404, "message": f"customnoderesources {name!r} not found"})


def _cnr_patch(fake: FakeApi, handler: Any, path: str, body: Any) -> None:
    """`PATCH .../customnoderesources/{name}/status`: a merge patch of the status, validated."""
    if not (path.startswith(CNR_PATH + "/") and path.endswith("/status")):
        return handler._send(404, {"kind": "Status", "code": 404, "message": "not found"})
    name = path[len(CNR_PATH) + 1:-len("/status")]
    if name not in fake.cnrs:
        return handler._send(404, {"kind": "Status", "code": 404, "message": f"customnoderesources {name!r} not found"})
    _store_cnr(fake, handler, merge_patch(fake.cnrs[name], {"status": (body or {}).get("status")}), created=False)


def _store_cnr(fake: FakeApi, handler: Any, obj: Any, created: bool) -> None:
    """Validate against the CRD (422 when invalid, as the API server does), then store."""
    errors = cnr_schema_errors(obj)
    name = ((obj or {}).get("metadata") or {}).get("name") if isinstance(obj, dict) else None
    if errors or not name:
        return handler._send(422, {"kind": "Status", "code": 422, "reason": "Invalid",
                                   "message": "; ".join(errors) or "metadata.name is required"})
    if created:
        if name in fake.cnrs:
            return handler._send(409, {"kind": "Status", "code": 409, "message": f"{name!r} already exists"})
        obj = {k: v for k, v in obj.items() if k != "status"}  # the status subresource ignores it
    fake.cnrs[name] = obj
    handler._send(201 if created else 200, obj)
