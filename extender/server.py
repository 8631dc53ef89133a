"""The extender's HTTP server: the standard library's ThreadingHTTPServer, one thread per connection.

    POST <prefix>/filter       ExtenderArgs -> ExtenderFilterResult
    POST <prefix>/prioritize   ExtenderArgs -> HostPriorityList
    GET  /explain[?pod=NS/NAME]  the reasons of the last calls for a pod (or the pods remembered)
    GET  /metrics              Prometheus: calls, latency, what became of the nodes (metrics.py)
    GET  /healthz              200 once Nodes are listed, 503 before (the readiness probe)

The verb is the last path segment, so any `urlPrefix` path works. A request that is not an
ExtenderArgs gets 400 with the reason in `Error` (never a traceback); an unexpected failure gets
500 with its one-line message in `Error`, and the traceback goes to the log. A client that hangs up
is a DEBUG line, not a traceback.

Bounded by `limits.Limits`: a body over `max_body_bytes` is 413 (not read), more than `max_nodes`
candidates 400; a read waits `client_timeout` at most and a whole request must arrive within twice
that (idle keep-alive wait included), else the connection is cut; at most `max_connections` are
open (past it: 503 at once, from the accepting thread) and `workers` parse and answer at once, with
at most `inflight_bytes` of bodies held (past either: 503, "busy"). Metrics are recorded before the
answer is sent, so a client that has its answer sees it counted.
"""
from __future__ import annotations

import json
import logging
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from extender.limits import ByteBudget, Deadlines, Limits
from extender.payload import BadRequest, error_filter_result, parse_args
from extender.service import Extender

log = logging.getLogger(__name__)


class ExtenderServer(ThreadingHTTPServer):
    """`ExtenderServer((host, port), extender, ready=lambda: True)`; `.serve_forever()` or `.start()`."""

    daemon_threads = True  # a hung scheduler connection never blocks shutdown
    request_queue_size = 128  # connections the kernel holds before accept: a flood waits there, not in threads

    def __init__(self, address: tuple[str, int], extender: Extender, ready: Callable[[], bool] = lambda: True,
                 limits: Limits | None = None):
        self.extender = extender
        self.ready = ready
        self.limits = limits or Limits()
        self.slots = threading.BoundedSemaphore(self.limits.max_connections)
        self.workers = threading.BoundedSemaphore(self.limits.workers)
        self.bodies = ByteBudget(self.limits.inflight_bytes)
        self.deadlines = Deadlines()
        self.turned_away = 0  # connections answered 503 at accept (over max_connections)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.turned_away += 1
            _turn_away(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.deadlines.disarm(request)
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):  # BrokenPipe, ConnectionReset: the client left
            log.debug("client %s went away: %s: %s", client_address, type(exc).__name__, exc)
        else:
            log.error("serving %s failed", client_address, exc_info=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> "ExtenderServer":
        threading.Thread(target=self.serve_forever, name="extender-http", daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.deadlines.stop()


def _turn_away(request: socket.socket) -> None:
    """503 on a connection past `max_connections`, written from the accepting thread (a few bytes
    into an empty socket buffer: it does not wait on the client)."""
    body = b'{"Error":"busy: too many open connections to the extender"}'
    try:
        request.settimeout(0.5)
        request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    except OSError:
        pass  # it left already


class _Handler(BaseHTTPRequestHandler):
    server: ExtenderServer
    protocol_version = "HTTP/1.1"  # keep-alive: the scheduler reuses its connection for every call
    # headers and body go out in two writes: with Nagle on, the body waits for the peer's delayed ACK
    # of the headers (~40 ms on Linux), which alone was most of a call's latency
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.limits.client_timeout)  # every read and write on the socket

    def handle_one_request(self) -> None:
        # the wait for the next request and its arrival: a client trickling bytes is cut at the deadline
        self.server.deadlines.arm(self.connection, 2 * self.server.limits.client_timeout)
        super().handle_one_request()

    def _send(self, code: int, payload: Any, content_type: str = "application/json") -> None:
        body = payload if isinstance(payload, bytes) else \
            json.dumps(payload, separators=(",", ":"), check_circular=False).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _length(self) -> tuple[int, str]:
        """The body's declared length, or (-1, why) when the request must be refused unread."""
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            return -1, "Content-Length is missing or not a number"
        if length < 0:
            return -1, f"Content-Length {length} is negative"
        return length, ""

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        verb = urllib.parse.urlsplit(self.path).path.rstrip("/").rsplit("/", 1)[-1]
        if verb not in ("filter", "prioritize"):
            self.close_connection = True  # its body is not read
            self._send(404, {"Error": f"unknown verb {verb!r}: POST .../filter or .../prioritize"})
            return
        started = time.perf_counter()
        code, answer = self._answer(verb, error_filter_result if verb == "filter" else (lambda m: {"Error": m}))
        self.server.extender.metrics.call(verb, code, time.perf_counter() - started)
        self._send(code, answer)

    def _answer(self, verb: str, fail: Callable[[str], Any]) -> tuple[int, Any]:
        length, why = self._length()
        limit = self.server.limits.max_body_bytes
        if length < 0 or length > limit:
            self.close_connection = True  # the body stays unread: this connection cannot carry another request
            return (400, fail(why)) if length < 0 else \
                (413, fail(f"body of {length} bytes is over the {limit} byte limit (tidewise extender --max-body-mib)"))
        if not self.server.bodies.take(length):
            self.close_connection = True
            return 503, fail("busy: too many request bodies held at once; retry")
        try:
            body = self.rfile.read(length)  # a client that stops sending: TimeoutError, the connection is dropped
            self.server.deadlines.disarm(self.connection)
            if len(body) < length:
                self.close_connection = True
                return 400, fail(f"body ended after {len(body)} of {length} bytes")
            if not self.server.workers.acquire(timeout=self.server.limits.client_timeout):
                return 503, fail("busy: every worker is answering; retry")
            try:
                return self._decide(verb, body, fail)
            finally:
                self.server.workers.release()
        finally:
            self.server.bodies.give(length)

    def _decide(self, verb: str, body: bytes, fail: Callable[[str], Any]) -> tuple[int, Any]:
        try:
            args = parse_args(body, self.server.limits.max_nodes)
            ext = self.server.extender
            return 200, ext.filter(args) if verb == "filter" else ext.prioritize(args)
        except ValueError as exc:  # BadRequest, or a pod whose requests do not parse
            return 400, fail(str(exc))
        except Exception as exc:  # noqa: BLE001 - the scheduler gets one line; the log the traceback
            log.exception("%s failed", verb)
            return 500, fail(f"{type(exc).__name__}: {exc}")

    def do_GET(self) -> None:  # noqa: N802
        self.server.deadlines.disarm(self.connection)
        parts = urllib.parse.urlsplit(self.path)
        if parts.path == "/healthz":
            ok = self.server.ready()
            self._send(200 if ok else 503, {"ready": ok})
        elif parts.path == "/metrics":
            self._send(200, self.server.extender.metrics.exposition(), CONTENT_TYPE_LATEST)
        elif parts.path == "/explain":
            pods = urllib.parse.parse_qs(parts.query).get("pod")
            pod = pods[0] if pods else None
            try:
                self._send(200, self.server.extender.explain(pod))
            except KeyError as exc:
                self._send(404, {"Error": str(exc.args[0])})
        else:
            self._send(404, {"Error": f"no such path {parts.path}: GET /explain, /metrics or /healthz"})

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server signature
        log.debug("%s %s", self.address_string(), format % args)
