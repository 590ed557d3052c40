"""A deliberately naive transcription of docs/authz.md's "How a decision is made" (with "The
literal `*` ACL", and "CIDR hosts (KIP-1276, opt-in)" when `cidr` is set) and
"`authorizeByResourceType`", for property tests against the indexed Authorizer. Linear scans,
no caching, no cleverness: if the two ever disagree, this one is the easier to believe.

A CIDR host's network comes from authz/cidr.py's parser (which the KIP-1276 tests pin to
Kafka's rules); whether it contains the client is asked of Python's `ipaddress`, not of the
index's shift-and-compare tables."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from aclgate.authz.cidr import CidrError, parse_network
from aclgate.authz.model import (
    IMPLIED_BY_ALLOW,
    WILDCARD,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY


def covers(acl: AclBinding, rtype: ResourceType, name: str) -> bool:
    """Does the ACL apply to the resource name (docs/authz.md, decision rule 2)?"""
    if acl.resource_type != rtype:
        return False
    if acl.pattern_type == PatternType.LITERAL:
        return acl.resource_name == name or acl.resource_name == WILDCARD
    return acl.pattern_type == PatternType.PREFIXED and name.startswith(acl.resource_name)


def host_matches(acl_host: str, host: str, cidr: bool = False) -> bool:
    """The ACL's host is the client's or `*`, or (with `cidr`) a network that contains the
    client's address: IPv4 in IPv4 networks (but never 0.0.0.0), IPv6 in IPv6 networks."""
    if acl_host in (host, "*"):
        return True
    if not cidr or "/" not in acl_host:
        return False
    try:
        version, prefix, bits = parse_network(acl_host)
    except CidrError:
        return False  # stays a literal string, which no address equals
    try:
        client = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return False
    if client.version != version or (version == 4 and int(client) == 0):
        return False
    if isinstance(client, ipaddress.IPv6Address) and client.ipv4_mapped is not None:
        return False
    network_type = ipaddress.IPv4Network if version == 4 else ipaddress.IPv6Network
    return client in network_type((bits, prefix))


def applies(
    acl: AclBinding, principal: str, host: str, groups: Iterable[str] = (), cidr: bool = False
) -> bool:
    """The ACL's principal is the session's, `User:*` or one of the session's groups
    (docs/authz.md, "Group principals"), and its host matches the client's (host_matches)."""
    return (acl.principal in (principal, "User:*") or acl.principal in set(groups)) and (
        host_matches(acl.host, host, cidr)
    )


def grants(acl: AclBinding, op: AclOperation) -> bool:
    implied = {op} | {o for o, implies in IMPLIED_BY_ALLOW.items() if op in implies}
    return acl.operation in implied or acl.operation == AclOperation.ALL


def authorize(
    acls: Iterable[AclBinding],
    principal: str,
    host: str,
    op: AclOperation,
    rtype: ResourceType,
    name: str,
    super_users: Iterable[str] = (),
    allow_everyone: bool = False,
    groups: Iterable[str] = (),
    cidr: bool = False,
) -> tuple[bool, str]:
    """(allowed, rule) for one query by a session of `principal` and `groups`."""
    groups = set(groups)
    if principal in set(super_users) or groups & set(super_users):
        return True, "SUPER_USER"
    matching = [a for a in acls if covers(a, rtype, name)]
    if not matching:
        return allow_everyone, "NO_ACL_DEFAULT"
    for a in matching:
        denies = a.permission_type == DENY and a.operation in (op, AclOperation.ALL)
        if applies(a, principal, host, groups, cidr) and denies:
            return False, "ACL"
    for a in matching:
        if (
            applies(a, principal, host, groups, cidr)
            and a.permission_type == ALLOW
            and grants(a, op)
        ):
            return True, "ACL"
    return False, "DEFAULT_DENY"


def authorize_by_resource_type(
    acls: Iterable[AclBinding],
    principal: str,
    host: str,
    op: AclOperation,
    rtype: ResourceType,
    super_users: Iterable[str] = (),
    allow_everyone: bool = False,
    groups: Iterable[str] = (),
    cidr: bool = False,
) -> bool:
    """The Authorizer interface's default implementation, line by line (docs/authz.md,
    "`authorizeByResourceType`")."""
    acls = list(acls)
    groups = set(groups)
    if authorize(
        acls, principal, host, op, rtype, "hardcode", super_users, allow_everyone, groups, cidr
    )[0]:
        return True
    deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
    allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
    wildcard_allow = False
    for a in acls:
        if a.resource_type != rtype:
            continue
        if not applies(a, principal, host, groups, cidr):
            continue
        if a.operation not in (op, AclOperation.ALL):
            continue
        if a.permission_type == DENY:
            if a.pattern_type == PatternType.LITERAL and a.resource_name == WILDCARD:
                return False
            deny[a.pattern_type].add(a.resource_name)
        elif a.pattern_type == PatternType.LITERAL and a.resource_name == WILDCARD:
            wildcard_allow = True
        else:
            allow[a.pattern_type].add(a.resource_name)
    if wildcard_allow:
        return True
    for pattern, names in allow.items():
        for name in names:
            if pattern == PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                continue
            if any(name[:i] in deny[PatternType.PREFIXED] for i in range(1, len(name) + 1)):
                continue
            return True
    return False
