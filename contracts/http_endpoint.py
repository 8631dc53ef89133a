"""The processes' small HTTP endpoints — serve's /metrics and probes (`autoscaler/metrics.py`), the
node agent's (`node_enforcer/metrics.py`) and serve's live page (`autoscaler/ui/server.py`): a
threading server on one address (IPv6 when the host holds a colon; port 0 picks a free one, see
`.port`) served from a daemon thread, the one way their handlers write a reply, and the route table
behind the plain-text ones (/metrics and probes). Standard library only."""
from __future__ import annotations

import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, TypeVar

TEXT = "text/plain; charset=utf-8"
E = TypeVar("E", bound="Endpoint")
# what a GET of one path answers, computed per request: (status, body, content type)
Route = Callable[[], "tuple[int, bytes, str]"]


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


def probe(check: Callable[[], bool], ok: bytes, failing: bytes) -> Route:
    """A probe's route: 200 and `ok` while `check()` holds, else 503 and `failing`."""
    return lambda: (200, ok, TEXT) if check() else (503, failing, TEXT)


def route_handler(routes: Mapping[str, Route], log: logging.Logger) -> type[BaseHTTPRequestHandler]:
    """A handler answering GET of each path in `routes` (the query string ignored; 404 otherwise),
    its access log at debug level on `log`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            route = routes.get(self.path.split("?")[0])
            code, body, ctype = route() if route is not None else (404, b"not found\n", TEXT)
            reply(self, code, body, ctype)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("http: " + fmt, *args)

    return Handler
