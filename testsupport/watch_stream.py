"""`?watch=true` for the local API fake (`kube_fake.py`): an event log with resourceVersions, streamed as the API
server does (HTTP/1.1 chunked, one JSON event per line, closed after `timeoutSeconds`).

Faults a real cluster produces, on demand: `compact()` makes every watch from an older
resourceVersion answer with an ERROR event of code 410 (Expired) as etcd compaction does;
`drop()` cuts every open watch without the final chunk, and `drop_next(n)` cuts the next `n`
watches as soon as they open (a load balancer or API server restart), so the client sees an error,
not a clean end; `refuse_next(n)` answers the next `n` watches 503 before opening them (an
overloaded API server), and `recover()` forgets the drops and refusals still pending.
"""
from __future__ import annotations

import copy
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable


@dataclass
class WatchLog:
    rv: int = 100
    events: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    compacted: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)
    _generation: int = 0
    _drop_next: int = 0
    _refuse_next: int = 0

    def record(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Stamp `obj` with the next resourceVersion and log the event; returns the stamped copy."""
        with self.cond:
            self.rv += 1
            obj = copy.deepcopy(obj)
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            self.events.append((self.rv, kind, obj))
            self.cond.notify_all()
            return obj

    def compact(self) -> None:
        with self.cond:
            self.compacted = self.rv

    def drop(self) -> None:
        with self.cond:
            self._generation += 1
            self.cond.notify_all()

    def drop_next(self, n: int = 1) -> None:
        with self.cond:
            self._drop_next += n

    def refuse_next(self, n: int = 1) -> None:
        with self.cond:
            self._refuse_next += n

    def recover(self) -> None:
        with self.cond:
            self._drop_next = self._refuse_next = 0

    def serve(self, handler: BaseHTTPRequestHandler, since: str, timeout: float,
              match: Callable[[dict[str, Any]], bool]) -> None:
        """Answer one watch request on `handler` with the matching events after `since`."""
        with self.cond:
            refuse = self._refuse_next > 0
            self._refuse_next -= refuse
            # the stream's generation before its headers go out: a client that saw it open and then
            # asked for a drop() must see it cut (read after the headers, a drop in between was missed)
            generation = self._generation
        if refuse:
            return _refuse(handler)
        handler.protocol_version = "HTTP/1.1"
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        handler.close_connection = True
        sent = int(since or 0)
        with self.cond:
            if self._drop_next > 0:
                self._drop_next -= 1
                return  # cut: no terminating chunk
            if sent < self.compacted:
                gone = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410, "reason": "Expired",
                        "message": f"too old resource version: {sent} ({self.compacted})"}
                return self._finish(handler, [{"type": "ERROR", "object": gone}])
        deadline = time.monotonic() + timeout
        while True:
            with self.cond:
                if self._generation != generation:
                    return  # cut
                batch = [(rv, kind, obj) for rv, kind, obj in self.events if rv > sent and match(obj)]
                if not batch:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return self._finish(handler, [])
                    self.cond.wait(min(left, 0.5))
                    if self._generation != generation:
                        return  # cut
                    continue
            sent = batch[-1][0]
            _write_chunk(handler, [{"type": kind, "object": obj} for _, kind, obj in batch])

    @staticmethod
    def _finish(handler: BaseHTTPRequestHandler, events: list[dict[str, Any]]) -> None:
        if events:
            _write_chunk(handler, events)
        handler.wfile.write(b"0\r\n\r\n")


def _refuse(handler: BaseHTTPRequestHandler) -> None:
    data = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 503,
                       "reason": "ServiceUnavailable", "message": "injected: the watch is refused"}).encode()
    handler.send_response(503)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _write_chunk(handler: BaseHTTPRequestHandler, events: list[dict[str, Any]]) -> None:
    data = "".join(json.dumps(e) + "\n" for e in events).encode()
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    handler.wfile.flush()
