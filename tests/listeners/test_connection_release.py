"""A closed client connection is freed at once, by reference counting (issue 15, soak).

A ClientConnection and its ProxySession point at each other. While that cycle stood, every
closed connection waited for the cyclic garbage collector, which `aclgate serve` runs rarely
(proxy/process/gctune.py tune_gc: gen-0 threshold 20,000), and a closed TLS connection holds about
250 KB of C memory until then (uvloop's 256 KB TLS read buffer, OpenSSL's state). A client
reconnecting over TLS in a loop left hundreds of them waiting between collections; the heap
they fragmented was never given back: +99.5 MB of RSS after 10,000 connections
(docs/bench.md, Connection churn). connection_lost now breaks the cycle.

The in-process tests disable the collector and count the ClientConnection and ProxySession
objects left once the connections are closed, on every listener kind and close path: with a
cycle they stay until a collection. The last test churns 1,000 TLS connections through a real
`aclgate serve` and bounds the growth of its RSS.
"""

from __future__ import annotations

import gc
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator

import pytest

from aclgate.protocol.session import ProxySession
from aclgate.proxy.listen.connection import ClientConnection
from tests.fixtures.rawclient import RawClient
from tests.fixtures.tansu import tansu  # noqa: F401  (fixture)
from tests.fixtures.wait import wait_until
from tests.listeners.conftest import Pki, sasl_listener
from tests.listeners.util import MAPPING_RULES, metadata_request, password, sasl_login

#: connections per case: enough that a leak per connection cannot hide in a stray object
CONNECTIONS = 20
MiB = 1024 * 1024


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The cyclic collector off for the test: only reference counting frees objects."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _live(proxy) -> tuple[int, int]:
    """(ClientConnection, ProxySession) objects alive, counted on the proxy's loop thread."""

    def count() -> tuple[int, int]:
        objects = gc.get_objects()
        return (
            sum(isinstance(o, ClientConnection) for o in objects),
            sum(isinstance(o, ProxySession) for o in objects),
        )

    return proxy.run(count)


def _holders(proxy) -> list[str]:
    """What still refers to the ClientConnection objects left (for the failure message)."""

    def describe() -> list[str]:
        conns = [o for o in gc.get_objects() if isinstance(o, ClientConnection)]
        holders = (r for c in conns for r in gc.get_referrers(c) if r is not conns)
        return sorted({f"{type(r).__name__} {str(r)[:120]}" for r in holders})[:5]

    return proxy.run(describe)


def _tls(raw: RawClient, certs: Pki, client: str | None = None) -> RawClient:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    if client is not None:
        ctx.load_cert_chain(*map(str, certs.client(client)))
    raw.sock = ctx.wrap_socket(raw.sock, server_hostname="127.0.0.1")
    return raw


def _metadata(raw: RawClient) -> None:
    """A forwarded request: the connection opens its upstream connection too."""
    assert raw.request(metadata_request()).brokers


def _handshake_only(raw: RawClient, certs: Pki, users: object) -> None:
    _tls(raw, certs).sock.getpeercert()


def _tls_request(raw: RawClient, certs: Pki, users: object) -> None:
    _metadata(_tls(raw, certs))


def _mtls_request(raw: RawClient, certs: Pki, users: object) -> None:
    _metadata(_tls(raw, certs, "alice"))  # counted against User:alice meanwhile


def _plaintext_request(raw: RawClient, certs: Pki, users: object) -> None:
    _metadata(raw)


def _sasl_request(raw: RawClient, certs: Pki, users: object) -> None:
    assert sasl_login(raw, "PLAIN", "alice", password("alice")).error_code == 0
    _metadata(raw)


def _closed_by_proxy(raw: RawClient, certs: Pki, users: object) -> None:
    """A frame over the size limit: the proxy closes the connection itself (close())."""
    raw.send_raw(struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 8)
    assert raw.is_closed_by_peer(5)


CASES: dict[str, tuple[Callable[..., dict], Callable[[RawClient, Pki, object], None]]] = {
    "plaintext, a request": (lambda certs, users: {}, _plaintext_request),
    "plaintext, closed by the proxy": (lambda certs, users: {}, _closed_by_proxy),
    "SSL, handshake only": (lambda certs, users: certs.listener(), _handshake_only),
    "SSL, a request": (lambda certs, users: certs.listener(), _tls_request),
    "SSL, mTLS principal": (
        lambda certs, users: certs.listener(
            "required", ssl_principal_mapping_rules=MAPPING_RULES, max_connections_per_principal=5
        ),
        _mtls_request,
    ),
    "SASL_PLAINTEXT, PLAIN login and a request": (
        lambda certs, users: sasl_listener(users),
        _sasl_request,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_closed_connections_are_freed_without_the_collector(
    case, no_collector, scripted, proxy_factory, certs, users_file
):
    listener, client = CASES[case]
    # a sweep of the timeout checker every 50 ms: it sees the connections while they are open
    proxy = proxy_factory(
        scripted.bootstrap, partial_request_timeout_ms=200, **listener(certs, users_file)
    )
    before = _live(proxy)
    for _ in range(CONNECTIONS):
        with RawClient(proxy.bootstrap) as raw:
            client(raw, certs, users_file)
    wait_until(lambda: not proxy.server.connections, timeout=10, what="every connection closed")
    time.sleep(0.2)  # sweeps that find nothing open
    try:
        wait_until(lambda: _live(proxy) == before, timeout=3)
    except AssertionError:
        connections, sessions = (a - b for a, b in zip(_live(proxy), before, strict=True))
        pytest.fail(
            f"{connections} ClientConnection and {sessions} ProxySession objects of "
            f"{CONNECTIONS} closed connections are alive (a reference cycle waits for the "
            f"cyclic garbage collector, or something holds them): {_holders(proxy)}"
        )


@pytest.mark.slow
def test_tls_connection_churn_gives_memory_back(tansu, proxy_process, certs):  # noqa: F811
    """1,000 TLS connections opened and closed (bench/connection_churn.py in small): the RSS
    of `aclgate serve` grew +35 MB with the cycle (+99.5 MB after 10,000), +0.1 MB without."""
    proxy = proxy_process(
        *("--upstream", tansu.bootstrap, "--listen", "127.0.0.1:0"),
        "--allow-everyone-if-no-acl-found",
        *("--listener-security-protocol", "SSL"),
        *("--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.server_key)),
    )
    ctx = ssl.create_default_context(cafile=str(certs.ca))

    def churn(count: int) -> None:
        for _ in range(count):
            with (
                socket.create_connection(("127.0.0.1", proxy.bootstrap_port), timeout=10) as raw,
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
            ):
                tls.getpeercert()

    churn(50)  # first-use allocations (code paths, allocator pools) out of the figure
    time.sleep(0.5)
    before = proxy.rss_bytes()
    churn(1_000)
    time.sleep(0.5)
    grown = proxy.rss_bytes() - before
    assert grown < 8 * MiB, f"RSS grew {grown / MiB:.1f} MB over 1,000 closed TLS connections"
