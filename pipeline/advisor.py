"""The least-privilege advisor: the smallest sensible ACL set for the observed traffic.

Input is what the audit saw, as decision keys (principal, host, operation, resource type,
resource name, and the session's groups): the requests that must stay allowed, the requests
that were denied by policy and must stay denied, and every resource seen at all. The proposal
is built from ALLOW ACLs only, in three moves:

* one LITERAL ACL per (principal, operation, resource), host `*`;
* no ACL for an operation another proposed ACL already implies (READ/WRITE/DELETE/ALTER
  imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS; authz.model.IMPLIED_BY_ALLOW);
* a principal's topics or groups collapse into one PREFIXED ACL (prefixes end at `.`, `-`
  or `_`) only when every resource with that prefix seen anywhere in the audit was accessed
  by that principal with that operation, and at least `min_prefix` of them were.

The proposal is then checked with the real `authz.Authorizer`. An observed-denied request
it would allow is traced through the deciding ACL: a PREFIXED ACL goes back to literals, a
host `*` ACL is pinned to the hosts that were allowed; what still conflicts (e.g. a READ
allowed from a host whose DESCRIBE was denied: READ implies DESCRIBE) is reported.

Groups. The proposal grants user principals only, never a `Group:` principal: what a session
was allowed through a group's ACL becomes an ACL of its user, since the audit shows which
users used the group's grant, not who will be in the group later. So a request's verdict under
the proposal does not depend on the session's groups, and the keys are checked with them all
the same (as the proxy decides: a group that is a super user). A request allowed to a user with
some groups and denied to the same user with others cannot be told apart by user ACLs: it stays
allowed (`settle`), as a request seen both allowed and denied does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aclgate.pipeline.schema import acl_entry

PREFIX_TYPES = ("TOPIC", "GROUP")
SEPARATORS = ".-_"
WILDCARD_HOST = "*"


class Key(NamedTuple):
    """A decision key (schema.KEY_FIELDS), hashable: `groups` as a sorted tuple."""

    principal: str
    host: str
    operation: str
    resource_type: str
    resource_name: str
    groups: tuple[str, ...] = ()

    @classmethod
    def of(cls, row: Any) -> Key:
        """The key of a row (or sequence) of KEY_FIELDS; groups null or absent: none."""
        groups = row[5] if len(row) > 5 else None
        return cls(row[0], row[1], row[2], row[3], row[4], tuple(sorted(groups or ())))

    def request(self) -> Key:
        """The same request without the session's groups."""
        return self._replace(groups=())


@dataclass
class Observations:
    allowed: set[Key] = field(default_factory=set)
    denied: set[Key] = field(default_factory=set)
    seen: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def settle(self) -> int:
        """Drop from `denied` every key whose request (the key without its groups) was also
        allowed, with any groups: it stays allowed (the proposal's user ACLs cannot tell the
        sessions apart, module docstring). Returns how many were dropped."""
        allowed = {k.request() for k in self.allowed}
        both = {k for k in self.denied if k.request() in allowed}
        self.denied -= both
        return len(both)


@dataclass
class Proposal:
    acls: list[dict[str, str]]
    conflicts: list[dict[str, object]]
    shapes: dict[str, dict[str, object]]
    iterations: int


def _implied_names() -> dict[str, frozenset[str]]:
    from aclgate.authz.model import IMPLIED_BY_ALLOW

    return {op.name: frozenset(i.name for i in implied) for op, implied in IMPLIED_BY_ALLOW.items()}


def candidate_prefixes(name: str) -> list[str]:
    """Prefixes of `name` that end at a separator, shortest first (never the whole name)."""
    return [name[: i + 1] for i, ch in enumerate(name[:-1]) if ch in SEPARATORS]


