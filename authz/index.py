"""The immutable ACL index one authorization decision reads.

Per resource type: LITERAL names in a dict, PREFIXED names in a dict plus the distinct prefix
lengths that exist, so a lookup costs one dict probe per existing prefix length rather than a
scan of the ACL set. Each resource pattern ("group") maps (principal, host) to a row
`(deny_mask, allow_mask, *bindings)`. The masks fold the row's ACLs into operation bits (DENY,
and ALLOW with implication already expanded), so matching a group is at most four dict gets
({P, User:*} x {H, *}) and an AND, however many principals or hosts the group holds. The
bindings ride along in the row, so the index is also the storage: no second copy is kept.

Updates never mutate: `TypeIndex.apply` returns a new index that shares every untouched group.

CIDR hosts (KIP-1276, opt-in: docs/authz.md, "CIDR hosts (KIP-1276, opt-in)") ride in the same
rows, under their host string; a client's address reaches them through one more table per type:
the distinct CIDR hosts by (IP version, prefix length) and network, so the CIDR hosts that
contain an address cost one dict get per prefix length in use. A type without CIDR hosts (and
every type when the option is off) has no such table and pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from aclgate.authz.cidr import client_address, network_of
from aclgate.authz.decision import DEFAULT_DENY, RULE_ACL, Decision
from aclgate.authz.model import (
    IMPLIED_BY_ALLOW,
    WILDCARD,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    java_key,
)

ALL_BITS: Final = (1 << 32) - 1  # ALL covers every operation, including a query for ALL itself
_ALL: Final = AclOperation.ALL
_DENY: Final = AclPermissionType.DENY
_LITERAL: Final = PatternType.LITERAL
_PREFIXED: Final = PatternType.PREFIXED
_MATCH: Final = PatternType.MATCH

# operation -> bits it grants when ALLOWed / denies when DENYed (docs/authz.md, "How a decision
# is made", rule 6)
ALLOW_BITS: Final = {
    op: ALL_BITS if op == _ALL else (1 << op) | sum(1 << i for i in IMPLIED_BY_ALLOW.get(op, ()))
    for op in AclOperation
}
DENY_BITS: Final = {op: ALL_BITS if op == _ALL else 1 << op for op in AclOperation}

Row = tuple[int, int, *tuple[AclBinding, ...]]  # (deny_mask, allow_mask, *bindings)
Group = dict[tuple[str, str], Row]  # (principal, host) -> row
PatternKey = tuple[str, PatternType]  # (resource name, LITERAL | PREFIXED)
#: (IP version, bits to shift an address right by, {network >> shift: CIDR host strings}),
#: one per prefix length in use
CidrTable = tuple[tuple[int, int, dict[int, tuple[str, ...]]], ...]


def build_group(bindings: Iterable[AclBinding]) -> Group:
    """Fold the ACLs of one resource pattern into (principal, host) -> row."""
    group: Group = {}
    for b in bindings:
        key = (b.principal, b.host)
        deny = DENY_BITS[b.operation] if b.permission_type == _DENY else 0
        allow = 0 if deny else ALLOW_BITS[b.operation]
        row = group.get(key)
        group[key] = (
            (deny, allow, b) if row is None else (row[0] | deny, row[1] | allow, *row[2:], b)
        )
    return group


def group_bindings(group: Group) -> Iterator[AclBinding]:
    for row in group.values():
        yield from row[2:]


def group_size(group: Group) -> int:
    return sum(len(row) - 2 for row in group.values())


def query_keys(
    principal: str,
    host: str,
    session_groups: Iterable[str] = (),
    cidr_hosts: tuple[str, ...] = (),
) -> tuple[tuple[str, str], ...]:
    """The (principal, host) rows that apply to principal@host (docs/authz.md, "How a decision
    is made", rule 4), and to each of the session's group principals (`Group:NAME`, docs/
    authz.md, "Group principals"): `User:*` is matched once, for the session, never per group.
    `cidr_hosts`: the CIDR hosts that contain the client's address (TypeIndex.cidr_hosts)."""
    principals: tuple[str, ...] = (
        (principal, WILDCARD_PRINCIPAL) if principal != WILDCARD_PRINCIPAL else (principal,)
    )
    if session_groups:  # any order: first_deny and last_allow pick by Kafka's order
        principals += tuple(g for g in session_groups if g not in principals)
    hosts: tuple[str, ...] = (host, WILDCARD_HOST) if host != WILDCARD_HOST else (host,)
    if cidr_hosts:
        hosts += cidr_hosts
    return tuple((p, h) for p in principals for h in hosts)


