"""The processes' small HTTP endpoints — serve's /metrics and probes (`autoscaler/metrics.py`), the
node agent's (`node_enforcer/metrics.py`) and serve's live page (`autoscaler/ui/server.py`): a
threading server on one address (IPv6 when the host holds a colon; port 0 picks a free one, see
`.port`) served from a daemon thread, and the one way their handlers write a reply. Standard library only."""
from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Mapping, TypeVar

TEXT = "text/plain; charset=utf-8"
E = TypeVar("E", bound="Endpoint")


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class Endpoint:
    """`handler` served on host:port from a daemon thread named `name` once `start` is called; the
    thread polls for `stop` every `poll` seconds."""

    def __init__(self, host: str, port: int, handler: type[BaseHTTPRequestHandler], name: str, poll: float = 0.5):
        self.httpd = (_Server6 if ":" in host else ThreadingHTTPServer)((host, port), handler)
        self.httpd.daemon_threads = True
        self.host, self.port = host, int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(poll,), name=name, daemon=True)

    def start(self: E) -> E:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def reply(handler: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str = TEXT,
          headers: Mapping[str, str] | None = None) -> None:
    """Status, `headers`, the content type and length, then the body (none for a HEAD)."""
    handler.send_response(code)
    for k, v in {**(headers or {}), "Content-Type": ctype, "Content-Length": str(len(body))}.items():
        handler.send_header(k, v)
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)
