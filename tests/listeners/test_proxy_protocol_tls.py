"""PROXY protocol in front of TLS (a load balancer doing TLS passthrough): the header comes in
clear before the handshake; the proxy reads it off the socket, then does TLS. The header's
address is the host for ACLs and audit, and the certificate still gives the principal."""

from __future__ import annotations

import socket
import ssl
import struct

import pytest
from kio.schema.errors import ErrorCode

from aclgate.protocol.codec import decode_response, encode_request
from tests.listeners.test_proxy_protocol import header_v1, header_v2
from tests.listeners.util import acl, metadata_request, read_audit, unique, write_acls

_SIZE = struct.Struct(">i")


@pytest.fixture
def tls_behind_lb(scripted, proxy_factory, certs, tmp_path):
    topic = unique("tlspp")
    audit = tmp_path / "audit.jsonl"
    proxy = proxy_factory(
        scripted.bootstrap,
        **certs.listener(
            "required", ssl_principal_mapping_rules="RULE:^CN=([^,]+),.*$/$1/L,DEFAULT"
        ),
        proxy_protocol=True,
        proxy_protocol_trusted=["127.0.0.1/32"],
        allow_everyone_if_no_acl_found=False,
        acl_file=write_acls(
            tmp_path / "acls.json", acl("User:alice", "DESCRIBE", topic, host="10.9.8.7")
        ),
        audit_file=audit,
    )
    return proxy, topic, audit


def tls_request(proxy, certs, header: bytes | None, body, client: str = "alice"):
    """Open TCP, send the PROXY header in clear, then TLS with a client certificate."""
    host, port = proxy.bootstrap.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    cert, key = certs.client(client)
    ctx.load_cert_chain(str(cert), str(key))
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        if header:
            raw.sendall(header)
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(encode_request(7, body))
            size = _SIZE.unpack(_recv(tls, 4))[0]
            frame = _SIZE.pack(size) + _recv(tls, size)
    return decode_response(frame, body.__api_key__, body.__version__)


def _recv(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


@pytest.mark.parametrize("make", [header_v1, header_v2], ids=["v1", "v2"])
def test_header_before_tls_gives_the_host_and_the_certificate_gives_the_principal(
    tls_behind_lb, certs, make
):
    proxy, topic, audit = tls_behind_lb
    allowed = tls_request(proxy, certs, make("10.9.8.7"), metadata_request(topic))
    assert allowed.topics[0].error_code == ErrorCode.none
    denied = tls_request(proxy, certs, make("10.9.8.8"), metadata_request(topic))
    assert denied.topics[0].error_code == ErrorCode.topic_authorization_failed
    events = [e for e in read_audit(proxy, audit) if e["resource_name"] == topic]
    assert {(e["principal"], e["host"], e["decision"]) for e in events} >= {
        ("User:alice", "10.9.8.7", "ALLOWED"),
        ("User:alice", "10.9.8.8", "DENIED"),
    }


def test_trusted_peer_without_a_header_is_refused(tls_behind_lb, certs):
    proxy, topic, _ = tls_behind_lb
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_request(proxy, certs, None, metadata_request(topic))
    assert proxy.metric("aclgate_errors_total", {"kind": "proxy_protocol"}) >= 1


def test_untrusted_peer_sending_a_header_is_refused(scripted, proxy_factory, certs, tmp_path):
    proxy = proxy_factory(
        scripted.bootstrap,
        **certs.listener("none"),
        proxy_protocol=True,
        proxy_protocol_trusted=["10.0.0.0/8"],  # 127.0.0.1 is not trusted
    )
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_request(proxy, certs, header_v2("10.1.1.1"), metadata_request("t"))
    # an untrusted peer speaking plain TLS is served as usual
    ok = tls_request(proxy, certs, None, metadata_request("t"))
    assert ok.topics[0].error_code == ErrorCode.none