def principal_type(principal: str) -> str:
    """`Group` of `Group:payments` (a principal without a `:` has no type: '')."""
    colon = principal.find(":")
    return principal[:colon] if colon > 0 else ""


def is_group_principal(principal: str) -> bool:
    """A principal a session may hold besides its user: any type but `User`."""
    return principal_type(principal) not in ("User", "")


def held_by(principals: frozenset[str], principal: str, groups: frozenset[str]) -> bool:
    """`principal`, or one of the session's group principals (`groups`), is in `principals`:
    a super user (Authorizer.is_super_user, the protected topics' guard), a dry-run principal
    (DryRunScope.covers_principal)."""
    return principal in principals or (bool(groups) and not principals.isdisjoint(groups))


def _kafka_order(b: AclBinding) -> tuple[int, str, str]:
    return (b.operation, java_key(b.principal), java_key(b.host))


def _candidates(group: Group, keys: tuple[tuple[str, str], ...]) -> Iterator[AclBinding]:
    for key in keys:
        yield from group.get(key, (0, 0))[2:]


def first_deny(group: Group, keys: tuple[tuple[str, str], ...], op: int) -> AclBinding:
    """The DENY StandardAuthorizer's scan meets first in this group (for the audit rule)."""
    bit = 1 << op
    found = [
        b
        for b in _candidates(group, keys)
        if b.permission_type == _DENY and DENY_BITS[b.operation] & bit
    ]
    return found[0] if len(found) == 1 else min(found, key=_kafka_order)


def last_allow(group: Group, keys: tuple[tuple[str, str], ...], op: int) -> AclBinding:
    """The ALLOW StandardAuthorizer's scan meets last in this group (for the audit rule)."""
    bit = 1 << op
    found = [
        b
        for b in _candidates(group, keys)
        if b.permission_type != _DENY and ALLOW_BITS[b.operation] & bit
    ]
    return found[0] if len(found) == 1 else max(found, key=_kafka_order)


