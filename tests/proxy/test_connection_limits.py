"""max_connections and max_connections_per_ip, as Kafka's max.connections(.per.ip): a
connection over a limit is closed at once and counted; closing one frees its place."""

from __future__ import annotations

import socket
import time

from tests.fixtures.rawclient import RawClient, request_entity


def api_versions_ok(raw: RawClient) -> bool:
    return (
        raw.request(
            request_entity(18, 3, client_software_name="t", client_software_version="1")
        ).error_code
        == 0
    )


def closed_at_once(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.settimeout(5)
        try:
            return sock.recv(1) == b""
        except ConnectionResetError:
            return True


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def test_per_ip_limit(tansu, proxy_factory):
    proxy = proxy_factory(tansu.bootstrap, max_connections_per_ip=2)
    first, second = RawClient(proxy.bootstrap), RawClient(proxy.bootstrap)
    assert api_versions_ok(first) and api_versions_ok(second)
    assert closed_at_once(proxy.bootstrap)
    assert proxy.metric("aclgate_errors_total", {"kind": "connection_limit"}) == 1
    assert api_versions_ok(first)  # the ones already open are not disturbed
    first.close()
    assert wait_for(lambda: len(proxy.server.connections) == 1)
    with RawClient(proxy.bootstrap) as third:  # a place was freed
        assert api_versions_ok(third)
    assert wait_for(  # only the second is left, once the proxy has seen the third close
        lambda: proxy.metric("aclgate_connections_active", {"listener": "bootstrap"}) == 1
    )
    second.close()
    assert wait_for(lambda: proxy.run(lambda: dict(proxy.server._per_address)) == {})
    assert wait_for(
        lambda: proxy.metric("aclgate_connections_active", {"listener": "bootstrap"}) == 0
    )


def test_total_limit(tansu, proxy_factory):
    proxy = proxy_factory(tansu.bootstrap, max_connections=1)
    with RawClient(proxy.bootstrap) as only:
        assert api_versions_ok(only)
        assert closed_at_once(proxy.bootstrap)
        assert api_versions_ok(only)
    assert wait_for(lambda: not proxy.server.connections)
    with RawClient(proxy.bootstrap) as again:
        assert api_versions_ok(again)
