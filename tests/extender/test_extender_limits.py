"""An extender that holds its ground (issue 22, defect 6): every limit of `limits.Limits` tested on a
real server over loopback sockets. No timing assertions: a slow client is shown cut (the socket
reads end), not cut "within N ms"; the memories are measured with tracemalloc against their bound."""
from __future__ import annotations

import json
import logging
import socket
import struct
import time
import tracemalloc
import urllib.error

import pytest

from extender.annotations import AnnotationCache
from extender.limits import Limits
from extender.metrics import ExtenderMetrics
from extender.payload import parse_args
from extender.server import ExtenderServer
from extender.service import Extender
from contracts.reclaim import PLAN_ANNOTATION
from tests.extender.test_extender import NOW, fixture, post, state_source
from tests.conftest import wait_until

POD = {"metadata": {"name": "p", "namespace": "ns"}}


@pytest.fixture
def serve():
    started: list[ExtenderServer] = []

    def start(limits: Limits = Limits(), source=None) -> ExtenderServer:
        ext = Extender(source or state_source(), clock=lambda: NOW, limits=limits)
        server = ExtenderServer(("127.0.0.1", 0), ext, limits=limits).start()
        started.append(server)
        return server

    yield start
    for s in started:
        s.stop()


def raw(server: ExtenderServer, data: bytes, timeout: float = 10.0) -> socket.socket:
    conn = socket.create_connection(server.server_address[:2], timeout=timeout)
    conn.sendall(data)
    return conn


def head(path: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def read_all(conn: socket.socket) -> bytes:
    out = b""
    try:
        while chunk := conn.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass  # a timeout is not caught: a server that never closes fails the test
    return out


def test_a_body_over_the_limit_is_413_unread(serve):
    server = serve(Limits(max_body_bytes=1024))
    conn = raw(server, head("/scheduler/filter", 50 * 2**20))  # 50 MiB announced, none sent
    answer = read_all(conn).decode()
    assert answer.startswith("HTTP/1.1 413") and "Connection: close" in answer
    assert "over the 1024 byte limit" in json.loads(answer.split("\r\n\r\n", 1)[1])["Error"]
    assert server.bodies.used == 0


def test_more_candidates_than_the_node_limit_is_400(serve):
    url = serve(Limits(max_nodes=100)).url
    code, r = post(url, "prioritize", json.dumps({"Pod": POD, "NodeNames": [f"n{i}" for i in range(101)]}).encode())
    assert code == 400 and "101 candidate nodes is over the limit of 100" in r["Error"]
    code, _ = post(url, "prioritize", json.dumps({"Pod": POD, "NodeNames": [f"n{i}" for i in range(100)]}).encode())
    assert code == 200


def pod_with(requests) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}}


MALFORMED = [
    ({"Pod": [], "NodeNames": ["node-a"]}, "Pod must be a Pod object"),
    ({"Pod": {"metadata": []}, "NodeNames": ["node-a"]}, "Pod must be a Pod object"),
    ({"Pod": {"metadata": {"name": "p", "annotations": []}}, "NodeNames": ["node-a"]}, "annotations must be an object"),
    ({"Pod": {"metadata": {"name": "p", "annotations": {"a": 1}}}, "NodeNames": ["node-a"]}, "object of strings"),
    ({"Pod": {"metadata": {"name": ["p"]}}, "NodeNames": ["node-a"]}, "metadata.name must be a string"),
    ({"Pod": {"metadata": {"name": "p"}, "spec": []}, "NodeNames": ["node-a"]}, "Pod.spec must be an object"),
    ({"Pod": {"metadata": {"name": "p"}, "spec": {"containers": {}}}, "NodeNames": ["node-a"]}, "must be a list"),
    ({"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [[]]}}, "NodeNames": ["node-a"]}, "must be an object"),
    ({"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": []}]}}, "NodeNames": ["node-a"]},
     "resources must be an object"),
    ({"Pod": pod_with([]), "NodeNames": ["node-a"]}, "requests must be an object"),
    ({"Pod": pod_with({"cpu": "1e999"}), "NodeNames": ["node-a"]}, "beyond the int64 range"),
    ({"Pod": pod_with({"resource.katalyst.kubewharf.io/reclaimed_millicpu": "1e999"}), "NodeNames": ["node-a"]},
     "beyond the int64 range"),
    ({"Pod": pod_with({"memory": "lots"}), "NodeNames": ["node-a"]}, "does not parse"),
    ({"Pod": pod_with({"cpu": [1]}), "NodeNames": ["node-a"]}, "must be a quantity"),
    ({"Pod": pod_with({"cpu": True}), "NodeNames": ["node-a"]}, "must be a quantity"),
    ({"Pod": POD, "Nodes": {"items": [{"metadata": {"name": "n", "annotations": []}}]}}, "annotations must be"),
    ({"Pod": POD, "Nodes": {"items": [{"metadata": {"name": "n"}, "status": []}]}}, "status must be an object"),
    ({"Pod": POD, "Nodes": {"items": [{"metadata": {"name": "n"}, "status": {"allocatable": []}}]}},
     "allocatable must be an object"),
    ({"Pod": POD, "Nodes": {"items": [{"metadata": {"name": 7}}]}}, "metadata.name must be a string"),
    ({"Pod": POD, "Nodes": []}, "NodeList"),
]


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("doc, needle", MALFORMED, ids=[m[1][:24] + str(i) for i, m in enumerate(MALFORMED)])
def test_every_malformed_shape_is_400_with_a_message_on_both_verbs(serve, verb, doc, needle):
    code, r = post(serve().url + "/scheduler", verb, json.dumps(doc).encode())
    assert code == 400 and needle in r["Error"], r


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("quantity", [b"NaN", b"Infinity", b"1e999"])
def test_non_finite_json_numbers_are_400(serve, verb, quantity):
    body = b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"requests": {"cpu": %s}}}]}},' \
           b' "NodeNames": ["node-a"]}' % quantity
    code, r = post(serve().url, verb, body)
    assert code == 400 and "not finite" in r["Error"], r


