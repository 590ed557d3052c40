"""No client can turn its connections into a log flood (issue 20): close lines carry a bounded
reason and every repeated line goes through one rate limit, with a summary of what it held
back. Through a real proxy and real sockets; the unit tests below pin the limiter itself."""

from __future__ import annotations

import asyncio
import logging
import struct
import time

import pytest
from confluent_kafka import Producer

from aclgate.proxy.demo.embedded_broker import free_port
from aclgate.proxy.ops.ratelimit import RateLimitedLog
from tests.fixtures.proxy import RunningProxy
from tests.fixtures.rawclient import RawClient, request_entity
from tests.listeners.conftest import sasl_listener

#: a line may be this long: the close reason's bound (proxy/listen/connection.py, REASON_LIMIT) plus
#: the peer, and for a summary line its own words
LINE_LIMIT = 1000 + 200
SUPPRESSED = "aclgate_log_lines_suppressed_total"


def lines(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


def slow_machine_proof(proxy: RunningProxy) -> None:
    """The counts below assume the run fits in one interval of the limit (10 s): make sure."""
    proxy.run(lambda: setattr(proxy.server.log_limiter, "interval", 600.0))


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_sasl_handshakes_naming_a_32_kb_mechanism_log_a_bounded_amount(
    scripted, proxy_factory, users_file, caplog
):
    """Before: each handshake put the whole name in a WARNING close line (50 x 32 KB = 1.6 MB
    of log); now the name is cut to 100 characters and one line per 10 s is written."""
    caplog.set_level(logging.INFO, logger="aclgate")
    proxy = proxy_factory(
        scripted.bootstrap,
        **sasl_listener(users_file),
        connection_failed_authentication_delay_ms=0,
    )
    slow_machine_proof(proxy)
    mechanism = "M" * 32_000
    clients = [RawClient(proxy.bootstrap) for _ in range(50)]
    try:
        for client in clients:
            client.send(request_entity(17, 1, mechanism=mechanism))
        for client in clients:
            answer = client.recv_frame()
            assert answer is not None and struct.unpack_from(">h", answer, 8)[0] == 33
            assert client.is_closed_by_peer()
    finally:
        for client in clients:
            client.close()
    proxy.stop()  # writes the pending summary line
    logged = lines(caplog)
    assert sum(len(line) for line in logged) < 5_000, [line[:200] for line in logged]
    assert all(len(line) <= LINE_LIMIT for line in logged)
    closes = [line for line in logged if "asked for SASL mechanism" in line]
    assert 1 <= len(closes) <= 2 and all("[32000 chars sha256:" in line for line in closes)
    assert all("M" * 100 not in line for line in closes)
    assert proxy.metric(SUPPRESSED, {"kind": "sasl_state"}) == 50 - 1


GARBAGE = {
    "frame_too_large": struct.pack(">i", 200_000_000),
    "malformed_request": frame(b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x02ab\x07\x01"),
    "unsupported_api": frame(struct.pack(">hhih", 10000, 0, 1, -1) + b"\x00"),
}


def test_two_hundred_garbage_connections_write_a_handful_of_lines(scripted, proxy_factory, caplog):
    """Before: one WARNING line per connection (200); now one per kind of close and one
    summary per kind with the count of the others."""
    caplog.set_level(logging.INFO, logger="aclgate")
    proxy = proxy_factory(scripted.bootstrap)
    slow_machine_proof(proxy)
    kinds = list(GARBAGE)
    for i in range(200):
        with RawClient(proxy.bootstrap) as client:
            client.send_raw(GARBAGE[kinds[i % len(kinds)]])
            assert client.is_closed_by_peer()
    counted = {k: proxy.metric("aclgate_errors_total", {"kind": k}) for k in kinds}
    assert sum(counted.values()) == 200, counted
    proxy.stop()
    logged = lines(caplog)
    closes = [line for line in logged if line.startswith("closing connection from")]
    summaries = [line for line in logged if "held back" in line]
    assert len(closes) == len(kinds), closes
    assert len(summaries) == len(kinds), summaries
    held = sum(int(line.split()[0]) for line in summaries)
    assert held == 200 - len(kinds)
    assert sum(proxy.metric(SUPPRESSED, {"kind": k}) for k in kinds) == held


def test_a_producer_against_a_dead_cluster_writes_bounded_warnings(proxy_factory, caplog):
    """Issue 23: one producer made 194 WARNING lines in 10 s ("cannot reach a bootstrap server
    upstream"); now one line, the rest counted."""
    caplog.set_level(logging.INFO, logger="aclgate")
    proxy = proxy_factory(f"127.0.0.1:{free_port()}")
    producer = Producer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 50,
            "log_level": 0,
        }
    )
    producer.produce("t", b"x")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        producer.poll(0.1)
    producer.purge()
    producer.flush(1)
    unreachable = proxy.metric("aclgate_errors_total", {"kind": "upstream_unreachable"})
    assert unreachable >= 10  # the client did retry, many times
    warnings = [
        line for line in lines(caplog, logging.WARNING) if "cannot reach a bootstrap" in line
    ]
    assert 1 <= len(warnings) <= 2, len(warnings)
    assert proxy.metric(SUPPRESSED, {"kind": "upstream_unreachable"}) >= unreachable - 2


# --------------------------------------------------------------------- the limiter itself


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_limiter_writes_one_line_per_key_and_interval_then_a_summary(caplog):
    caplog.set_level(logging.INFO, logger="t.limited")
    logger = logging.getLogger("t.limited")
    clock = Clock()
    held: list[str] = []
    limiter = RateLimitedLog(interval=10, clock=clock, on_held=held.append)
    for i in range(5):
        limiter.log(logger, logging.WARNING, "a", "line %d", i)
    limiter.log(logger, logging.WARNING, "b", "other")
    assert lines(caplog) == ["line 0", "other"]
    assert held == ["a"] * 4 and limiter.held == 4
    clock.now = 10.0  # a new interval: the summary of the last one, then the line
    limiter.log(logger, logging.WARNING, "a", "line %d", 5)
    assert lines(caplog)[2:] == [
        "4 more line(s) like this held back in the last 10.0 s (a; at most 1 every 10 s), "
        "the last: line 4",
        "line 5",
    ]


def test_limiter_summary_comes_when_the_storm_ends(caplog):
    """No further line is needed: a timer writes the summary at the interval's end."""
    caplog.set_level(logging.INFO, logger="t.limited")
    logger = logging.getLogger("t.limited")

    async def storm() -> None:
        limiter = RateLimitedLog(interval=0.2)
        for i in range(100):
            limiter.log(logger, logging.INFO, "k", "line %d", i)
        await asyncio.sleep(0.5)

    asyncio.run(storm())
    first, summary = lines(caplog)
    assert first == "line 0"
    assert summary.startswith("99 more line(s) like this held back in the last 0.")
    assert summary.endswith("(k; at most 1 every 0.2 s), the last: line 99")


def test_limiter_keys_are_bounded_and_debug_still_sees_every_line(caplog):
    caplog.set_level(logging.DEBUG, logger="t.limited")
    logger = logging.getLogger("t.limited")
    limiter = RateLimitedLog(interval=10, clock=Clock(), max_keys=3)
    for i in range(10):
        limiter.log(logger, logging.WARNING, f"key{i}", "first of %d", i)
        limiter.log(logger, logging.WARNING, f"key{i}", "second of %d", i)
        assert len(limiter._windows) <= 3
    held = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(held) == 10 and held[0].rate_limited_level == logging.WARNING
