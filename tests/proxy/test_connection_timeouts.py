"""Connections that misbehave cost nothing for long (issue 15, B3 and B4).

Silent sockets, half-sent length prefixes and SASL connections that never authenticate are
closed by timeouts; no upstream connection exists until a request needs one; the proxy keeps
serving when it runs out of descriptors; `/readyz` follows the cluster's reachability.
"""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.error
import urllib.request

import pytest

from aclgate.proxy.demo.embedded_broker import TansuBroker
from tests.fixtures.wait import wait_until

API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 7, -1)


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def _closed_by_peer(sock: socket.socket, within: float) -> bool:
    """True when the peer closes `sock` within `within` seconds (EOF or reset)."""
    sock.settimeout(within)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def _api_versions_roundtrip(sock: socket.socket) -> bytes:
    sock.sendall(API_VERSIONS_V0)
    head = sock.recv(4)
    size = struct.unpack(">i", head)[0]
    body = b""
    while len(body) < size:
        body += sock.recv(size - len(body))
    return body


class TestTimeouts:
    def test_idle_connection_is_closed(self, tansu, proxy_factory):
        proxy = proxy_factory(tansu.bootstrap, connections_max_idle_ms=400)
        sock = _connect(proxy.bootstrap)
        _api_versions_roundtrip(sock)
        assert _closed_by_peer(sock, 5), "an idle connection was never closed"
        assert proxy.metric("aclgate_connection_timeouts_total", {"kind": "idle"}) == 1

    def test_active_connection_is_not_closed_as_idle(self, tansu, proxy_factory):
        proxy = proxy_factory(tansu.bootstrap, connections_max_idle_ms=600)
        sock = _connect(proxy.bootstrap)
        for _ in range(8):  # 1.6 s of traffic, one request every 200 ms
            _api_versions_roundtrip(sock)
            time.sleep(0.2)
        _api_versions_roundtrip(sock)
        assert proxy.metric("aclgate_connection_timeouts_total", {"kind": "idle"}) == 0
        sock.close()

    def test_silent_connection_is_closed_as_idle(self, tansu, proxy_factory):
        proxy = proxy_factory(tansu.bootstrap, connections_max_idle_ms=300)
        sock = _connect(proxy.bootstrap)
        assert _closed_by_peer(sock, 5)

    def test_half_sent_length_prefix_is_closed(self, tansu, proxy_factory):
        """Two bytes of a length prefix must not hold a socket until the idle timeout."""
        proxy = proxy_factory(tansu.bootstrap, partial_request_timeout_ms=300)
        sock = _connect(proxy.bootstrap)
        sock.sendall(b"\x00\x00")
        assert _closed_by_peer(sock, 5), "a half-sent frame held the connection"
        assert proxy.metric("aclgate_connection_timeouts_total", {"kind": "partial_request"}) == 1

    def test_unauthenticated_sasl_connection_is_closed(self, proxy_factory, tmp_path):
        """A SASL listener closes a connection that sent ApiVersions and then nothing (the
        upstream is never contacted: port 9 is closed)."""
        users = tmp_path / "users.json"
        users.write_text('{"version": 1, "users": {}}')
        proxy = proxy_factory(
            "127.0.0.1:9",
            listener_security_protocol="SASL_PLAINTEXT",
            sasl_mechanisms="PLAIN",
            users_file=users,
            authentication_timeout_ms=400,
        )
        silent = _connect(proxy.bootstrap)
        talked = _connect(proxy.bootstrap)
        _api_versions_roundtrip(talked)
        assert _closed_by_peer(silent, 5)
        assert _closed_by_peer(talked, 5)
        assert proxy.metric("aclgate_connection_timeouts_total", {"kind": "authentication"}) == 2


class TestLazyUpstream:
    def test_silent_clients_open_no_upstream_connection(self, tansu, proxy_factory):
        """2,000 clients that sent nothing made 2,000 broker connections: now none."""
        proxy = proxy_factory(tansu.bootstrap)
        clients = [_connect(proxy.bootstrap) for _ in range(50)]
        wait_until(lambda: len(proxy.server.connections) == 50, what="50 connections")
        time.sleep(0.3)
        opened = proxy.run(
            lambda: [c for c in proxy.server.connections if c.upstream or c._connect_task]
        )
        assert not opened, f"{len(opened)} upstream connections for 50 silent clients"
        for sock in clients:
            sock.close()

    def test_first_request_opens_the_upstream_connection(self, tansu, proxy_factory):
        proxy = proxy_factory(tansu.bootstrap)
        sock = _connect(proxy.bootstrap)
        wait_until(lambda: len(proxy.server.connections) == 1, what="the connection")
        (conn,) = proxy.run(lambda: list(proxy.server.connections))
        assert conn.upstream is None
        assert _api_versions_roundtrip(sock)[:4] == struct.pack(">i", 7)
        assert conn.upstream is not None
        sock.close()


