"""Bad input never crashes the proxy: the offending connection closes with a clear log line
and other clients keep working."""

from __future__ import annotations

import logging
import socket
import struct
import time

import pytest

from tests.fixtures.rawclient import RawClient, request_entity
from tests.fixtures.scripted_broker import ScriptedCluster


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def header(api_key: int, version: int, corr: int = 1, client_id: bytes = b"bad") -> bytes:
    return struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id


def assert_still_serves(proxy):
    with RawClient(proxy.bootstrap) as client:
        body = client.request(
            request_entity(18, 3, client_software_name="t", client_software_version="1")
        )
        assert body.error_code == 0 and body.api_keys


def wait_for_log(caplog, text: str, timeout: float = 5.0) -> logging.LogRecord:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in caplog.records:
            if text in record.getMessage():
                return record
        time.sleep(0.02)
    raise AssertionError(
        f"no log line containing {text!r}; got {[r.getMessage() for r in caplog.records]}"
    )


CASES = {
    "frame over the size limit": (struct.pack(">i", 200_000_000), "outside 0..104857600"),
    "negative frame size": (struct.pack(">i", -7), "outside 0..104857600"),
    "garbage header": (
        frame(b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x02ab\x07\x01"),
        "malformed request header",
    ),
    "api key 10000": (frame(header(10000, 0) + b"\x00"), "api_key=10000"),
    "version newer than the proxy parses": (frame(header(3, 42)), "api_key=3 api_version=42"),
    "never forwarded: CreateDelegationToken": (frame(header(38, 1)), "api_key=38 is not supported"),
    "Produce v2 (removed in Kafka 4)": (frame(header(0, 2)), "api_key=0 api_version=2"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_request_closes_only_that_connection(case, tansu_proxy, caplog):
    caplog.set_level(logging.INFO, logger="aclgate")
    data, log_text = CASES[case]
    with RawClient(tansu_proxy.bootstrap) as good, RawClient(tansu_proxy.bootstrap) as bad:
        good.request(request_entity(18, 0))
        bad.send_raw(data)
        assert bad.is_closed_by_peer(), "the proxy should close a connection that sent " + case
        good.request(request_entity(18, 0))  # the other connection is unaffected
    record = wait_for_log(caplog, log_text)
    assert (
        record.levelno == logging.WARNING
        and "closing connection from 127.0.0.1:" in record.getMessage()
    )
    assert_still_serves(tansu_proxy)


def test_truncated_frame_then_disconnect(tansu_proxy, caplog):
    with socket.create_connection(("127.0.0.1", tansu_proxy.port)) as s:
        s.sendall(struct.pack(">i", 100) + header(18, 0)[:6])
    assert_still_serves(tansu_proxy)
    assert tansu_proxy.run(lambda: len(tansu_proxy.server.connections)) <= 1


def test_api_versions_newer_than_kio_gets_unsupported_version(tansu_proxy):
    with RawClient(tansu_proxy.bootstrap) as client:
        cid = 4242
        client.send_raw(frame(header(18, 9, cid) + b"\x00"))
        reply = client.recv_frame()
        assert struct.unpack_from(">ih", reply, 4) == (cid, 35)
        # and the connection stays usable: the client retries with a version we speak
        assert (
            client.request(
                request_entity(18, 3, client_software_name="x", client_software_version="1")
            ).error_code
            == 0
        )


def test_upstream_going_away_mid_request_closes_the_client(proxy_factory, caplog):
    caplog.set_level(logging.INFO, logger="aclgate")
    with ScriptedCluster([1]) as cluster:
        cluster.nodes[0].script[8] = lambda node, hdr, req: "close"  # OffsetCommit: broker dies
        proxy = proxy_factory(cluster.bootstrap)
        with RawClient(proxy.bootstrap) as client:
            client.request(request_entity(18, 0))
            from aclgate.protocol.versions import request_class
            from tests.fixtures.scripted_broker import _defaults

            started = time.monotonic()
            client.send(_defaults(request_class(8, 2)))
            assert client.is_closed_by_peer(timeout=10)
            assert time.monotonic() - started < 5
        wait_for_log(caplog, "upstream broker closed the connection with 1 request(s) in flight")
        with RawClient(proxy.bootstrap) as other:
            assert other.request(request_entity(18, 0)).error_code == 0


def test_unreachable_upstream_closes_with_a_clear_error(proxy_factory, caplog):
    from aclgate.proxy.demo.embedded_broker import free_port

    caplog.set_level(logging.INFO, logger="aclgate")
    proxy = proxy_factory(f"127.0.0.1:{free_port()}")
    with RawClient(proxy.bootstrap) as client:
        client.send(request_entity(18, 0))
        assert client.is_closed_by_peer()
    wait_for_log(caplog, "cannot reach a bootstrap server upstream")
    assert proxy.metric("aclgate_errors_total", {"kind": "upstream_unreachable"}) >= 1
