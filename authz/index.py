"""The immutable ACL index one authorization decision reads.

Per resource type: LITERAL names in a dict, PREFIXED names in a dict plus the distinct prefix
lengths that exist, so a lookup costs one dict probe per existing prefix length rather than a
scan of the ACL set. Each resource pattern ("group") maps principal -> host -> entry, where an
entry folds that principal/host's ACLs into two operation bit masks (DENY, and ALLOW with
implication already expanded), so matching is a handful of dict gets and one AND per group.

Updates never mutate: `TypeIndex.apply` returns a new index that shares every untouched group.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from authz.decision import DEFAULT_DENY, RULE_ACL, Decision
from authz.model import (
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

ALL_BITS = (1 << 32) - 1  # ALL covers every operation, including a query for ALL itself
_ALL = AclOperation.ALL
_LITERAL = PatternType.LITERAL
_PREFIXED = PatternType.PREFIXED

# operation -> bits it grants when ALLOWed / denies when DENYed (§3.7)
ALLOW_BITS = {
    op: ALL_BITS if op == _ALL else (1 << op) | sum(1 << i for i in IMPLIED_BY_ALLOW.get(op, ()))
    for op in AclOperation
}
DENY_BITS = {op: ALL_BITS if op == _ALL else 1 << op for op in AclOperation}

# entry = (deny_mask, allow_mask, {op: DENY binding}, {op: ALLOW binding})
Entry = tuple[int, int, dict[AclOperation, AclBinding], dict[AclOperation, AclBinding]]
Group = dict[str, dict[str, Entry]]  # principal -> host -> entry
PatternKey = tuple[str, PatternType]  # (resource name, LITERAL | PREFIXED)


def build_group(bindings: Iterable[AclBinding]) -> Group:
    """Fold the ACLs of one resource pattern into principal -> host -> entry."""
    raw: dict[str, dict[str, list]] = {}
    for b in bindings:
        hosts = raw.setdefault(b.principal, {})
        entry = hosts.get(b.host)
        if entry is None:
            entry = hosts[b.host] = [0, 0, {}, {}]
        if b.permission_type == AclPermissionType.DENY:
            entry[0] |= DENY_BITS[b.operation]
            entry[2][b.operation] = b
        elif b.permission_type == AclPermissionType.ALLOW:
            entry[1] |= ALLOW_BITS[b.operation]
            entry[3][b.operation] = b
    return {p: {h: tuple(e) for h, e in hosts.items()} for p, hosts in raw.items()}  # type: ignore[misc]


def _entries(group: Group, principal: str, host: str) -> list[Entry]:
    """The entries of a group that apply to principal@host (§3.5)."""
    found = []
    for p in (principal, WILDCARD_PRINCIPAL) if principal != WILDCARD_PRINCIPAL else (principal,):
        hosts = group.get(p)
        if hosts:
            for h in (host, WILDCARD_HOST) if host != WILDCARD_HOST else (host,):
                entry = hosts.get(h)
                if entry is not None:
                    found.append(entry)
    return found


def _kafka_order(b: AclBinding) -> tuple[int, bytes, bytes]:
    return (b.operation, java_key(b.principal), java_key(b.host))


def first_deny(group: Group, principal: str, host: str, op: int) -> AclBinding:
    """The DENY that StandardAuthorizer's scan meets first in this group (for the audit rule)."""
    found = []
    for entry in _entries(group, principal, host):
        b = entry[2].get(_ALL) or entry[2].get(op)  # ALL sorts before every other operation
        if b is not None:
            found.append(b)
    return min(found, key=_kafka_order)


def last_allow(group: Group, principal: str, host: str, op: int) -> AclBinding:
    """The ALLOW that StandardAuthorizer's scan meets last in this group (for the audit rule)."""
    bit = 1 << op
    found = [
        b
        for entry in _entries(group, principal, host)
        for b in entry[3].values()
        if ALLOW_BITS[b.operation] & bit
    ]
    return max(found, key=_kafka_order)


