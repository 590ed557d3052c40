"""PROXY protocol v1/v2 parsing (HAProxy specification examples), fuzzing, trust, Java hosts."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aclgate.protocol.identity.hosts import java_host_string
from aclgate.protocol.identity.proxyproto import (
    V2_SIGNATURE,
    NeedMore,
    ProxyHeader,
    ProxyProtocolError,
    has_proxy_signature,
    is_trusted,
    parse_proxy_header,
    parse_trusted_cidrs,
)

FFFF6 = ":".join(["ffff"] * 8)


@pytest.mark.parametrize(
    ("line", "family", "src", "dst", "sport", "dport"),
    [
        (
            b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n",
            "TCP4",
            "192.168.0.1",
            "192.168.0.11",
            56324,
            443,
        ),
        (
            b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n",
            "TCP4",
            "255.255.255.255",
            "255.255.255.255",
            65535,
            65535,
        ),
        (
            f"PROXY TCP6 {FFFF6} {FFFF6} 65535 65535\r\n".encode(),
            "TCP6",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            65535,
            65535,
        ),
        (b"PROXY TCP6 2001:db8::1 ::1 0 9092\r\n", "TCP6", "2001:db8::1", "::1", 0, 9092),
    ],
)
def test_v1(line, family, src, dst, sport, dport) -> None:
    h = parse_proxy_header(line + b"\x00\x00\x00\x10kafka")
    assert isinstance(h, ProxyHeader)
    assert (h.version, h.command, h.family, h.src_addr, h.dst_addr, h.src_port, h.dst_port) == (
        1,
        "PROXY",
        family,
        src,
        dst,
        sport,
        dport,
    )
    assert h.consumed == len(line)
    assert h.effective_source(("10.0.0.1", 1)) == (src, sport)


def test_v1_unknown_and_longest() -> None:
    h = parse_proxy_header(b"PROXY UNKNOWN\r\n")
    assert isinstance(h, ProxyHeader) and h.family == "UNKNOWN" and h.consumed == 15
    assert h.effective_source(("10.0.0.1", 5)) == ("10.0.0.1", 5)
    longest = f"PROXY UNKNOWN {FFFF6} {FFFF6} 65535 65535\r\n".encode()
    assert len(longest) == 107
    h = parse_proxy_header(longest)
    assert isinstance(h, ProxyHeader) and h.consumed == 107


@pytest.mark.parametrize(
    "line",
    [
        b"PROXY TCP4 1.2.3.4 5.6.7.8 80\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 80 443 x\r\n",
        b"PROXY TCP4 ::1 5.6.7.8 80 443\r\n",
        b"PROXY TCP6 1.2.3.4 ::1 80 443\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 080 443\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 443\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 443\r\n",
        b"PROXY TCP4 01.2.3.4 5.6.7.8 1 443\r\n",
        b"PROXY TCP4  1.2.3.4 5.6.7.8 1 443\r\n",
        b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
        b"PROXY TCP4 1.2.3.4\x00 5.6.7.8 1 2\r\n",
        b"PROXY " + b"A" * 120,
        b"GET / HTTP/1.1\r\n",
        b"\x00\x00\x00\x10",
    ],
)
def test_v1_errors(line) -> None:
    with pytest.raises(ProxyProtocolError):
        parse_proxy_header(line)


@pytest.mark.parametrize(
    "prefix", [b"P", b"PROXY", b"PROXY TCP4 1.2.3.4 5.6", b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r"]
)
def test_v1_incomplete(prefix) -> None:
    assert isinstance(parse_proxy_header(prefix), NeedMore)


def v2(ver_cmd: int, fam: int, body: bytes) -> bytes:
    return V2_SIGNATURE + struct.pack(">BBH", ver_cmd, fam, len(body)) + body


def test_v2_tcp4_with_tlvs() -> None:
    addr = (
        ipaddress.IPv4Address("10.1.2.3").packed
        + ipaddress.IPv4Address("10.0.0.9").packed
        + struct.pack(">HH", 51000, 9092)
    )
    tlvs = bytes([0x02, 0, 4]) + b"host" + bytes([0x04, 0, 0])  # AUTHORITY, NOOP
    h = parse_proxy_header(v2(0x21, 0x11, addr + tlvs) + b"rest")
    assert isinstance(h, ProxyHeader)
    assert (h.version, h.command, h.family, h.src_addr, h.src_port, h.dst_addr, h.dst_port) == (
        2,
        "PROXY",
        "TCP4",
        "10.1.2.3",
        51000,
        "10.0.0.9",
        9092,
    )
    assert h.tlvs == ((2, b"host"), (4, b""))
    assert h.consumed == 16 + 12 + len(tlvs)


def test_v2_tcp6_local_unspec_unix() -> None:
    addr = (
        ipaddress.IPv6Address("2001:db8::7").packed
        + ipaddress.IPv6Address("::1").packed
        + struct.pack(">HH", 1, 2)
    )
    h = parse_proxy_header(v2(0x21, 0x21, addr))
    assert isinstance(h, ProxyHeader) and h.family == "TCP6" and h.src_addr == "2001:db8::7"
    h = parse_proxy_header(v2(0x20, 0x00, b""))  # LOCAL: a health check by the balancer
    assert isinstance(h, ProxyHeader) and h.command == "LOCAL" and h.consumed == 16
    assert h.effective_source(("10.9.9.9", 7)) == ("10.9.9.9", 7)
    h = parse_proxy_header(v2(0x21, 0x00, b"\x01\x00\x01x"))  # PROXY + UNSPEC with a TLV
    assert isinstance(h, ProxyHeader) and h.family == "UNKNOWN" and h.src_addr is None
    h = parse_proxy_header(v2(0x21, 0x31, b"\x00" * 216))  # AF_UNIX
    assert isinstance(h, ProxyHeader) and h.family == "UNKNOWN"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (v2(0x11, 0x11, b"\x00" * 12), "version"),
        (v2(0x22, 0x11, b"\x00" * 12), "command"),
        (v2(0x21, 0x11, b"\x00" * 11), "truncated"),
        (v2(0x21, 0x12, b"\x00" * 12), "datagram"),
        (v2(0x21, 0x41, b"\x00" * 12), "family"),
        (v2(0x21, 0x11, b"\x00" * 12 + b"\x01\x00\x05ab"), "overruns"),
        (v2(0x21, 0x11, b"\x00" * 12 + b"\x01\x00"), "truncated TLV"),
        (V2_SIGNATURE[:11] + b"X" + b"\x21\x11\x00\x00", "no PROXY"),
        (V2_SIGNATURE + b"\x21\x11\xff\xff", "too long"),
    ],
)
def test_v2_errors(data, message) -> None:
    with pytest.raises(ProxyProtocolError, match=message):
        parse_proxy_header(data)


def test_v2_incomplete() -> None:
    full = v2(0x21, 0x11, b"\x00" * 12)
    for n in range(len(full)):
        r = parse_proxy_header(full[:n])
        assert isinstance(r, NeedMore) and r.needed > n
    assert parse_proxy_header(full[:16]) == NeedMore(28)


@settings(max_examples=1500, deadline=None)
@given(
    st.binary(max_size=300)
    | st.builds(lambda rest: V2_SIGNATURE + rest, st.binary(max_size=300))
    | st.builds(lambda rest: b"PROXY " + rest, st.binary(max_size=200))
)
def test_fuzz_never_crashes(data) -> None:
    try:
        r = parse_proxy_header(data)
    except ProxyProtocolError:
        return
    if isinstance(r, ProxyHeader):
        assert 0 < r.consumed <= len(data)
    else:
        assert isinstance(r, NeedMore) and r.needed > len(data)


@settings(max_examples=300, deadline=None)
@given(st.ip_addresses(v=4), st.ip_addresses(v=4), st.integers(0, 65535), st.integers(0, 65535))
def test_v1_v2_agree(src, dst, sport, dport) -> None:
    line = f"PROXY TCP4 {src} {dst} {sport} {dport}\r\n".encode()
    binary = v2(0x21, 0x11, src.packed + dst.packed + struct.pack(">HH", sport, dport))
    a, b = parse_proxy_header(line), parse_proxy_header(binary)
    assert isinstance(a, ProxyHeader) and isinstance(b, ProxyHeader)
    assert (a.src_addr, a.src_port, a.dst_addr, a.dst_port) == (
        b.src_addr,
        b.src_port,
        b.dst_addr,
        b.dst_port,
    )


def test_trust() -> None:
    nets = parse_trusted_cidrs(["10.0.0.0/8", "192.168.1.7", "fd00::/8"])
    assert is_trusted("10.2.3.4", nets)
    assert is_trusted("::ffff:10.2.3.4", nets)  # IPv4-mapped peer
    assert is_trusted("192.168.1.7", nets) and not is_trusted("192.168.1.8", nets)
    assert is_trusted("fd12::1", nets) and not is_trusted("fe80::1%eth0", nets)
    assert not is_trusted("11.0.0.1", nets) and not is_trusted("garbage", nets)
    assert is_trusted("127.0.0.1", ["127.0.0.0/8"])
    assert not is_trusted("127.0.0.1", [])
    with pytest.raises(ValueError, match="invalid trusted address"):
        parse_trusted_cidrs(["10.0.0.0/33"])


@pytest.mark.parametrize(
    ("ip", "java"),
    [
        ("192.168.1.1", "192.168.1.1"),
        ("::1", "0:0:0:0:0:0:0:1"),
        ("2001:db8::1", "2001:db8:0:0:0:0:0:1"),
        ("2001:0DB8:0000:0000:0000:ff00:0042:8329", "2001:db8:0:0:0:ff00:42:8329"),
        ("::", "0:0:0:0:0:0:0:0"),
        ("::ffff:10.1.2.3", "10.1.2.3"),
        ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1%eth0"),
    ],
)
def test_java_host_string(oracle, ip, java) -> None:
    assert java_host_string(ip) == java
    if "%" not in ip:
        assert oracle.ask("host", ip) == java


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.ip_addresses())
def test_java_host_string_matches_java(oracle, ip) -> None:
    assert java_host_string(str(ip)) == oracle.ask("host", str(ip))


def test_has_proxy_signature() -> None:
    assert has_proxy_signature(b"PROXY TCP4 ")
    assert has_proxy_signature(V2_SIGNATURE + b"\x21")
    assert not has_proxy_signature(b"\x00\x00\x00\x2a\x00\x12")  # a Kafka ApiVersions frame
    assert not has_proxy_signature(V2_SIGNATURE[:8])
