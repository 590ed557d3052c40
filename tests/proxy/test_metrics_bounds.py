"""Issue 20, B5: /metrics has a bounded set of label values whatever clients send, a scrape
never stalls the event loop that serves every client, and the metrics port answers anything
sent to it with a clean status or a close (proxy/ops/metrics.py, proxy/ops/http.py, proxy/process/workers.py,
proxy/ops/metricsmerge.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import struct
import threading
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from aclgate.proxy.ops import http
from aclgate.proxy.ops.metrics import KAFKA_API_KEY_LABELS, OTHER_API_KEY
from aclgate.proxy.process.workers import Supervisor, SupervisorHttp
from tests.fixtures.proxy import make_config
from tests.fixtures.rawclient import RawClient, request_entity
from tests.fixtures.wait import wait_until

#: 300 API keys Kafka does not define, from both ends of the int16 range and the middle
UNKNOWN_KEYS = [*range(-32768, -32668), *range(100, 200), *range(32668, 32768)]
#: a key Kafka defines that the proxy refuses (CreateDelegationToken is never forwarded)
REFUSED_KAFKA_KEY = 38
#: how much /metrics may grow from the refusals above (a few new sample lines)
GROWTH_BOUND = 1024


def metrics_url(proxy: Any, path: str = "/metrics") -> str:
    return "http://{}:{}{}".format(*proxy.server.metrics_address, path)


def get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def sample(text: bytes, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return None


def refused_request(api_key: int) -> bytes:
    """A one-request frame of `api_key` v0: the proxy counts it and closes the connection."""
    client_id = b"b5"
    payload = struct.pack(">hhih", api_key, 0, 1, len(client_id)) + client_id + b"\x00"
    return struct.pack(">i", len(payload)) + payload


def send_and_wait_close(address: tuple[str, int], data: bytes) -> bytes:
    """Send `data` on a new connection; everything read until the peer closes."""
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def api_versions(proxy: Any, timeout: float = 5) -> None:
    """One ApiVersions request through the proxy, answered."""
    with RawClient(proxy.bootstrap, timeout=timeout) as client:
        versions = client.request(
            request_entity(18, 3, client_software_name="t", client_software_version="1")
        )
        assert versions.error_code == 0


def test_unknown_api_keys_share_one_label(tansu, proxy_factory):
    """Before: one label value per refused key (65,896 keys grew /metrics to 8.8 MB, 1.1 s per
    scrape on the loop). Now keys Kafka does not define count as api_key="other"."""
    proxy = proxy_factory(tansu.bootstrap, metrics_listen=("127.0.0.1", 0))
    address = proxy.server.bootstrap_address
    send_and_wait_close(address, refused_request(REFUSED_KAFKA_KEY))
    api_versions(proxy)
    before = get(metrics_url(proxy))[1]
    for key in UNKNOWN_KEYS:
        send_and_wait_close(address, refused_request(key))
    api_versions(proxy)  # a real request still goes through
    status, after = get(metrics_url(proxy))
    assert status == 200
    name = "aclgate_unsupported_api_keys_total"
    assert sample(after, name, api_key=OTHER_API_KEY) == len(UNKNOWN_KEYS)
    assert sample(after, name, api_key=str(REFUSED_KAFKA_KEY)) == 1
    assert len(after) - len(before) < GROWTH_BOUND, len(after) - len(before)

    def per_api_keys() -> set[int]:
        hot = proxy.server.metrics.hot
        tables = [hot.by_api, *hot.latency.tables.values()]
        return {key for table in tables for key in table} | {key[0] for key in hot.decisions}

    # the per-API counters and latency tables never see a refused key (refused comes first)
    keys = proxy.run(per_api_keys)
    assert 18 in keys
    assert keys <= set(KAFKA_API_KEY_LABELS) - {REFUSED_KAFKA_KEY}


@pytest.fixture
def held_format(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Patches the exposition's formatting to wait (3 s at most) until released: state says
    when it started, how many times, and whether it finished."""
    state: dict[str, Any] = {
        "entered": threading.Event(),
        "release": threading.Event(),
        "calls": 0,
        "done": False,
    }
    real = http.generate_latest

    def held(registry: Any) -> bytes:
        state["calls"] += 1
        state["entered"].set()
        state["release"].wait(3)
        body = real(registry)
        state["done"] = True
        return body

    monkeypatch.setattr(http, "generate_latest", held)
    yield state
    state["release"].set()


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


def test_scrapes_share_one_build_off_the_loop(tansu, proxy_factory, held_format):
    """Before: generate_latest ran on the event loop, once per scrape; while it ran no client
    of the proxy was served. Now concurrent scrapes share one build, formatted in a thread:
    /healthz and a Kafka client are answered while it runs."""
    proxy = proxy_factory(tansu.bootstrap, metrics_listen=("127.0.0.1", 0))
    scrapes = [in_thread(lambda: get(metrics_url(proxy))) for _ in range(6)]
    assert held_format["entered"].wait(5)
    health = proxy.server.health
    wait_until(lambda: health.open == len(scrapes), 5, what="every scrape waiting")
    assert get(metrics_url(proxy, "/healthz"), timeout=2)[0] == 200
    api_versions(proxy, timeout=2)
    assert not held_format["done"]  # both answered while the build was running
    held_format["release"].set()
    bodies = set()
    for thread, out in scrapes:
        thread.join(5)
        assert out and out[0][0] == 200
        bodies.add(out[0][1])
    assert held_format["calls"] == 1
    assert len(bodies) == 1 and b"aclgate_requests_total" in next(iter(bodies))
    # the next scrape builds afresh: it sees the request made above
    assert sample(get(metrics_url(proxy))[1], "aclgate_requests_total", api="ApiVersions")
    assert held_format["calls"] == 2


