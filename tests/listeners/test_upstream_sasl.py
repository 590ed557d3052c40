"""The proxy's own SASL login to the cluster, against the scripted upstream (no Java): the
login comes first on every upstream connection, carries the proxy's credentials (never a
client's), and the connection it produced keeps working for the client's whole session."""

from __future__ import annotations

import gc

import pytest
from kio.schema.errors import ErrorCode

from aclgate.protocol.versions import response_class
from tests.fixtures.rawclient import RawClient
from tests.fixtures.scripted_broker import _defaults, encode_response
from tests.listeners.conftest import sasl_listener
from tests.listeners.util import metadata_request, password, sasl_login, unique

SERVICE_PASSWORD = "service-" + unique("pw")


def accept_plain(node, header, request):
    """SaslHandshake / SaslAuthenticate answers of a PLAIN-only broker, remembering tokens."""
    if header.api_key == 17:
        body = _defaults(response_class(17, header.api_version), mechanisms=("PLAIN",))
    else:
        node.tokens = [*getattr(node, "tokens", []), bytes(request.auth_bytes)]
        body = _defaults(response_class(36, header.api_version), auth_bytes=b"")
    return encode_response(header.correlation_id, body)


@pytest.fixture
def sasl_upstream(scripted, proxy_factory, users_file, tmp_path):
    for node in scripted.nodes:
        node.script[17] = node.script[36] = accept_plain
    secret = tmp_path / "service-password"
    secret.write_text(SERVICE_PASSWORD + "\n")
    proxy = proxy_factory(
        scripted.bootstrap,
        **sasl_listener(users_file, mechanisms="SCRAM-SHA-512"),
        upstream_security_protocol="SASL_PLAINTEXT",
        upstream_sasl_mechanism="PLAIN",
        upstream_sasl_username="aclgate-svc",
        upstream_sasl_password_file=secret,
    )
    return proxy, scripted.nodes[0]


def test_upstream_connection_survives_garbage_collection(sasl_upstream):
    """The login runs on asyncio streams; the StreamWriter closes its transport when it is
    collected, so the proxy must keep it alive with the connection it handed over."""
    proxy, _node = sasl_upstream
    topic = unique("gc")
    with RawClient(proxy.bootstrap) as raw:
        assert sasl_login(raw, "SCRAM-SHA-512", "alice", password("alice")).error_code == 0
        for _ in range(3):
            assert raw.request(metadata_request(topic)).topics[0].error_code == ErrorCode.none
            proxy.run(gc.collect)
    assert proxy.metric("aclgate_errors_total", {"kind": "upstream_closed"}) == 0


def test_proxy_logs_in_first_with_its_own_credentials(sasl_upstream):
    proxy, node = sasl_upstream
    before = len(node.requests)
    topic = unique("login")
    with RawClient(proxy.bootstrap) as raw:
        assert sasl_login(raw, "SCRAM-SHA-512", "alice", password("alice")).error_code == 0
        assert raw.request(metadata_request(topic)).topics[0].error_code == ErrorCode.none
    keys = [h.api_key for h, _ in node.requests[before:]]
    assert keys[:3] == [17, 36, 3]  # handshake, authenticate, then the client's Metadata
    assert node.tokens[-1] == f"\x00aclgate-svc\x00{SERVICE_PASSWORD}".encode()
    assert not any(b"alice" in t for t in node.tokens)
