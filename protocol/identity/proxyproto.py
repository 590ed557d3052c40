"""PROXY protocol v1 (text) and v2 (binary) header parsing, sans-IO.

A load balancer in front of the proxy prepends one such header to each TCP connection so that
ACL host checks and audit events see the real client address instead of the balancer's. The
parser is strict (limits from the HAProxy specification) and never trusts a length it has not
bounded; it is only ever applied to connections from trusted sources (see `is_trusted`).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "V1_MAX_LENGTH",
    "V2_SIGNATURE",
    "NeedMore",
    "ProxyHeader",
    "ProxyProtocolError",
    "has_proxy_signature",
    "is_trusted",
    "parse_proxy_header",
    "parse_trusted_cidrs",
]

V1_PREFIX = b"PROXY "
V1_MAX_LENGTH = 107  # "PROXY TCP6 <39> <39> <5> <5>\r\n", from the specification
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_HEADER = struct.Struct(">12sBBH")
V2_DEFAULT_MAX_LENGTH = 4096  # address block + TLVs; real balancers send a few hundred bytes

_V2_ADDRESS_SIZES = {0x1: 12, 0x2: 36, 0x3: 216}  # INET, INET6, UNIX
_V2_INET = struct.Struct(">4s4sHH")
_V2_INET6 = struct.Struct(">16s16sHH")
_V2_IP_FAMILIES = {
    0x1: ("TCP4", _V2_INET, ipaddress.IPv4Address),
    0x2: ("TCP6", _V2_INET6, ipaddress.IPv6Address),
}


class ProxyProtocolError(ValueError):
    """The bytes are not a valid PROXY protocol header: close the connection."""


@dataclass(frozen=True, slots=True)
class NeedMore:
    """The header is incomplete: read at least `needed` bytes in total, then parse again."""

    needed: int


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    """A parsed header. Addresses are None for LOCAL, UNKNOWN and non-IP families."""

    version: int  # 1 or 2
    command: str  # "PROXY" or "LOCAL" (v1 is always PROXY)
    family: str  # "TCP4", "TCP6" or "UNKNOWN"
    src_addr: str | None
    src_port: int | None
    dst_addr: str | None
    dst_port: int | None
    consumed: int  # bytes of the header; what follows belongs to the Kafka stream
    tlvs: tuple[tuple[int, bytes], ...] = ()

    def effective_source(self, peer: tuple[str, int]) -> tuple[str, int]:
        """The client address to use for ACLs and audit: the header's, or the TCP peer's."""
        if self.command == "PROXY" and self.src_addr is not None and self.src_port is not None:
            return self.src_addr, self.src_port
        return peer


def has_proxy_signature(buf: bytes | bytearray | memoryview) -> bool:
    """Whether a connection starts with a PROXY header (v1 or v2): from an untrusted peer,
    or on a listener without --proxy-protocol, such a connection is refused."""
    head = bytes(buf[: len(V2_SIGNATURE)])
    return head.startswith(V1_PREFIX) or head == V2_SIGNATURE


def parse_proxy_header(
    buf: bytes | bytearray | memoryview, *, max_v2_length: int = V2_DEFAULT_MAX_LENGTH
) -> ProxyHeader | NeedMore:
    """Parse the PROXY header at the start of `buf` (v1 or v2, detected by signature)."""
    data = bytes(buf[: V1_MAX_LENGTH + 16 + max_v2_length])
    if not data:
        return NeedMore(1)
    if data[0] == V2_SIGNATURE[0]:
        return _parse_v2(data, max_v2_length)
    if data[0] == V1_PREFIX[0]:
        return _parse_v1(data)
    raise ProxyProtocolError("no PROXY protocol header")


def _parse_v1(data: bytes) -> ProxyHeader | NeedMore:
    head = data[: len(V1_PREFIX)]
    if not V1_PREFIX.startswith(head):
        raise ProxyProtocolError("no PROXY protocol header")
    end = data.find(b"\r\n", 0, V1_MAX_LENGTH)
    if end < 0:
        if b"\n" in data[:V1_MAX_LENGTH] or len(data) >= V1_MAX_LENGTH:
            raise ProxyProtocolError("PROXY v1 header is not terminated by CRLF within 107 bytes")
        return NeedMore(len(data) + 1)
    line = data[:end]
    if any(b < 0x20 or b > 0x7E for b in line):
        raise ProxyProtocolError("PROXY v1 header contains non-printable bytes")
    text = line.decode("ascii")
    parts = text.split(" ")
    consumed = end + 2
    if len(parts) >= 2 and parts[1] == "UNKNOWN":
        # The specification says a receiver must ignore everything after UNKNOWN.
        return ProxyHeader(1, "PROXY", "UNKNOWN", None, None, None, None, consumed)
    if len(parts) != 6:
        raise ProxyProtocolError(f"malformed PROXY v1 header: {text!r}")
    _, family, src, dst, sport, dport = parts
    if family == "TCP4":
        cls: type[ipaddress.IPv4Address | ipaddress.IPv6Address] = ipaddress.IPv4Address
    elif family == "TCP6":
        cls = ipaddress.IPv6Address
    else:
        raise ProxyProtocolError(f"unknown PROXY v1 protocol family {family!r}")
    try:
        src_ip, dst_ip = cls(src), cls(dst)
    except ValueError as e:
        raise ProxyProtocolError(f"invalid {family} address in PROXY v1 header: {e}") from None
    return ProxyHeader(
        1,
        "PROXY",
        family,
        str(src_ip),
        _v1_port(sport),
        str(dst_ip),
        _v1_port(dport),
        consumed,
    )


def _v1_port(text: str) -> int:
    if not (1 <= len(text) <= 5 and text.isascii() and text.isdigit()) or (
        len(text) > 1 and text[0] == "0"
    ):
        raise ProxyProtocolError(f"invalid port {text!r} in PROXY v1 header")
    port = int(text)
    if port > 65535:
        raise ProxyProtocolError(f"invalid port {text!r} in PROXY v1 header")
    return port


def _parse_v2(data: bytes, max_length: int) -> ProxyHeader | NeedMore:
    sig = data[: len(V2_SIGNATURE)]
    if not V2_SIGNATURE.startswith(sig):
        raise ProxyProtocolError("no PROXY protocol header")
    if len(data) < V2_HEADER.size:
        return NeedMore(V2_HEADER.size)
    _, ver_cmd, fam, length = V2_HEADER.unpack_from(data)
    if ver_cmd >> 4 != 2:
        raise ProxyProtocolError(f"unsupported PROXY protocol version {ver_cmd >> 4}")
    command = ver_cmd & 0xF
    if command not in (0, 1):
        raise ProxyProtocolError(f"unknown PROXY v2 command {command}")
    if length > max_length:
        raise ProxyProtocolError(f"PROXY v2 header too long: {length} > {max_length} bytes")
    af, transport = fam >> 4, fam & 0xF
    if af > 3 or transport > 2:
        raise ProxyProtocolError(f"unknown PROXY v2 address family/transport 0x{fam:02x}")
    total = V2_HEADER.size + length
    if len(data) < total:
        return NeedMore(total)
    body = data[V2_HEADER.size : total]
    if command == 0:  # LOCAL: health checks from the balancer itself; addresses are ignored
        return ProxyHeader(2, "LOCAL", "UNKNOWN", None, None, None, None, total)
    if transport == 2:
        raise ProxyProtocolError("PROXY v2 header announces a datagram (UDP) connection")
    addr_len = _V2_ADDRESS_SIZES.get(af, 0)
    if length < addr_len:
        raise ProxyProtocolError(f"PROXY v2 address block truncated: {length} < {addr_len} bytes")
    tlvs = _parse_tlvs(body[addr_len:])
    if transport == 1 and af in _V2_IP_FAMILIES:
        family, layout, cls = _V2_IP_FAMILIES[af]
        s, d, sp, dp = layout.unpack_from(body)
        return ProxyHeader(2, "PROXY", family, str(cls(s)), sp, str(cls(d)), dp, total, tlvs)
    # AF_UNSPEC or AF_UNIX: no IP address; the receiver uses the real connection's.
    return ProxyHeader(2, "PROXY", "UNKNOWN", None, None, None, None, total, tlvs)


def _parse_tlvs(data: bytes) -> tuple[tuple[int, bytes], ...]:
    out = []
    off = 0
    while off < len(data):
        if len(data) - off < 3:
            raise ProxyProtocolError("truncated TLV in PROXY v2 header")
        kind, size = data[off], int.from_bytes(data[off + 1 : off + 3], "big")
        off += 3
        if size > len(data) - off:
            raise ProxyProtocolError("TLV overruns the PROXY v2 header")
        out.append((kind, data[off : off + size]))
        off += size
    return tuple(out)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_trusted_cidrs(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """Parse `--proxy-protocol-trusted` values once; a bare address means a /32 or /128."""
    out = []
    for c in cidrs:
        try:
            out.append(ipaddress.ip_network(c.strip(), strict=False))
        except ValueError as e:
            raise ValueError(f"invalid trusted address or CIDR {c!r}: {e}") from None
    return tuple(out)


def is_trusted(peer_ip: str, cidrs: Iterable[str | Network]) -> bool:
    """Whether a TCP peer may send a PROXY header (IPv4-mapped IPv6 peers count as IPv4)."""
    try:
        addr = ipaddress.ip_address(peer_ip.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    for c in cidrs:
        net = c if isinstance(c, Network) else ipaddress.ip_network(c.strip(), strict=False)
        if addr.version == net.version and addr in net:
            return True
    return False