def raw_http(address: tuple[str, int], data: bytes) -> bytes:
    """Send `data` to the metrics port and close the sending side (a client that goes away
    early), then read the answer until it closes."""
    with socket.create_connection(address, timeout=5) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # closed on us mid-send (a reset, or ENOTCONN on the shutdown when
            pass  # the answer and close came first): read what it said
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        return received


BAD_REQUESTS = {
    "request line over the limit": (b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n", 431),
    "header line over the limit": (b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 20_000, 431),
    "too many header lines": (b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 1000 + b"\r\n", 431),
    "garbage": (bytes(range(256)) * 4 + b"\r\n\r\n", 405),
    "no request line, at once closed": (b"", None),
    "half a request line, then closed": (b"GET /metr", None),
}


def test_bad_requests_answered_without_tracebacks(tansu, proxy_factory, caplog):
    """Before: an over-long request line ended in an unhandled ValueError (a traceback per
    request, no answer). Now each is answered 4xx or closed, logged at most once."""
    caplog.set_level(logging.INFO)
    proxy = proxy_factory(tansu.bootstrap, metrics_listen=("127.0.0.1", 0))
    address = proxy.server.metrics_address
    for _ in range(3):  # repeated: one log line for all of them
        for case, (data, status) in BAD_REQUESTS.items():
            answer = raw_http(address, data)
            if status is None:
                assert answer == b"", case
            else:
                assert answer.startswith(f"HTTP/1.1 {status} ".encode()), (case, answer[:80])
    assert get(metrics_url(proxy, "/healthz"))[0] == 200
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    refusals = [
        r.getMessage()
        for r in caplog.records
        if r.name == "aclgate.http" and r.levelno == logging.INFO
    ]
    assert len(refusals) == 1 and "(431)" in refusals[0], refusals


def test_connections_to_the_metrics_port_are_bounded(tansu, proxy_factory, monkeypatch):
    """Past MAX_CONNECTIONS open at once a new connection is closed at once (before: each
    was held, every one waiting up to 10 s for its request head)."""
    monkeypatch.setattr(http, "MAX_CONNECTIONS", 4)
    proxy = proxy_factory(tansu.bootstrap, metrics_listen=("127.0.0.1", 0))
    address = proxy.server.metrics_address
    idle = [socket.create_connection(address, timeout=5) for _ in range(4)]
    try:
        wait_until(lambda: proxy.server.health.open == 4, 5, what="4 connections served")
        with socket.create_connection(address, timeout=2) as extra:
            extra.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            assert extra.recv(100) == b""  # closed, not queued behind the idle ones
    finally:
        for sock in idle:
            sock.close()
    wait_until(lambda: proxy.server.health.open == 0, 5, what="the idle ones gone")
    assert get(metrics_url(proxy, "/healthz"))[0] == 200


async def http_status(address: tuple[str, int], path: str) -> int:
    reader, writer = await asyncio.open_connection(*address)
    writer.write(f"GET {path} HTTP/1.1\r\n\r\n".encode())
    answer = await reader.read()
    writer.close()
    return int(answer.split(b" ", 2)[1])


@pytest.mark.asyncio
async def test_supervisor_healthz_answers_during_a_merge(monkeypatch):
    """Before: the supervisor merged its workers' expositions on its loop (5.6-6.1 s a scrape
    with 8.8 MB expositions; /healthz answered 503 after 22.9 s). Now the merge runs in a
    thread and /healthz is answered while it runs."""
    # its workers are never started (they count as down): no port needs to be fixed
    supervisor = Supervisor(dataclasses.replace(make_config("127.0.0.1:9"), workers=2))
    release, done = threading.Event(), threading.Event()
    merge = supervisor.merger.exposition

    def slow_merge(*args: Any, **kwargs: Any) -> bytes:
        release.wait(3)
        body = merge(*args, **kwargs)
        done.set()
        return body

    monkeypatch.setattr(supervisor.merger, "exposition", slow_merge)
    server = SupervisorHttp(supervisor)
    address = await server.start("127.0.0.1", 0)
    try:
        scrapes = [asyncio.create_task(http_status(address, "/metrics")) for _ in range(3)]
        await asyncio.sleep(0.2)  # the scrapes are in (a fixed delay only makes this weaker)
        assert await http_status(address, "/healthz") == 503  # no worker up: answered at once
        assert not done.is_set()
        release.set()
        assert await asyncio.gather(*scrapes) == [200, 200, 200]
        assert server.metrics_body.builds == 1
    finally:
        release.set()
        await server.close()
