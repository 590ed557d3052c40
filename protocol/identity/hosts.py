"""Client host strings exactly as Java's `InetAddress.getHostAddress()` prints them.

Kafka compares an ACL's host with that string by plain equality (docs/authz.md, "Hosts"), so the
proxy must format peer addresses the same way: IPv6 as eight lowercase hex groups, uncompressed
and without leading zeros; IPv4-mapped IPv6 as the plain IPv4 dotted quad.
"""

from __future__ import annotations

import ipaddress

__all__ = ["java_host_string"]


def java_host_string(ip: str) -> str:
    """Format an IP address string (as asyncio's peername gives it) the way Java does.

    A `%scope` suffix on an IPv6 address is kept. Raises ValueError for anything that is not an
    IP address: ACL hosts are never host names.
    """
    scope = ""
    if "%" in ip:
        ip, scope = ip.split("%", 1)
        scope = "%" + scope
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv4Address):
        return str(addr)
    mapped = addr.ipv4_mapped
    if mapped is not None:
        return str(mapped)
    packed = addr.packed
    groups = (int.from_bytes(packed[i : i + 2], "big") for i in range(0, 16, 2))
    return ":".join(format(g, "x") for g in groups) + scope