def _entries(allowed: Iterable[Key], pinned: set[tuple]) -> set[tuple]:
    """(principal, op, rtype, name, host) needed, implied operations left out."""
    implied = _implied_names()
    entries = set()
    for k in allowed:
        pin = (k.principal, k.operation, k.resource_type, k.resource_name) in pinned
        entries.add(
            (
                k.principal,
                k.operation,
                k.resource_type,
                k.resource_name,
                k.host if pin else WILDCARD_HOST,
            )
        )
    by_resource: dict[tuple, list[tuple]] = defaultdict(list)
    for e in entries:
        by_resource[(e[0], e[2], e[3])].append(e)
    keep = set()
    for group in by_resource.values():
        for e in group:
            covered = any(
                e[1] in implied.get(other[1], ()) and other[4] in (WILDCARD_HOST, e[4])
                for other in group
                if other is not e
            )
            if not covered:
                keep.add(e)
    return keep


def _collapse(names: set[str], seen: set[str], min_prefix: int) -> tuple[list[str], set[str]]:
    """(chosen prefixes, names left literal): shortest safe prefixes first."""
    if min_prefix < 1:
        return [], set(names)
    chosen: list[str] = []
    left = set(names)
    candidates = sorted(
        {p for n in names for p in candidate_prefixes(n)}, key=lambda p: (len(p), p)
    )
    for prefix in candidates:
        if any(prefix.startswith(c) for c in chosen):
            continue
        covered = {n for n in left if n.startswith(prefix)}
        if len(covered) < min_prefix:
            continue
        if all(s in names for s in seen if s.startswith(prefix)):
            chosen.append(prefix)
            left -= covered
    return chosen, left


def build(
    obs: Observations, min_prefix: int, pinned: set[tuple], literal_only: set[tuple]
) -> list[dict]:
    """The ACL set for the current constraints (pinned hosts, groups kept literal)."""
    entries = _entries(obs.allowed, pinned)
    groups: dict[tuple, set[str]] = defaultdict(set)
    acls = []
    for principal, op, rtype, name, host in entries:
        group = (principal, op, rtype)
        if host == WILDCARD_HOST and rtype in PREFIX_TYPES and group not in literal_only:
            groups[group].add(name)
        else:
            acls.append(acl_entry(rtype, name, principal, op, "LITERAL", host=host))
    for (principal, op, rtype), names in groups.items():
        prefixes, literal = _collapse(names, obs.seen.get(rtype, set()), min_prefix)
        acls += [acl_entry(rtype, p, principal, op, "PREFIXED") for p in prefixes]
        acls += [acl_entry(rtype, n, principal, op) for n in literal]
    return acls


def _decide(acls: list[dict], keys: Iterable[Key], super_users: tuple[str, ...]):
    from aclgate.authz.authorizer import Authorizer
    from aclgate.authz.model import AclBinding, AclOperation, ResourceType

    authorizer = Authorizer(super_users=super_users)
    authorizer.load([AclBinding.from_dict(a) for a in acls])
    for k in keys:
        yield (
            k,
            authorizer.authorize(
                k.principal,
                k.host,
                AclOperation[k.operation],
                ResourceType[k.resource_type],
                k.resource_name,
                frozenset(k.groups),
            ),
        )


def propose(obs: Observations, min_prefix: int = 3, super_users: tuple[str, ...] = ()) -> Proposal:
    """Build, check against every observed key with authz, refine until nothing denied is allowed."""
    pinned: set[tuple] = set()
    literal_only: set[tuple] = set()
    unresolvable: dict[Key, str] = {}
    iterations = 0
    while True:
        iterations += 1
        acls = build(obs, min_prefix, pinned, literal_only)
        changed = False
        for key, decision in _decide(acls, obs.denied - unresolvable.keys(), super_users):
            if not decision.allowed:
                continue
            acl = decision.acl
            if acl is None:
                unresolvable[key] = f"allowed by rule {decision.rule}"
                continue
            group = (acl.principal, acl.operation.name, acl.resource_type.name)
            target = (*group, acl.resource_name)
            if acl.pattern_type.name == "PREFIXED":
                changed |= group not in literal_only
                literal_only.add(group)
            elif acl.host == WILDCARD_HOST:
                changed |= target not in pinned
                pinned.add(target)
            else:
                unresolvable[key] = (
                    f"{acl.operation.name} on {acl.resource_type.name}:{acl.resource_name} from "
                    f"{acl.host} was allowed and implies {key.operation}"
                )
        if not changed:
            break
    missed = [k for k, d in _decide(acls, obs.allowed, super_users) if not d.allowed]
    if missed:  # a bug in build(), never a property of the input
        raise AssertionError(f"proposal denies observed allowed requests: {missed[:5]}")
    conflicts: list[dict[str, object]] = [
        {"request": k._asdict(), "why": why} for k, why in sorted(unresolvable.items())
    ]
    return Proposal(acls, conflicts, recognise_shapes(acls), iterations)


