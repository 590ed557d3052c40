"""`authorizeByResourceType` (KIP-679) as the Authorizer interface's default implementation,
which KRaft uses (docs/authz.md, "`authorizeByResourceType`"): "may principal@host do O on at
least one resource of type T?".

Kafka scans every ACL of the type per call. Here the ACLs of a type are grouped once per
snapshot by (principal, host, operation), so a call looks at the at most 8 groups that can
apply ({P, User:*} x {H, *} x {O, ALL}); the answer is the same as the scan's. With CIDR hosts
(KIP-1276, opt-in) the hosts also include the CIDR hosts that contain the client's address.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from aclgate.authz.decision import RULE_ACL, Decision
from aclgate.authz.model import (
    WILDCARD,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
)

PROBE_NAME: Final = "hardcode"  # the literal name Kafka's default implementation probes first


class PatternSets:
    """The ACLs of one (principal, host, operation) split as the default implementation does."""

    __slots__ = ("allow_literal", "allow_prefixed", "allow_wildcard", "deny_literal",
                 "deny_prefix_lengths", "deny_prefixed", "deny_wildcard")  # fmt: skip

    def __init__(self) -> None:
        self.deny_wildcard: AclBinding | None = None
        self.allow_wildcard: AclBinding | None = None
        self.deny_literal: dict[str, AclBinding] = {}
        self.deny_prefixed: dict[str, AclBinding] = {}
        self.allow_literal: dict[str, AclBinding] = {}
        self.allow_prefixed: dict[str, AclBinding] = {}
        # Kafka checks prefixes of length 1..len(name): an empty DENY prefix dominates nothing.
        self.deny_prefix_lengths: frozenset[int] = frozenset()

    def add(self, b: AclBinding) -> None:
        deny = b.permission_type == AclPermissionType.DENY
        if b.pattern_type == PatternType.LITERAL and b.resource_name == WILDCARD:
            if deny:
                self.deny_wildcard = b
            else:
                self.allow_wildcard = b
            return
        literal = b.pattern_type == PatternType.LITERAL
        if deny:
            target = self.deny_literal if literal else self.deny_prefixed
        else:
            target = self.allow_literal if literal else self.allow_prefixed
        target.setdefault(b.resource_name, b)
        if deny and not literal and b.resource_name:
            self.deny_prefix_lengths |= {len(b.resource_name)}


TypeGroups = dict[tuple[str, str, AclOperation], PatternSets]


def build(bindings: Iterable[AclBinding]) -> TypeGroups:
    """Group one resource type's ACLs by (principal, host, operation)."""
    groups: TypeGroups = {}
    for b in bindings:
        if b.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            continue
        key = (b.principal, b.host, b.operation)
        sets = groups.get(key)
        if sets is None:
            sets = groups[key] = PatternSets()
        sets.add(b)
    return groups


def _dominating_deny(
    name: str, literal: bool, sets: list[PatternSets], prefix_lengths: list[int]
) -> AclBinding | None:
    """A DENY that dominates an ALLOW on `name`: same literal name, or any non-empty prefix."""
    for s in sets:
        if literal and name in s.deny_literal:
            return s.deny_literal[name]
    for length in prefix_lengths:
        if length > len(name):
            break
        prefix = name[:length]
        for s in sets:
            deny = s.deny_prefixed.get(prefix)
            if deny is not None:
                return deny
    return None


def decide(
    groups: TypeGroups,
    principal: str,
    host: str,
    op: AclOperation,
    probe: Callable[[], Decision],
    session_groups: Iterable[str] = (),
    cidr_hosts: Iterable[str] = (),
) -> Decision:
    """Steps 1-5 of docs/authz.md, "`authorizeByResourceType`". `probe` authorizes op on the
    literal name `hardcode`; `cidr_hosts`: the CIDR hosts that contain the client's address
    (TypeIndex.cidr_hosts), which apply as the client's own host does."""
    first = probe()
    if first.allowed:
        return first
    sets = [
        s
        for key in {
            (p, h, o)
            for p in (principal, WILDCARD_PRINCIPAL, *session_groups)
            for h in (host, WILDCARD_HOST, *cidr_hosts)
            for o in (op, AclOperation.ALL)
        }
        if (s := groups.get(key)) is not None
    ]
    for s in sets:
        if s.deny_wildcard is not None:
            return Decision(False, RULE_ACL, s.deny_wildcard)
    for s in sets:
        if s.allow_wildcard is not None:
            return Decision(True, RULE_ACL, s.allow_wildcard)
    prefix_lengths = sorted(frozenset().union(*(s.deny_prefix_lengths for s in sets)))
    dominated = None
    for s in sets:
        for literal, allows in ((True, s.allow_literal), (False, s.allow_prefixed)):
            for name, allow in allows.items():
                deny = _dominating_deny(name, literal, sets, prefix_lengths)
                if deny is None:
                    return Decision(True, RULE_ACL, allow)
                dominated = dominated or deny
    if dominated is not None:
        return Decision(False, RULE_ACL, dominated)
    return first
