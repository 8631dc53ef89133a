"""The live page's HTTP server (`tidewise serve --ui`): a thread serving the latest completed run,
read-only. Only GET and HEAD (the same answer without its body; anything else 405), unknown paths 404,
no headers or configuration echoed.

  /                      the fleet, per namespace
  /ns/<namespace>        one namespace's workloads
  /w/<ns>/<kind>/<name>  one workload: per container and resource, reasons, forecast plots
  /decisions.json        the same data as JSON, and the run's changes with their reasons

`observe(rep, ctx)` is the serving loop's observer (`ServingLoop.observers`): it swaps in the new
snapshot under a lock; a request reads whichever snapshot is current when it starts."""
from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable
from urllib.parse import unquote, urlsplit

from autoscaler.routines.context import RunContext, RunReport
from contracts.http_endpoint import Endpoint, reply
from autoscaler.ui import pages
from autoscaler.ui.snapshot import Snapshot, build, empty

log = logging.getLogger(__name__)
# the page is data: no script, no outside resource, no framing by another site
HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                                      "frame-ancestors 'none'",
           "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
HTML, JSON = "text/html; charset=utf-8", "application/json"


def _utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class UiServer(Endpoint):
    """Serves the page on host:port (port 0: a free one, see `.port`) from a daemon thread."""

    def __init__(self, host: str, port: int, mode: str, refresh_seconds: int = 15,
                 wall: Callable[[], str] = _utc_now):
        self.mode, self.refresh, self.wall = mode, refresh_seconds, wall
        self._lock = threading.Lock()
        self._snap = empty(mode)
        self._runs = 0
        # polled every 0.1 s for `stop` (the default 0.5 s delays serve's exit on SIGTERM)
        super().__init__(host, port, self._handler(), "tidewise-ui", poll=0.1)

    def observe(self, rep: RunReport, ctx: RunContext) -> None:
        """After each run: the page shows it (a frozen run keeps the last good decisions, flagged)."""
        with self._lock:
            self._runs += 1
            number, previous = self._runs, self._snap
        snap = build(rep, ctx, self.mode, number, self.wall(), previous)
        with self._lock:
            self._snap = snap

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snap

    def page(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) of a GET of `path`."""
        snap = self.snapshot()
        parts = [unquote(p) for p in urlsplit(path).path.split("/")[1:]]
        body: str | None = None
        if parts in ([""], []):
            body = pages.fleet(snap.doc, self.refresh)
        elif parts == ["decisions.json"]:
            return 200, JSON, json.dumps(snap.doc, indent=1, sort_keys=True, default=str).encode()
        elif len(parts) == 2 and parts[0] == "ns":
            body = pages.namespace(snap.doc, parts[1], self.refresh)
        elif len(parts) == 4 and parts[0] == "w":
            body = pages.workload(snap, "/".join(parts[1:]), self.refresh)
        if body is None:
            return 404, HTML, pages.not_found("/".join(parts) or "/").encode()
        return 200, HTML, body.encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            server_version, sys_version = "tidewise-ui", ""

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                try:
                    code, ctype, body = server.page(self.path)
                except Exception:  # noqa: BLE001 - a page bug must not reach the loop or leak a traceback
                    log.exception("ui: %s failed", self.path)
                    code, ctype, body = 500, "text/plain; charset=utf-8", b"internal error (see the serve log)\n"
                self._send(code, ctype, body)

            do_HEAD = do_GET  # noqa: N815 - a GET's status and headers; `reply` sends no body for a HEAD

            def __getattr__(self, name: str) -> Any:
                # every other method (POST, PUT, DELETE, ...): read-only, 405
                if name.startswith("do_"):
                    return self._not_allowed
                raise AttributeError(name)

            def _not_allowed(self) -> None:
                self._send(405, "text/plain; charset=utf-8", b"read-only: only GET and HEAD\n", {"Allow": "GET, HEAD"})

            def _send(self, code: int, ctype: str, body: bytes, extra: dict[str, str] | None = None) -> None:
                reply(self, code, body, ctype, {**HEADERS, **(extra or {})})

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("ui: " + fmt, *args)

        return Handler