class TypeIndex:
    """All ACLs of one resource type. Immutable once built."""

    __slots__ = (
        "cidr",
        "cidr_counts",
        "cidr_table",
        "count",
        "group_counts",
        "group_members",
        "length_counts",
        "lengths",
        "literal",
        "prefixed",
        "wildcard",
    )

    def __init__(
        self,
        literal: dict[str, Group],
        prefixed: dict[str, Group],
        length_counts: dict[int, int],
        count: int,
        group_counts: dict[str, int] | None = None,
        cidr: bool = False,
        cidr_counts: dict[str, int] | None = None,
        group_members: dict[PatternKey, frozenset[str]] | None = None,
    ) -> None:
        self.literal = literal
        self.prefixed = prefixed
        self.length_counts = length_counts
        self.lengths = tuple(sorted(length_counts, reverse=True))  # longest prefix first
        self.wildcard = literal.get(WILDCARD)
        self.count = count
        #: group principal (any type but User) -> how many of this type's ACLs name it: a
        #: session's groups are matched only against those that have ACLs (Snapshot)
        self.group_counts: dict[str, int] = group_counts if group_counts is not None else {}
        #: pattern -> the group principals its rows name (only patterns that name any): a
        #: decision looks up a session's group only in the patterns that hold rows of it
        self.group_members: dict[PatternKey, frozenset[str]] = (
            group_members if group_members is not None else {}
        )
        #: a host with `/` is a network (KIP-1276, opt-in); off: every host is a literal string
        self.cidr = cidr
        #: CIDR host -> how many of this type's ACLs have it (only hosts that are networks)
        self.cidr_counts: dict[str, int] = cidr_counts if cidr_counts is not None else {}
        #: the CIDR hosts by network, for TypeIndex.cidr_hosts; None when there are none
        self.cidr_table: CidrTable | None = _cidr_table(self.cidr_counts) if cidr_counts else None

    @classmethod
    def build(
        cls, patterns: Mapping[PatternKey, Iterable[AclBinding]], cidr: bool = False
    ) -> TypeIndex:
        """From distinct bindings grouped by pattern; `cidr`: hosts with `/` are networks."""
        return cls({}, {}, {}, 0, cidr=cidr).apply(patterns)

    def cidr_hosts(self, host: str) -> tuple[str, ...]:
        """The CIDR hosts of this type's ACLs whose network contains the client address
        `host` (a Java host string): () without CIDR hosts, or for a host that is no address."""
        table = self.cidr_table
        if table is None:
            return ()
        address = client_address(host)
        if address is None:
            return ()
        version, value = address
        found: tuple[str, ...] = ()
        for table_version, shift, networks in table:
            if table_version == version:
                hosts = networks.get(value >> shift)
                if hosts is not None:
                    found += hosts
        return found

    def bindings(self) -> Iterator[AclBinding]:
        for groups in (self.literal, self.prefixed):
            for group in groups.values():
                yield from group_bindings(group)

    def pattern_bindings(self, key: PatternKey) -> set[AclBinding]:
        name, pattern = key
        group = (self.literal if pattern == _LITERAL else self.prefixed).get(name)
        return set(group_bindings(group)) if group else set()

    def apply(self, changed: Mapping[PatternKey, Iterable[AclBinding]]) -> TypeIndex:
        """A new index where each changed pattern holds exactly the given distinct bindings
        (none = the pattern is gone). Untouched groups are shared, not copied."""
        literal = dict(self.literal)
        prefixed = dict(self.prefixed)
        length_counts = dict(self.length_counts)
        group_counts = dict(self.group_counts)
        group_members = dict(self.group_members)
        cidr = self.cidr
        cidr_counts = dict(self.cidr_counts) if cidr else None
        count = self.count
        for (name, pattern), bindings in changed.items():
            target = literal if pattern == _LITERAL else prefixed
            before = target.pop(name, None)
            if before is not None:
                count -= group_size(before)
                _count_groups(group_counts, before, -1)
                if cidr_counts is not None:
                    _count_cidr(cidr_counts, before, -1)
                if pattern == _PREFIXED:
                    length_counts[len(name)] -= 1
                    if not length_counts[len(name)]:
                        del length_counts[len(name)]
            group_members.pop((name, pattern), None)
            group = build_group(bindings)
            if group:
                target[name] = group
                count += group_size(group)
                _count_groups(group_counts, group, 1)
                members = frozenset(p for p, _h in group if is_group_principal(p))
                if members:
                    group_members[(name, pattern)] = members
                if cidr_counts is not None:
                    _count_cidr(cidr_counts, group, 1)
                if pattern == _PREFIXED:
                    length_counts[len(name)] = length_counts.get(len(name), 0) + 1
        return TypeIndex(
            literal, prefixed, length_counts, count, group_counts, cidr, cidr_counts, group_members
        )

    def filter_groups(self, name: str | None, pattern: PatternType) -> Iterator[Group]:
        """The groups whose pattern a filter on (`name`, `pattern`) can match, by lookups
        (`ResourcePatternFilter.matches`): LITERAL/PREFIXED one dict get, ANY two, MATCH the
        name, the literal `*` and one get per existing prefix length; no name: every group of
        the pattern types the filter admits. A superset is fine: candidates are checked with
        `AclBindingFilter.matches`."""
        literal, prefixed = self.literal, self.prefixed
        dicts = [(literal, prefixed)[i] for i in _DICTS[pattern]]
        if name is None:
            for groups in dicts:
                yield from groups.values()
            return
        if pattern == _MATCH:
            found = [literal.get(name)]
            if name != WILDCARD:
                found.append(self.wildcard)
            found += [prefixed.get(name[:n]) for n in self.lengths if n <= len(name)]
        else:
            found = [groups.get(name) for groups in dicts]
        yield from (group for group in found if group is not None)

    def decide(
        self,
        principal: str,
        host: str,
        op: int,
        name: str,
        no_acl: Decision,
        session_groups: Iterable[str] = (),
    ) -> Decision:
        """docs/authz.md, "How a decision is made", after the super-user check; `no_acl` is the
        configured default.

        Groups are visited in StandardAuthorizer's scan order (exact literal, prefixes longest
        first, then the literal `*`), so the binding named for a DENY is the first DENY Kafka
        meets and for an ALLOW the last ALLOW, as in its audit line (docs/authz.md, "Which ACL a
        decision names").
        """
        groups: list[tuple[Group, PatternKey]] = []
        group = self.literal.get(name)
        if group is not None:
            groups.append((group, (name, _LITERAL)))
        if self.lengths:
            prefixed = self.prefixed
            size = len(name)
            for length in self.lengths:
                if length <= size:
                    group = prefixed.get(name[:length])
                    if group is not None:
                        groups.append((group, (name[:length], _PREFIXED)))
        # Deliberately unlike KRaft (docs/authz.md, "The literal `*` ACL"): the literal `*`
        # applies to every name, also `*foo`.
        if self.wildcard is not None and name != WILDCARD:
            groups.append((self.wildcard, (WILDCARD, _LITERAL)))
        if not groups:
            return no_acl

        bit = 1 << op
        cidr_hosts = self.cidr_hosts(host) if self.cidr_table is not None else ()
        keys = user_keys = query_keys(principal, host, (), cidr_hosts)
        members = self.group_members if session_groups else None
        allowing = None
        allowing_keys = keys
        for group, pattern in groups:
            if members:  # the session's groups this pattern has rows of, if any
                found = members.get(pattern)
                shared = found.intersection(session_groups) if found else None
                keys = query_keys(principal, host, shared, cidr_hosts) if shared else user_keys
            for key in keys:
                row = group.get(key)
                if row is not None:
                    if row[0] & bit:
                        return Decision(False, RULE_ACL, first_deny(group, keys, op))
                    if row[1] & bit:
                        allowing, allowing_keys = group, keys
        if allowing is not None:
            return Decision(True, RULE_ACL, last_allow(allowing, allowing_keys, op))
        return DEFAULT_DENY