def test_a_half_sent_request_is_cut_after_the_client_timeout(serve):
    server = serve(Limits(client_timeout=0.3))
    conn = raw(server, head("/filter", 1000) + b'{"Pod": ')  # and then nothing
    assert read_all(conn) == b""  # the server closed it without an answer (a read timed out)
    assert wait_until(lambda: server.slots._value == server.limits.max_connections)  # its slot is free again


def test_a_client_trickling_its_request_is_cut_at_the_deadline(serve):
    server = serve(Limits(client_timeout=0.4))
    conn = raw(server, b"POST /filter HTTP/1.1\r\n", timeout=5)
    cut = False
    for _ in range(100):  # one header byte every 0.1 s: never idle long enough for a read to time out
        try:
            conn.sendall(b"X")
            time.sleep(0.1)
        except OSError:
            cut = True
            break
    assert cut and server.deadlines.cut >= 1


def test_past_max_connections_a_new_connection_gets_503_and_the_held_ones_do_not_block_answers(serve):
    server = serve(Limits(max_connections=3, client_timeout=30))
    held = [raw(server, b"POST /filter HTTP/1.1\r\n") for _ in range(3)]
    assert wait_until(lambda: server.slots._value == 0)
    turned = raw(server, head("/filter", 10))
    assert read_all(turned).startswith(b"HTTP/1.1 503")
    for c in held:
        c.close()
    assert wait_until(lambda: answers(server.url))


def answers(url: str) -> bool:
    try:
        return post(url, "filter", fixture("filter-reclaimed-names.json"))[0] == 200
    except urllib.error.URLError:  # turned away while the held connections were still being closed
        return False


def test_a_client_hanging_up_leaves_no_traceback_in_the_log(serve, caplog, capfd):
    server = serve()
    caplog.set_level(logging.DEBUG)
    body = fixture("filter-reclaimed-names.json")
    for _ in range(20):
        conn = raw(server, head("/filter", len(body)) + body)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        conn.close()
    assert wait_until(lambda: server.slots._value == server.limits.max_connections)
    assert post(server.url, "filter", body)[0] == 200
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert "Traceback" not in caplog.text
    assert "Traceback" not in capfd.readouterr().err  # socketserver's own handler prints there
    assert any("went away" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


class SlowMetrics(ExtenderMetrics):
    """Counts a call half a second late: an answer sent before its count would arrive uncounted."""

    def call(self, verb: str, code: int, seconds: float) -> None:
        time.sleep(0.5)
        super().call(verb, code, seconds)


def test_metrics_are_recorded_before_the_answer_is_sent():
    ext = Extender(state_source(), clock=lambda: NOW, metrics=SlowMetrics())
    server = ExtenderServer(("127.0.0.1", 0), ext).start()
    try:
        post(server.url, "filter", b"{not json")  # the answer is back: its call must already be counted
        assert 'tidewise_extender_calls_total{code="400",verb="filter"} 1.0' in ext.metrics.exposition().decode()
    finally:
        server.stop()


def test_explain_keeps_at_most_its_nodes_per_call_refusals_first_and_its_bytes(serve):
    limits = Limits(explain_nodes=1500, explain_bytes=2**20)
    ext = Extender(state_source(), clock=lambda: NOW, limits=limits)
    names = [f"node-{i:05d}" for i in range(2000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(40):  # 40 pods x 2,000 candidates: unbounded, ~25 MiB of reasons
            pod = {"metadata": {"name": f"pod-{i}", "namespace": "ns"}}
            ext.prioritize(parse_args(json.dumps({"Pod": pod, "NodeNames": names}).encode()))
            assert ext.explained_bytes <= limits.explain_bytes
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown <= limits.explain_bytes * 1.25 + 2**20  # what the bound counts is what the memory holds
    entry = ext.explain("ns/pod-39")["prioritize"]
    assert len(entry["nodes"]) == 1500 and entry["nodes_left_out"] == 500
    assert "ns/pod-0" not in ext.explain()["pods"]  # the oldest forgotten first


def test_the_annotation_cache_is_bounded_by_bytes_not_entries():
    cache = AnnotationCache(max_bytes=4 * 2**20)
    plan = json.loads(fixture("cluster-state.json"))["items"][0]["metadata"]["annotations"][PLAN_ANNOTATION]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(3000):  # each text distinct and ~64 KiB: 190 MiB if kept
            text = plan[:-1] + ', "padding": "' + f"{i:06d}" + "x" * 65536 + '"}'
            try:
                cache.plan("node-a", text, NOW)
            except Exception:  # noqa: BLE001 - the plan may be refused; it is remembered either way
                pass
            assert cache.bytes <= cache.max_bytes
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown <= cache.max_bytes * 1.25 + 2**20
    assert 0 < len(cache._plans) < 3000
