"""PROXY protocol v1 and v2 on a client listener: the header's source address is the host
that ACLs and audit events see; a header from an untrusted peer, or no header from a trusted
one, is refused before anything reaches the cluster."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from kio.schema.errors import ErrorCode

from tests.fixtures.rawclient import RawClient
from tests.listeners.conftest import sasl_listener
from tests.listeners.util import (
    acl,
    metadata_request,
    password,
    read_audit,
    sasl_login,
    unique,
    write_acls,
)

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def header_v1(src: str, src_port: int = 40000, dst: str | None = None, dst_port: int = 9092):
    family = "TCP6" if ":" in src else "TCP4"
    dst = dst or ("::1" if family == "TCP6" else "127.0.0.1")
    return f"PROXY {family} {src} {dst} {src_port} {dst_port}\r\n".encode()


def header_v2(src: str, src_port: int = 40000, dst: str | None = None, dst_port: int = 9092):
    s = ipaddress.ip_address(src)
    d = ipaddress.ip_address(dst or ("::1" if s.version == 6 else "127.0.0.1"))
    family = 0x21 if s.version == 6 else 0x11  # TCP over IPv6 / IPv4
    addresses = s.packed + d.packed + struct.pack(">HH", src_port, dst_port)
    return V2_SIGNATURE + bytes([0x21, family]) + struct.pack(">H", len(addresses)) + addresses


HEADERS = {"v1": header_v1, "v2": header_v2}


@pytest.fixture
def behind_lb(scripted, proxy_factory, tmp_path):
    """A proxy that trusts 127.0.0.1 to send PROXY headers; only 10.1.2.3 may describe the
    topic (host-specific ACL). Returns (proxy, topic, audit file)."""
    topic = unique("pp")
    audit = tmp_path / "audit.jsonl"
    proxy = proxy_factory(
        scripted.bootstrap,
        proxy_protocol=True,
        proxy_protocol_trusted=["127.0.0.1/32"],
        allow_everyone_if_no_acl_found=False,
        acl_file=write_acls(
            tmp_path / "acls.json",
            acl("User:ANONYMOUS", "DESCRIBE", topic, host="10.1.2.3"),
            acl("User:ANONYMOUS", "DESCRIBE", topic, host="2001:db8:0:0:0:0:0:7"),
        ),
        audit_file=audit,
    )
    return proxy, topic, audit


def describe(proxy, header: bytes, topic: str, split: bool = False) -> ErrorCode:
    with RawClient(proxy.bootstrap) as raw:
        if split:  # the header may arrive in pieces
            for i in range(0, len(header), 5):
                raw.send_raw(header[i : i + 5])
        else:
            raw.send_raw(header)
        response = raw.request(metadata_request(topic))
        return response.topics[0].error_code


@pytest.mark.parametrize("version", HEADERS)
def test_host_acl_decides_on_the_address_in_the_header(behind_lb, version):
    proxy, topic, audit = behind_lb
    make = HEADERS[version]
    assert describe(proxy, make("10.1.2.3"), topic) == ErrorCode.none
    assert describe(proxy, make("10.1.2.3"), topic, split=True) == ErrorCode.none
    assert describe(proxy, make("10.9.9.9"), topic) == ErrorCode.topic_authorization_failed
    # IPv6: the ACL host is Java's spelling of the address, and so is the audit host
    assert describe(proxy, make("2001:db8::7"), topic) == ErrorCode.none
    assert describe(proxy, make("2001:db8::8"), topic) == ErrorCode.topic_authorization_failed

    events = [e for e in read_audit(proxy, audit) if e["resource_name"] == topic]
    seen = {(e["host"], e["decision"]) for e in events}
    assert seen == {
        ("10.1.2.3", "ALLOWED"),
        ("10.9.9.9", "DENIED"),
        ("2001:db8:0:0:0:0:0:7", "ALLOWED"),
        ("2001:db8:0:0:0:0:0:8", "DENIED"),
    }


@pytest.mark.parametrize("version", HEADERS)
def test_header_from_an_untrusted_peer_is_refused(scripted, proxy_factory, version):
    proxy = proxy_factory(
        scripted.bootstrap, proxy_protocol=True, proxy_protocol_trusted=["10.0.0.0/8"]
    )
    before = len(scripted.nodes[0].requests)
    with RawClient(proxy.bootstrap) as raw:
        raw.send_raw(HEADERS[version]("10.1.2.3"))
        raw.send(metadata_request("t"))
        assert raw.recv_frame() is None  # closed, no answer
    assert scripted.nodes[0].requests[before:] == []
    assert proxy.metric("aclgate_errors_total", {"kind": "proxy_protocol"}) == 1


def test_header_on_a_listener_without_proxy_protocol_is_refused(scripted, proxy_factory):
    proxy = proxy_factory(scripted.bootstrap)
    before = len(scripted.nodes[0].requests)
    with RawClient(proxy.bootstrap) as raw:
        raw.send_raw(header_v1("10.1.2.3"))
        raw.send(metadata_request("t"))
        assert raw.recv_frame() is None
    assert scripted.nodes[0].requests[before:] == []


def test_trusted_peer_without_a_header_is_refused(scripted, proxy_factory):
    proxy = proxy_factory(
        scripted.bootstrap, proxy_protocol=True, proxy_protocol_trusted=["127.0.0.1/32"]
    )
    before = len(scripted.nodes[0].requests)
    with RawClient(proxy.bootstrap) as raw:
        raw.send(metadata_request("t"))
        assert raw.recv_frame() is None
    assert scripted.nodes[0].requests[before:] == []
    assert proxy.metric("aclgate_errors_total", {"kind": "proxy_protocol"}) == 1


def test_proxy_header_then_sasl_principal_and_header_host(
    scripted, proxy_factory, users_file, tmp_path
):
    """Behind a load balancer on a SASL listener: the principal comes from SASL, the host
    from the header."""
    topic = unique("pp-sasl")
    audit = tmp_path / "audit.jsonl"
    proxy = proxy_factory(
        scripted.bootstrap,
        **sasl_listener(users_file, mechanisms="SCRAM-SHA-512"),
        proxy_protocol=True,
        proxy_protocol_trusted=["127.0.0.0/8"],
        allow_everyone_if_no_acl_found=False,
        acl_file=write_acls(
            tmp_path / "acls.json", acl("User:alice", "DESCRIBE", topic, host="10.1.2.3")
        ),
        audit_file=audit,
    )
    for user, source, expected in [
        ("alice", "10.1.2.3", ErrorCode.none),
        ("alice", "10.1.2.4", ErrorCode.topic_authorization_failed),
        ("bob", "10.1.2.3", ErrorCode.topic_authorization_failed),
    ]:
        with RawClient(proxy.bootstrap) as raw:
            raw.send_raw(header_v2(source))
            assert sasl_login(raw, "SCRAM-SHA-512", user, password(user)).error_code == 0
            assert raw.request(metadata_request(topic)).topics[0].error_code == expected
    seen = {(e["principal"], e["host"], e["decision"]) for e in read_audit(proxy, audit)}
    assert seen == {
        ("User:alice", "10.1.2.3", "ALLOWED"),
        ("User:alice", "10.1.2.4", "DENIED"),
        ("User:bob", "10.1.2.3", "DENIED"),
    }
