"""The processes' small HTTP endpoints — serve's /metrics and probes (`autoscaler/metrics.py`), the
node agent's (`node_enforcer/metrics.py`) and serve's live page (`autoscaler/ui/server.py`): a
threading server on one address (IPv6 when the host holds a colon; port 0 picks a free one, see
`.port`) served from a daemon thread, the one way their handlers write a reply, the route table
behind the plain-text ones (/metrics and probes; HEAD answered as GET without the body) and the one
parser of their `HOST:PORT` flags. Standard library only."""
from __future__ import annotations

import ipaddress
import logging
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, TypeVar

TEXT = "text/plain; charset=utf-8"
E = TypeVar("E", bound="Endpoint")
# one label of a host name (RFC 1123): letters, digits and inner hyphens, 63 characters at most
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
# what a GET of one path answers, computed per request: (status, body, content type)
Route = Callable[[], "tuple[int, bytes, str]"]


def check_host(host: str) -> str:
    """`host` when it is an IPv4 or IPv6 literal or a host name; ValueError otherwise. A name whose
    last label is all digits (`999.1.1.1`, `10.0.0`) is a mistyped IPv4 address, not a name."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if 0 < len(host) <= 253 and all(_LABEL.fullmatch(part) for part in labels) and not labels[-1].isdigit():
        return host
    raise ValueError(f"{host!r} is not an IPv4 or IPv6 address or a host name")


def parse_listen_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`127.0.0.1:8080`, `[::1]:8080`, `localhost:8080`, `:8080` for every IPv4 address)
    -> (host, port). ValueError names what is wrong; port 0 means "none" or "any free one" (the caller says)."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT with a port 0-65535 (for example 127.0.0.1:8080 or 0.0.0.0:8080)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # IPv6 in brackets
        if ":" not in host:
            raise ValueError(f"{text!r}: only an IPv6 address goes in brackets, for example [::1]:8080")
    elif ":" in host:
        raise ValueError(f"{text!r}: write an IPv6 address in brackets, for example [::1]:8080")
    if not host:
        return "0.0.0.0", int(port_text)
    try:
        return check_host(host), int(port_text)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc} (for example 127.0.0.1:8080, [::1]:8080 or localhost:8080)") from None


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
    HEAD as GET without the body (`reply`), its access log at debug level on `log`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            route = routes.get(self.path.split("?")[0])
            code, body, ctype = route() if route is not None else (404, b"not found\n", TEXT)
            reply(self, code, body, ctype)

        do_HEAD = do_GET  # noqa: N815 - the same status and headers; `reply` sends no body for a HEAD

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("http: " + fmt, *args)

    return Handler
