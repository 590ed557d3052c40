"""max_connections and max_connections_per_ip, as Kafka's max.connections(.per.ip): a
connection over a limit is closed at once and counted; closing one frees its place."""

from __future__ import annotations

import socket

from tests.fixtures.rawclient import RawClient, request_entity
from tests.fixtures.wait import wait_until


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


def test_per_ip_limit(tansu, proxy_factory):
    proxy = proxy_factory(tansu.bootstrap, max_connections_per_ip=2)
    first, second = RawClient(proxy.bootstrap), RawClient(proxy.bootstrap)
    assert api_versions_ok(first) and api_versions_ok(second)
    assert closed_at_once(proxy.bootstrap)
    assert proxy.metric("aclgate_errors_total", {"kind": "connection_limit"}) == 1
    assert api_versions_ok(first)  # the ones already open are not disturbed
    first.close()
    wait_until(lambda: len(proxy.server.connections) == 1)
    with RawClient(proxy.bootstrap) as third:  # a place was freed
        assert api_versions_ok(third)
    wait_until(  # only the second is left, once the proxy has seen the third close
        lambda: proxy.metric("aclgate_connections_active", {"listener": "bootstrap"}) == 1
    )
    second.close()
    wait_until(lambda: proxy.run(lambda: dict(proxy.server._per_address)) == {})
    wait_until(lambda: proxy.metric("aclgate_connections_active", {"listener": "bootstrap"}) == 0)


def test_total_limit(tansu, proxy_factory):
    proxy = proxy_factory(tansu.bootstrap, max_connections=1)
    with RawClient(proxy.bootstrap) as only:
        assert api_versions_ok(only)
        assert closed_at_once(proxy.bootstrap)
        assert api_versions_ok(only)
    wait_until(lambda: not proxy.server.connections)
    with RawClient(proxy.bootstrap) as again:
        assert api_versions_ok(again)
