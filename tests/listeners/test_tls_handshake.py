"""Failed TLS handshakes are seen (issue 15): a plaintext client, garbage, a refused client
certificate and a handshake that never finishes are closed, counted under
aclgate_errors_total{kind="tls_handshake"} and logged (rate limited) with the peer and
OpenSSL's reason. uvloop's own TLS server used to drop them without a word, and a client that
connected and sent nothing held its socket for uvloop's 60 s default."""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import time

import pytest

from tests.fixtures.rawclient import RawClient, request_entity
from tests.listeners.util import metadata_request, wait_until

ERRORS = "aclgate_errors_total"
TLS = {"kind": "tls_handshake"}


def closed_within(sock: socket.socket, timeout: float) -> bool:
    """True when the peer closes within `timeout` (whatever it sends first is ignored)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(4096):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False


def tls_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "aclgate.tls"]


@pytest.fixture
def tls_proxy(scripted, proxy_factory, certs, caplog):
    caplog.set_level(logging.WARNING, logger="aclgate.tls")
    return proxy_factory(scripted.bootstrap, **certs.listener("requested"))


def test_plaintext_client_on_a_tls_listener_is_counted_and_logged(tls_proxy, caplog):
    with RawClient(tls_proxy.bootstrap) as raw:
        port = raw.sock.getsockname()[1]
        raw.send(request_entity(18, 3, client_software_name="x", client_software_version="1"))
        assert closed_within(raw.sock, 5)
    assert wait_until(lambda: tls_proxy.metric(ERRORS, TLS) == 1, timeout=5)
    [line] = tls_lines(caplog)
    assert f"TLS handshake with 127.0.0.1:{port} failed" in line, line
    assert "not TLS" in line, line  # the hint for a client configured without TLS


@pytest.mark.parametrize(
    "garbage",
    [b"\x16\x03\x01\x00\x05hello", b"GET / HTTP/1.1\r\n\r\n", bytes(range(256)) * 4],
    ids=["bad-record", "http", "binary"],
)
def test_garbage_is_counted(tls_proxy, garbage):
    with socket.create_connection(("127.0.0.1", tls_proxy.port), timeout=5) as sock:
        sock.sendall(garbage)
        assert closed_within(sock, 5)
    assert wait_until(lambda: tls_proxy.metric(ERRORS, TLS) == 1, timeout=5)
    assert tls_proxy.run(lambda: len(tls_proxy.server.connections)) == 0


def test_refused_client_certificate_is_counted(scripted, proxy_factory, certs, caplog):
    caplog.set_level(logging.WARNING, logger="aclgate.tls")
    proxy = proxy_factory(scripted.bootstrap, **certs.listener("required"))
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    cert, key = certs.client("alice", untrusted=True)
    ctx.load_cert_chain(cert, key)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(
                    b"\x00\x00\x00\x00"
                )  # TLS 1.3: the refusal comes after the client's side
                assert closed_within(tls, 5)
        except (ssl.SSLError, ConnectionError):
            pass
    assert wait_until(lambda: proxy.metric(ERRORS, TLS) == 1, timeout=5)
    assert any("certificate" in line.lower() for line in tls_lines(caplog)), tls_lines(caplog)


def test_a_handshake_that_never_finishes_is_closed_after_the_timeout(tls_proxy, caplog):
    tls_proxy.run(lambda: setattr(tls_proxy.server.security, "tls_handshake_timeout", 0.5))
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", tls_proxy.port), timeout=5) as sock:
        sock.sendall(b"\x16\x03")  # two bytes of a TLS record header, then nothing
        assert closed_within(sock, 5)
    assert time.monotonic() - started < 4
    assert wait_until(lambda: tls_proxy.metric(ERRORS, TLS) == 1, timeout=5)
    assert any("taking longer than 0.5 seconds" in line for line in tls_lines(caplog))


def test_a_flood_of_bad_handshakes_is_counted_but_not_logged_line_by_line(tls_proxy, caplog):
    for _ in range(30):
        with socket.create_connection(("127.0.0.1", tls_proxy.port), timeout=5) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
            assert closed_within(sock, 5)
    assert wait_until(lambda: tls_proxy.metric(ERRORS, TLS) == 30, timeout=10)
    assert 1 <= len(tls_lines(caplog)) <= 2, tls_lines(caplog)


class TlsRawClient(RawClient):
    """RawClient over TLS."""

    def __init__(self, port: int, ctx: ssl.SSLContext):
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        self._ids = itertools.count(1)


def test_good_clients_are_served_while_bad_ones_fail(tls_proxy, certs):
    """A stalled handshake holds nobody up, and a good client is served as before."""
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection(("127.0.0.1", tls_proxy.port), timeout=5) as stalled:
        stalled.sendall(b"\x16\x03")
        with TlsRawClient(tls_proxy.port, ctx) as client:
            answer = client.request(metadata_request("t"))
            assert [t.name for t in answer.topics] == ["t"]
    assert tls_proxy.metric(ERRORS, TLS) == 0