def recognise_shapes(acls: list[dict]) -> dict[str, dict[str, object]]:
    """Per principal: which of kafka-acls' convenience shapes the ACLs amount to."""
    by_principal: dict[str, dict[tuple[str, str], list[str]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for a in acls:
        star = "*" if a["pattern_type"] == "PREFIXED" else ""
        by_principal[a["principal"]][(a["resource_type"], a["operation"])].append(
            a["resource_name"] + star
        )
    out: dict[str, dict[str, object]] = {}
    for principal, grants in sorted(by_principal.items()):
        reads = grants.get(("TOPIC", "READ"), [])
        writes = grants.get(("TOPIC", "WRITE"), [])
        groups = grants.get(("GROUP", "READ"), [])
        txn = grants.get(("TRANSACTIONAL_ID", "WRITE"), [])
        shape = []
        if writes:
            shape.append("transactional producer" if txn else "producer")
        if reads and groups:
            shape.append("consumer")
        elif reads:
            shape.append("reader (no group)")
        other = sorted(
            f"{op} {rtype}"
            for (rtype, op) in grants
            if (rtype, op)
            not in {
                ("TOPIC", "READ"),
                ("TOPIC", "WRITE"),
                ("GROUP", "READ"),
                ("TRANSACTIONAL_ID", "WRITE"),
            }
        )
        out[principal] = {
            "shape": " + ".join(shape) or "custom",
            "produces_to": sorted(writes),
            "consumes_from": sorted(reads),
            "groups": sorted(groups),
            "transactional_ids": sorted(txn),
            "other": other,
        }
    return out


def removals(
    acls: list[dict],
    keys: Iterable[Key],
    candidates: list[dict],
    super_users: tuple[str, ...] = (),
    allow_everyone_if_no_acl_found: bool = False,
    cidr_hosts: bool = False,
) -> list[dict]:
    """The candidates (in order) that can be removed together without changing the verdict of
    any observed key: each is taken out only if every key on a resource it affects is still
    decided the same way without it and the ones taken out before it. So of two ACLs that
    cover each other, the first goes and the second stays, as the keys they both decide would
    change otherwise (an unused ACL, too, can matter: with allow.everyone.if.no.acl.found it
    may be the only ACL on a resource)."""
    from aclgate.authz.authorizer import Authorizer
    from aclgate.authz.model import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        PatternType,
        ResourceType,
    )

    authorizer = Authorizer(
        super_users=super_users,
        allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found,
        cidr_hosts=cidr_hosts,
    )
    authorizer.load([AclBinding.from_dict(a) for a in acls])

    def ask(k: Key) -> bool:
        return authorizer.authorize(
            k.principal,
            k.host,
            AclOperation[k.operation],
            ResourceType[k.resource_type],
            k.resource_name,
            frozenset(k.groups),
        ).allowed

    by_type: dict[str, list[Key]] = defaultdict(list)
    for k in keys:
        if k.operation in AclOperation.__members__ and k.resource_type in ResourceType.__members__:
            by_type[k.resource_type].append(k)
    verdict = {k: ask(k) for group in by_type.values() for k in group}
    removed = []
    for entry in candidates:
        acl = AclBinding.from_dict(entry)
        affected = [
            k
            for k in by_type.get(acl.resource_type.name, ())
            if AclBindingFilter(
                acl.resource_type, k.resource_name, PatternType.MATCH
            ).matches_pattern(acl)
        ]
        authorizer.update(remove=[acl])
        if all(ask(k) == verdict[k] for k in affected):
            removed.append(entry)
        else:
            authorizer.update(add=[acl])
    return removed