class TypeIndex:
    """All ACLs of one resource type. Immutable once built."""

    __slots__ = ("count", "length_counts", "lengths", "literal", "members", "prefixed", "wildcard")

    def __init__(
        self,
        members: dict[PatternKey, frozenset[AclBinding]],
        literal: dict[str, Group],
        prefixed: dict[str, Group],
        length_counts: dict[int, int],
        count: int,
    ) -> None:
        self.members = members
        self.literal = literal
        self.prefixed = prefixed
        self.length_counts = length_counts
        self.lengths = tuple(sorted(length_counts, reverse=True))  # longest prefix first
        self.wildcard = literal.get(WILDCARD)
        self.count = count

    @classmethod
    def build(cls, members: dict[PatternKey, frozenset[AclBinding]]) -> TypeIndex:
        literal: dict[str, Group] = {}
        prefixed: dict[str, Group] = {}
        length_counts: dict[int, int] = defaultdict(int)
        for (name, pattern), bindings in members.items():
            if pattern == _LITERAL:
                literal[name] = build_group(bindings)
            else:
                prefixed[name] = build_group(bindings)
                length_counts[len(name)] += 1
        count = sum(len(b) for b in members.values())
        return cls(members, literal, prefixed, dict(length_counts), count)

    def apply(self, changed: Mapping[PatternKey, frozenset[AclBinding]]) -> TypeIndex:
        """A new index where each changed pattern holds the given bindings (empty = gone)."""
        members = dict(self.members)
        literal = dict(self.literal)
        prefixed = dict(self.prefixed)
        length_counts = dict(self.length_counts)
        count = self.count
        for key, bindings in changed.items():
            name, pattern = key
            before = members.pop(key, frozenset())
            count -= len(before)
            target = literal if pattern == _LITERAL else prefixed
            if pattern == _PREFIXED and before:
                length_counts[len(name)] -= 1
                if not length_counts[len(name)]:
                    del length_counts[len(name)]
            target.pop(name, None)
            if bindings:
                members[key] = bindings
                count += len(bindings)
                target[name] = build_group(bindings)
                if pattern == _PREFIXED:
                    length_counts[len(name)] = length_counts.get(len(name), 0) + 1
        return TypeIndex(members, literal, prefixed, length_counts, count)

    def decide(self, principal: str, host: str, op: int, name: str, no_acl: Decision) -> Decision:
        """authorization.md §3.1 after the super-user check; `no_acl` is the configured default.

        Groups are visited in StandardAuthorizer's scan order (exact literal, prefixes longest
        first, then the literal `*`), so the binding named for a DENY is the first DENY Kafka
        meets and for an ALLOW the last ALLOW, as in its audit line.
        """
        groups = []
        group = self.literal.get(name)
        if group is not None:
            groups.append(group)
        if self.lengths:
            prefixed = self.prefixed
            size = len(name)
            for length in self.lengths:
                if length <= size:
                    group = prefixed.get(name[:length])
                    if group is not None:
                        groups.append(group)
        # Project decision (§3.9): the literal `*` applies to every name, also `*foo`.
        if self.wildcard is not None and name != WILDCARD:
            groups.append(self.wildcard)
        if not groups:
            return no_acl

        bit = 1 << op
        wildcard_principal = principal != WILDCARD_PRINCIPAL
        wildcard_host = host != WILDCARD_HOST
        allowing = None
        for group in groups:
            for hosts in (
                group.get(principal),
                group.get(WILDCARD_PRINCIPAL) if wildcard_principal else None,
            ):
                if hosts:
                    for entry in (
                        hosts.get(host),
                        hosts.get(WILDCARD_HOST) if wildcard_host else None,
                    ):
                        if entry is not None:
                            if entry[0] & bit:
                                return Decision(
                                    False, RULE_ACL, first_deny(group, principal, host, op)
                                )
                            if entry[1] & bit:
                                allowing = group
        if allowing is not None:
            return Decision(True, RULE_ACL, last_allow(allowing, principal, host, op))
        return DEFAULT_DENY


def group_by_type(
    bindings: Iterable[AclBinding],
) -> dict[ResourceType, dict[PatternKey, set[AclBinding]]]:
    out: dict[ResourceType, dict[PatternKey, set[AclBinding]]] = {}
    for b in bindings:
        out.setdefault(b.resource_type, {}).setdefault(
            (b.resource_name, b.pattern_type), set()
        ).add(b)
    return out