def _count_groups(counts: dict[str, int], group: Group, sign: int) -> None:
    """Add (`sign` 1) or take away (-1) the group principals of `group`'s rows."""
    for (principal, _host), row in group.items():
        if is_group_principal(principal):
            left = counts.get(principal, 0) + sign * (len(row) - 2)
            if left:
                counts[principal] = left
            else:
                counts.pop(principal, None)


def _count_cidr(counts: dict[str, int], group: Group, sign: int) -> None:
    """Add (`sign` 1) or take away (-1) the CIDR hosts (those that are networks) of `group`."""
    for (_principal, host), row in group.items():
        if "/" in host and network_of(host) is not None:
            left = counts.get(host, 0) + sign * (len(row) - 2)
            if left:
                counts[host] = left
            else:
                counts.pop(host, None)


def _cidr_table(counts: Mapping[str, int]) -> CidrTable | None:
    """The CIDR hosts by (version, prefix length) and network (TypeIndex.cidr_table)."""
    by_prefix: dict[tuple[int, int], dict[int, tuple[str, ...]]] = {}
    for host in counts:
        network = network_of(host)
        if network is None:
            continue
        version, prefix, bits = network
        shift = (32 if version == 4 else 128) - prefix
        networks = by_prefix.setdefault((version, shift), {})
        key = bits >> shift
        networks[key] = (*networks.get(key, ()), host)
    if not by_prefix:
        return None
    return tuple(
        (version, shift, networks) for (version, shift), networks in sorted(by_prefix.items())
    )


#: pattern type of a filter -> which of (literal, prefixed) it can match
_DICTS: Final[dict[PatternType, tuple[int, ...]]] = {
    PatternType.UNKNOWN: (),
    PatternType.ANY: (0, 1),
    PatternType.MATCH: (0, 1),
    PatternType.LITERAL: (0,),
    PatternType.PREFIXED: (1,),
}


def filter_candidates(
    group: Group, principal: str | None, host: str | None
) -> Iterator[AclBinding]:
    """The bindings of `group` a filter's principal and host admit: one dict get when the
    filter names both, else the rows whose key agrees."""
    if principal is not None and host is not None:
        yield from group.get((principal, host), (0, 0))[2:]
        return
    for (p, h), row in group.items():
        if (principal is None or p == principal) and (host is None or h == host):
            yield from row[2:]


def group_by_type(
    bindings: Iterable[AclBinding],
) -> dict[ResourceType, dict[PatternKey, list[AclBinding]]]:
    """Distinct bindings -> type -> pattern -> bindings."""
    out: dict[ResourceType, dict[PatternKey, list[AclBinding]]] = {}
    for b in bindings:
        patterns = out.get(b.resource_type)
        if patterns is None:
            patterns = out[b.resource_type] = {}
        key = (b.resource_name, b.pattern_type)
        found = patterns.get(key)
        if found is None:
            patterns[key] = [b]
        else:
            found.append(b)
    return out
