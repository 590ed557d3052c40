"""Graceful shutdown: a stopping proxy accepts nothing new, reads no new requests, and still
delivers the responses the cluster owes (up to --shutdown-grace), so a rolling restart of the
proxy loses no answer."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from tests.fixtures.rawclient import RawClient
from tests.fixtures.scripted_broker import DEFAULT_SCRIPT, ScriptedCluster
from tests.fixtures.wait import wait_until
from tests.listeners.util import metadata_request

SLOW = 2.0  # seconds the scripted broker takes to answer Metadata for topic "slow"


@pytest.fixture
def slow_cluster():
    with ScriptedCluster([1]) as cluster:

        async def slow_metadata(node, header, request):
            if any(t.name == "slow" for t in request.topics or ()):
                await asyncio.sleep(SLOW)
            return DEFAULT_SCRIPT[3](node, header, request)

        cluster.nodes[0].script[3] = slow_metadata
        yield cluster


def broker_has(cluster, topic: str) -> bool:
    return any(
        t.name == topic
        for h, r in list(cluster.nodes[0].requests)
        if h.api_key == 3
        for t in r.topics or ()
    )


def listener_closed(address: str) -> bool:
    try:
        socket.create_connection(tuple(address.rsplit(":", 1)), timeout=2).close()
    except OSError:
        return True
    return False


def stop_in_background(proxy) -> threading.Thread:
    stopper = threading.Thread(target=proxy.stop)
    stopper.start()
    return stopper


def test_responses_in_flight_are_delivered_then_the_connection_closes(slow_cluster, proxy_factory):
    proxy = proxy_factory(slow_cluster.bootstrap, shutdown_grace=10.0)
    with RawClient(proxy.bootstrap, timeout=10) as raw:
        assert raw.request(metadata_request("fast")).topics[0].name == "fast"
        cid = raw.send(metadata_request("slow"))
        wait_until(lambda: broker_has(slow_cluster, "slow"))
        started = time.monotonic()
        stopper = stop_in_background(proxy)
        wait_until(lambda: listener_closed(proxy.bootstrap))  # at once, before the drain
        raw.send(metadata_request("late"))  # not read any more: never answered
        frame = raw.recv_frame()
        assert frame is not None and int.from_bytes(frame[4:8], "big") == cid
        assert raw.recv_frame() is None  # then closed, without an answer to "late"
        stopper.join(15)
        assert time.monotonic() - started < SLOW + 2  # closed once drained, not at the deadline
    requests = [r for _h, r in slow_cluster.nodes[0].requests if _h.api_key == 3]
    assert not any(t.name == "late" for r in requests for t in r.topics or ())


def test_the_grace_period_bounds_the_wait(slow_cluster, proxy_factory):
    proxy = proxy_factory(slow_cluster.bootstrap, shutdown_grace=0.3)
    with RawClient(proxy.bootstrap, timeout=10) as raw:
        raw.send(metadata_request("slow"))
        wait_until(lambda: broker_has(slow_cluster, "slow"))
        started = time.monotonic()
        stop_in_background(proxy).join(15)
        assert time.monotonic() - started < SLOW
        assert raw.recv_frame() is None  # given up after the grace period
