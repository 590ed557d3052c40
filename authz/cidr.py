"""CIDR ACL hosts (KIP-1276), an opt-in extension (docs/authz.md, "CIDR hosts (KIP-1276, opt-in)").

KIP-1276 lets an ACL's host be a network, `10.0.0.0/8` or `2001:db8::/32`, besides `*` and one
address. Kafka 4.3.1 compares hosts as strings; trunk (4.4, metadata version 4.4-IV1) parses a
host that contains `/` with `CidrUtils`, which hands it to Apache commons-net 3.13: a host with
a `:` to `SubnetUtils6`, any other to `SubnetUtils`. This module reproduces those two parsers,
what `CreateAcls` refuses with `Invalid CIDR notation '<host>': <why>` (INVALID_REQUEST), and
their `isInRange`, how a client's address string (Java's `getHostAddress()`) is matched:

* IPv4: `a.b.c.d/n`, each part 1-3 ASCII digits (leading zeros read as decimal), octets
  0-255, the prefix 1-2 digits and 0-32.
* IPv6: what `InetAddress.getByName` reads as an IPv6 literal (brackets allowed; a numeric
  scope ignored), then `/` and a prefix 0-128 (`Integer.parseInt`: a sign is allowed). An
  IPv4-mapped address (`::ffff:10.0.0.0/104`) is refused: Java turns it into IPv4.
* Host bits may be set: `10.0.0.1/8` is the network 10.0.0.0/8 (both parsers mask them). The
  host string is kept as written, never rewritten.
* A client matches an IPv4 network only with a dotted IPv4 address (never 0.0.0.0, a
  commons-net rule), an IPv6 network only with an IPv6 address; an IPv4 client is never in an
  IPv6 network (`::/0` included). Anything else (a host name, garbage) matches no network.

Parsed networks and client addresses are cached (bounded): an ACL set holds few distinct CIDR
hosts, and a connection has one client address.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from functools import lru_cache

__all__ = [
    "CidrError",
    "Network",
    "client_address",
    "invalid_cidr_message",
    "network_of",
    "parse_network",
]

#: (IP version 4 or 6, prefix length, network address as an int with the host bits cleared)
Network = tuple[int, int, int]

# Java's \d is ASCII unless UNICODE_CHARACTER_CLASS: [0-9], never Python's Unicode \d
_IPV4_CIDR = re.compile(r"([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})/([0-9]{1,2})")
_IPV4 = re.compile(r"([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})")
_INT32 = (-(2**31), 2**31 - 1)


class CidrError(ValueError):
    """Not a network commons-net would accept; the message is its reason."""


def _range_check(value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise CidrError(f"Value [{value}] not in range [{low},{high}]")
    return value


def _parse_v4(host: str) -> Network:
    """commons-net `SubnetUtils(String)`: the whole text must match the pattern, then each
    octet and the prefix are range-checked, in that order."""
    m = _IPV4_CIDR.fullmatch(host)
    if m is None:
        raise CidrError(f"Could not parse [{host}]")
    address = 0
    for part in m.groups()[:4]:
        address = address << 8 | _range_check(int(part), 0, 255)
    prefix = _range_check(int(m.group(5)), 0, 32)
    return 4, prefix, address >> (32 - prefix) << (32 - prefix)


def _java_int(text: str) -> int | None:
    """`Integer.parseInt`: an optional sign, then decimal digits (any script's, as
    `Character.digit`), within 32 bits. Never int() of a long text: Python refuses more than
    4,300 digits with a ValueError."""
    sign = text[:1] if text[:1] in ("+", "-") else ""
    digits = text[len(sign) :]
    if not digits or not all(c.isdecimal() for c in digits):
        return None
    significant = "".join(str(unicodedata.decimal(c)) for c in digits).lstrip("0") or "0"
    if len(significant) > 10:
        return None
    value = int(sign + significant)
    return value if _INT32[0] <= value <= _INT32[1] else None


def _v6_literal(address: str, any_scope: bool = False) -> int | None:
    """The address `InetAddress.getByName` gives for an IPv6 literal, when it is an
    `Inet6Address`: one pair of brackets stripped, a numeric scope (`%3`) ignored. A named
    scope (`%eth0`) Java checks against the machine's interfaces: refused in an ACL, ignored
    in a client's address (`any_scope`; the connection came in on that interface)."""
    if address.startswith("[") and address.endswith("]"):
        address = address[1:-1]
    address, percent, scope = address.partition("%")
    if percent and not any_scope and not (scope.isascii() and scope.isdigit()):
        return None
    if address.count(":") < 2 or not address.isascii():
        return None
    try:
        parsed = ipaddress.IPv6Address(address)
    except ValueError:
        return None
    if parsed.ipv4_mapped is not None:
        return None  # Java makes an Inet4Address of it
    return int(parsed)


def _parse_v6(host: str) -> Network:
    """commons-net `SubnetUtils6(String)`: split at the first `/`, the prefix, then the
    address."""
    address, _, prefix_text = host.partition("/")
    prefix = _java_int(prefix_text)
    if prefix is None:
        raise CidrError(f"Could not parse [{host}] - invalid prefix length")
    if not 0 <= prefix <= 128:
        raise CidrError(f"Could not parse [{host}] - prefix length must be between 0 and 128")
    value = _v6_literal(address)
    if value is None:
        if _v4_mapped(address):
            raise CidrError(f"Could not parse [{address}] - not an IPv6 address")
        raise CidrError(f"Could not parse [{address}]")
    return 6, prefix, value >> (128 - prefix) << (128 - prefix)


def _v4_mapped(address: str) -> bool:
    try:
        return ipaddress.IPv6Address(address.strip("[]").partition("%")[0]).ipv4_mapped is not None
    except ValueError:
        return False


def parse_network(host: str) -> Network:
    """The network a CIDR host stands for (`host` contains `/`); CidrError if Kafka's
    `CidrUtils.validate` refuses it."""
    return _parse_v6(host) if ":" in host else _parse_v4(host)


def invalid_cidr_message(host: str) -> str | None:
    """Kafka's CreateAcls message for a host that contains `/` but is not a network, or None
    when it is one (or has no `/`: an address or `*`, which KIP-1276 leaves as they are)."""
    if "/" not in host:
        return None
    try:
        parse_network(host)
    except CidrError as exc:
        return f"Invalid CIDR notation '{host}': {exc}"
    return None


@lru_cache(maxsize=4096)
def network_of(host: str) -> Network | None:
    """The network of a CIDR host, or None (no `/`, or not a network: such a host stays a
    literal string that no client address equals)."""
    if "/" not in host:
        return None
    try:
        return parse_network(host)
    except CidrError:
        return None


@lru_cache(maxsize=4096)
def client_address(host: str) -> tuple[int, int] | None:
    """(IP version, address as an int) of a client host string, as commons-net's `isInRange`
    reads it (see the module docstring), or None when it is in no network."""
    if ":" in host:
        value = _v6_literal(host, any_scope=True)
        return None if value is None else (6, value)
    m = _IPV4.fullmatch(host)
    if m is None:
        return None
    value = 0
    for part in m.groups():
        octet = int(part)
        if octet > 255:
            return None
        value = value << 8 | octet
    return None if value == 0 else (4, value)


def contains(network: Network, address: tuple[int, int]) -> bool:
    """`address` (client_address) lies in `network` (parse_network)."""
    version, prefix, bits = network
    width = 32 if version == 4 else 128
    return address[0] == version and address[1] >> (width - prefix) == bits >> (width - prefix)
