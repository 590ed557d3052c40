"""Dry-run for some principals or resources while everyone else is enforced.

A rollout enforces for everyone but one team, or one family of topics, and watches what would
have been denied there: a decision is not enforced when the global mode is dry-run, when the
connection's principal is one of `principals`, or when the resource matches one of the
resource patterns (Kafka's pattern rules: LITERAL is the exact name, or every name for `*`;
PREFIXED is every name starting with it). Such a denial is audited with enforced=false and the
request goes through. The scope is immutable; the IO layer swaps in a new one on reload.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aclgate.authz.index import held_by
from aclgate.authz.model import (
    WILDCARD,
    PatternType,
    ResourceType,
    parse_enum,
    parse_principal,
)

#: the pattern types a dry-run resource may name
PATTERNS = (PatternType.LITERAL, PatternType.PREFIXED)


class DryRunScopeError(ValueError):
    """A principal or resource pattern that cannot be a dry-run selector; says which."""


def parse_resource(text: str) -> tuple[ResourceType, PatternType, str]:
    """`TYPE:PATTERN:NAME`, e.g. `TOPIC:PREFIXED:payments.` or `GROUP:LITERAL:billing`."""
    parts = text.split(":", 2)
    if len(parts) != 3 or not parts[2]:
        raise DryRunScopeError(
            f"dry-run resource {text!r} is not TYPE:PATTERN:NAME (e.g. TOPIC:PREFIXED:payments.)"
        )
    try:
        rtype = parse_enum(ResourceType, parts[0])
        pattern = parse_enum(PatternType, parts[1])
    except ValueError as exc:
        raise DryRunScopeError(f"dry-run resource {text!r}: {exc}") from None
    if rtype in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise DryRunScopeError(f"dry-run resource {text!r}: {rtype.name} is not a resource type")
    if pattern not in PATTERNS:
        raise DryRunScopeError(f"dry-run resource {text!r}: pattern must be LITERAL or PREFIXED")
    return rtype, pattern, parts[2]


@dataclass(frozen=True, slots=True)
class DryRunScope:
    principals: frozenset[str] = frozenset()
    #: (type, name) of LITERAL patterns, `*` included
    literal: frozenset[tuple[ResourceType, str]] = frozenset()
    #: (type, prefix) of PREFIXED patterns
    prefixed: tuple[tuple[ResourceType, str], ...] = ()
    #: the selectors as given, for logs and /readyz
    described: tuple[str, ...] = ()

    @classmethod
    def parse(cls, principals: Iterable[str], resources: Iterable[str]) -> DryRunScope:
        """DryRunScopeError naming the first selector that is not valid."""
        chosen = []
        for p in principals:
            try:
                parse_principal(p)
            except ValueError as exc:
                raise DryRunScopeError(f"dry-run principal {p!r}: {exc}") from None
            chosen.append(p)
        literal, prefixed = set(), []
        for text in resources:
            rtype, pattern, name = parse_resource(text)
            if pattern == PatternType.LITERAL:
                literal.add((rtype, name))
            else:
                prefixed.append((rtype, name))
        described = tuple(chosen) + tuple(resources)
        return cls(frozenset(chosen), frozenset(literal), tuple(prefixed), described)

    def __bool__(self) -> bool:
        return bool(self.principals or self.literal or self.prefixed)

    def covers_principal(self, principal: str, groups: frozenset[str] = frozenset()) -> bool:
        """The principal, or one of its groups (`--dry-run-principal Group:contractors`), is
        only observed."""
        return held_by(self.principals, principal, groups)

    def covers(
        self,
        principal: str,
        resource_type: ResourceType,
        name: str,
        groups: frozenset[str] = frozenset(),
    ) -> bool:
        """Whether a denial of this request is only observed, not enforced."""
        if self.covers_principal(principal, groups):
            return True
        literal = self.literal
        if literal and ((resource_type, name) in literal or (resource_type, WILDCARD) in literal):
            return True
        return any(t == resource_type and name.startswith(p) for t, p in self.prefixed)


NO_DRY_RUN = DryRunScope()