class TestLimits:
    def test_connection_creation_rate_per_address(self, tansu, proxy_factory):
        proxy = proxy_factory(tansu.bootstrap, max_connection_creation_rate=5)
        socks = [_connect(proxy.bootstrap) for _ in range(12)]
        refused = sum(_closed_by_peer(s, 0.5) for s in socks)
        assert refused >= 5, f"only {refused} of 12 connections in a burst were refused"
        assert proxy.metric("aclgate_errors_total", {"kind": "connection_rate"}) == refused
        time.sleep(1.2)  # the bucket refills: a new connection is served again
        sock = _connect(proxy.bootstrap)
        assert _api_versions_roundtrip(sock)
        for s in [*socks, sock]:
            s.close()

    def test_out_of_descriptors_refuses_new_connections_and_recovers(self, tansu, proxy_factory):
        proxy = proxy_factory(tansu.bootstrap)
        proxy.run(lambda: setattr(proxy.server, "fd_budget", 3))  # as if the limit were low
        socks = [_connect(proxy.bootstrap) for _ in range(3)]
        for sock in socks:
            assert _api_versions_roundtrip(sock)
        extra = _connect(proxy.bootstrap)
        assert _closed_by_peer(extra, 5)
        assert proxy.metric("aclgate_errors_total", {"kind": "fd_limit"}) == 1
        socks.pop().close()  # one closes: a new connection fits again
        wait_until(lambda: len(proxy.server.connections) == 2, what="the close to be seen")
        again = _connect(proxy.bootstrap)
        assert _api_versions_roundtrip(again)
        for sock in [*socks, again]:
            sock.close()

    def test_refusals_are_rate_limited_in_the_log(self, tansu, proxy_factory, caplog):
        proxy = proxy_factory(tansu.bootstrap, max_connections=1)
        keep = _connect(proxy.bootstrap)
        wait_until(lambda: len(proxy.server.connections) == 1, what="the first connection")
        with caplog.at_level("WARNING", logger="aclgate.connection"):
            for _ in range(30):
                assert _closed_by_peer(_connect(proxy.bootstrap), 5)
        lines = [r for r in caplog.records if "refused connection" in r.getMessage()]
        assert proxy.metric("aclgate_errors_total", {"kind": "connection_limit"}) == 30
        assert 1 <= len(lines) <= 2, f"{len(lines)} log lines for 30 refusals"
        keep.close()

    def test_open_files_soft_limit_is_raised(self, tansu, proxy_factory):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        lowered = min(soft, hard, 512)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
        try:
            proxy = proxy_factory(tansu.bootstrap)
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
            assert proxy.server.fd_budget > 0
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _readyz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_readyz_follows_the_cluster_through_an_outage(proxy_factory, tmp_path):
    """B4: /readyz said 200 upstream_reachable=True for a whole outage of the cluster."""
    broker = TansuBroker(log_path=tmp_path / "tansu.log").start()
    port = broker.port
    try:
        proxy = proxy_factory(
            broker.bootstrap, metrics_listen=("127.0.0.1", 0), upstream_check_interval=0.2
        )
        metrics_port = proxy.server.metrics_address[1]
        assert _readyz(metrics_port)[0] == 200
        broker.stop()
        _, details = wait_until(
            lambda: (r := _readyz(metrics_port))[0] == 503 and r, timeout=10, what="503"
        )
        assert details["upstream_reachable"] is False
        assert details["upstream_error"]
        # a client connecting meanwhile is refused upstream: still not ready
        sock = _connect(proxy.bootstrap)
        sock.sendall(API_VERSIONS_V0)
        assert _closed_by_peer(sock, 10)
        assert _readyz(metrics_port)[0] == 503
        broker = TansuBroker(port=port, log_path=tmp_path / "tansu2.log").start()
        _, details = wait_until(
            lambda: (r := _readyz(metrics_port))[0] == 200 and r, timeout=10, what="200"
        )
        assert details["upstream_reachable"] is True and details["upstream_error"] is None
    finally:
        broker.stop()


@pytest.mark.slow
def test_real_descriptor_exhaustion_is_refused_counted_and_recovers(tansu, proxy_process):
    """B3: at the open-files limit connections were dropped at accept with no log line or
    metric. A real `aclgate serve` with a hard limit of 256 descriptors: the connections that
    fit are served, the rest are refused by the proxy (counted, logged once), and a new
    connection is served again once others close."""
    proxy = proxy_process(
        "--upstream",
        tansu.bootstrap,
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--allow-everyone-if-no-acl-found",
        nofile=256,
    )
    assert "open-files limit 256" in proxy.log
    clients = []
    for _ in range(150):
        sock = _connect(proxy.bootstrap)
        clients.append(sock)
    served = refused = 0
    for sock in clients:
        try:
            _api_versions_roundtrip(sock)
            served += 1
        except (ConnectionError, struct.error, TimeoutError, OSError):
            refused += 1
    assert served >= 50 and refused >= 20, (served, refused)
    assert proxy.metric("aclgate_errors_total", {"kind": "fd_limit"}) == refused
    assert proxy.log.count("refused connection from") == 1
    assert "Too many open files" not in proxy.log
    for sock in clients:
        sock.close()
    again = wait_until(
        lambda: _try_roundtrip(proxy.bootstrap), timeout=10, what="a connection to be served"
    )
    again.close()
    assert proxy.proc.poll() is None


def _try_roundtrip(address: str) -> socket.socket | None:
    sock = _connect(address)
    try:
        _api_versions_roundtrip(sock)
        return sock
    except (ConnectionError, struct.error, OSError):
        sock.close()
        return None
