"""A small local HTTP fake of the few endpoints the node agent uses, on 127.0.0.1 and a free port:

- kubelet: `GET /pods` (a PodList);
- API server: `GET /api/v1/pods?fieldSelector=spec.nodeName=X`,
  `POST /api/v1/namespaces/{ns}/pods/{name}/eviction` (429 for pods listed in `pdb_blocked`,
  404 for unknown pods, 403 when `forbidden`).

Every request is recorded (method, path, query, JSON body) so tests assert on what was sent.
"""
from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeApi:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.requests: list[dict[str, Any]] = []
        self.pdb_blocked: set[str] = set()
        self.forbidden = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
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
                fake.requests.append({"method": self.command, "path": url.path, "query": query, "body": body,
                                      "auth": self.headers.get("Authorization")})
                return url.path, query

            def do_GET(self) -> None:
                path, query = self._record()
                if path == "/pods":
                    self._send(200, {"kind": "PodList", "apiVersion": "v1", "items": fake.pods})
                elif path == "/api/v1/pods":
                    sel = (query.get("fieldSelector") or [""])[0]
                    node = sel.split("=", 1)[1] if sel.startswith("spec.nodeName=") else None
                    items = [p for p in fake.pods if node is None or p["spec"].get("nodeName") == node]
                    self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                                     "items": items})
                else:
                    self._send(404, {"kind": "Status", "code": 404, "message": f"{path} not found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                path, _ = self._record(body)
                parts = path.strip("/").split("/")
                if len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] and parts[6] == "eviction":
                    ns, name = parts[3], parts[5]
                    if fake.forbidden:
                        return self._send(403, {"kind": "Status", "code": 403, "message": "forbidden by RBAC"})
                    if not any(p["metadata"]["namespace"] == ns and p["metadata"]["name"] == name for p in fake.pods):
                        return self._send(404, {"kind": "Status", "code": 404, "message": f"pods {name!r} not found"})
                    if f"{ns}/{name}" in fake.pdb_blocked:
                        return self._send(429, {"kind": "Status", "code": 429,
                                                 "message": "Cannot evict pod as it would violate the pod's disruption budget."})
                    return self._send(201, {"kind": "Status", "status": "Success", "code": 201})
                self._send(404, {"kind": "Status", "code": 404, "message": "not found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

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
