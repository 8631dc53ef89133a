"""The extender's HTTP server: the standard library's ThreadingHTTPServer, one thread per call.

    POST <prefix>/filter       ExtenderArgs -> ExtenderFilterResult
    POST <prefix>/prioritize   ExtenderArgs -> HostPriorityList
    GET  /explain[?pod=NS/NAME]  the reasons of the last calls for a pod (or the pods remembered)
    GET  /metrics              Prometheus: calls, latency, what became of the nodes (metrics.py)
    GET  /healthz              200 once Nodes are listed, 503 before (the readiness probe)

The verb is the last path segment, so any `urlPrefix` path works. A request that is not an
ExtenderArgs gets 400 with the reason in `Error` (never a traceback); an unexpected failure gets
500 with its one-line message in `Error`, and the traceback goes to the log.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from autoscaler.extender.payload import MAX_BODY, BadRequest, error_filter_result, parse_args
from autoscaler.extender.service import Extender

log = logging.getLogger(__name__)


class ExtenderServer(ThreadingHTTPServer):
    """`ExtenderServer((host, port), extender, ready=lambda: True)`; `.serve_forever()` or `.start()`."""

    daemon_threads = True  # a hung scheduler connection never blocks shutdown

    def __init__(self, address: tuple[str, int], extender: Extender, ready: Callable[[], bool] = lambda: True):
        self.extender = extender
        self.ready = ready
        super().__init__(address, _Handler)

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


class _Handler(BaseHTTPRequestHandler):
    server: ExtenderServer
    protocol_version = "HTTP/1.1"  # keep-alive: the scheduler reuses its connection for every call
    # headers and body go out in two writes: with Nagle on, the body waits for the peer's delayed ACK
    # of the headers (~40 ms on Linux), which alone was most of a call's latency
    disable_nagle_algorithm = True

    def _send(self, code: int, payload: Any, content_type: str = "application/json") -> None:
        body = payload if isinstance(payload, bytes) else \
            json.dumps(payload, separators=(",", ":"), check_circular=False).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            raise BadRequest("Content-Length is missing or not a number") from None
        if length < 0 or length > MAX_BODY:
            raise BadRequest(f"body of {length} bytes is over the {MAX_BODY // 2**20} MiB limit")
        return self.rfile.read(length)

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        verb = urllib.parse.urlsplit(self.path).path.rstrip("/").rsplit("/", 1)[-1]
        if verb not in ("filter", "prioritize"):
            self._send(404, {"Error": f"unknown verb {verb!r}: POST .../filter or .../prioritize"})
            return
        started = time.perf_counter()
        code, answer = self._answer(verb)
        self._send(code, answer)
        self.server.extender.metrics.call(verb, code, time.perf_counter() - started)

    def _answer(self, verb: str) -> tuple[int, Any]:
        fail = error_filter_result if verb == "filter" else (lambda m: {"Error": m})
        try:
            args = parse_args(self._body())
            ext = self.server.extender
            return 200, ext.filter(args) if verb == "filter" else ext.prioritize(args)
        except ValueError as exc:  # BadRequest, or a pod whose requests do not parse
            return 400, fail(str(exc))
        except Exception as exc:  # noqa: BLE001 - the scheduler gets one line; the log the traceback
            log.exception("%s failed", verb)
            return 500, fail(f"{type(exc).__name__}: {exc}")

    def do_GET(self) -> None:  # noqa: N802
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
