"""The authorizer the proxy calls for every resource of every request.

Semantics are Kafka's StandardAuthorizer (docs/authz.md, "How a decision is made"), except the
one deliberate difference: a LITERAL `*` ACL matches every name, also names starting with `*`
(docs/authz.md, "The literal `*` ACL"). With `cidr_hosts=True` an ACL host with `/` is a network
(KIP-1276, beyond Kafka 4.3.1: docs/authz.md, "CIDR hosts (KIP-1276, opt-in)").

Reads are lock-free: a decision reads one immutable Snapshot (index + its decision cache).
Writers (`load`, `update`) serialise on a lock, build the next snapshot off to the side and
publish it with one assignment, so readers on other threads never see half a batch.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Final

from aclgate.authz import byresourcetype
from aclgate.authz.decision import (
    NO_ACL_ALLOW,
    NO_ACL_DENY,
    RULE_ACL,
    RULE_DEFAULT_DENY,
    RULE_NO_ACL_DEFAULT,
    RULE_SUPER_USER,
    SUPER_USER,
    Decision,
)
from aclgate.authz.index import held_by, is_group_principal
from aclgate.authz.model import (
    FILTER_ONLY_TYPES,
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    FilterMatches,
    InvalidAclError,
    PatternType,
    ResourceType,
    match_filters,
    parse_principal,
    scan,
)
from aclgate.authz.snapshot import Snapshot

#: a session without group principals
NO_GROUPS: Final[frozenset[str]] = frozenset()

__all__ = [
    "NO_GROUPS",
    "RULE_ACL",
    "RULE_DEFAULT_DENY",
    "RULE_NO_ACL_DEFAULT",
    "RULE_SUPER_USER",
    "Authorizer",
    "AuthorizerNotReadyError",
    "Decision",
    "parse_allow_everyone",
    "parse_super_users",
]


class AuthorizerNotReadyError(Exception):
    """No ACLs loaded yet; Kafka's AuthorizerNotReadyException (UNKNOWN_SERVER_ERROR on the wire)."""


def parse_super_users(value: str | None) -> list[str]:
    """KRaft's `super.users`: split on `;`, trim, skip empty elements, each must be `type:name`
    (test A1). Returned in the given order, without duplicates."""
    users: list[str] = []
    for part in (value or "").split(";"):
        user = part.strip()
        if user:
            parse_principal(user)
            if user not in users:
                users.append(user)
    return users


def parse_allow_everyone(value: str | None) -> bool:
    """KRaft's `allow.everyone.if.no.acl.found`: Java Boolean.parseBoolean of the trimmed value."""
    return (value or "").strip().lower() == "true"


def _check_indexable(b: AclBinding) -> None:
    """What the index needs to be well-defined. Kafka's create-time validation (empty names,
    cluster name, principal format) is AclBinding.validate(), applied where ACLs are created;
    like StandardAuthorizer.addAcl, the authorizer itself accepts what it is given."""
    if (
        b.resource_type in FILTER_ONLY_TYPES
        or b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED)
        or b.operation <= AclOperation.ANY
        or b.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY)
    ):
        raise ValueError(f"not a storable ACL: {b}")


def _checked(bindings: Iterable[AclBinding]) -> list[AclBinding]:
    out = list(bindings)
    for b in out:
        _check_indexable(b)
    return out


class Authorizer:
    """ACL decisions with Kafka's semantics; see the module docstring for threading."""

    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        cache_size: int = 100_000,
        prebuild_by_resource_type: Iterable[ResourceType] = (),
        cidr_hosts: bool = False,
    ) -> None:
        self._super_users = frozenset(super_users)
        #: the super users that are groups (`Group:platform-admins`): most policies have none,
        #: and then a session's groups are never compared with them
        self._super_groups = frozenset(u for u in self._super_users if is_group_principal(u))
        #: KIP-1276, opt-in: a host with `/` is a network, validated where ACLs are created
        #: (create_acls, the ACL file, the kafka store); off: a literal string, as Kafka 4.3.1
        self._cidr = cidr_hosts
        #: types whose authorize_by_resource_type view is built by the writer, before the
        #: snapshot is published: the proxy loads ACLs off the event loop, and a view built on
        #: first use would stall every connection (~0.75 s at 600k ACLs)
        self._prebuild = tuple(prebuild_by_resource_type)
        for user in self._super_users:
            parse_principal(user)
        self._no_acl = NO_ACL_ALLOW if allow_everyone_if_no_acl_found else NO_ACL_DENY
        self._cache_size = cache_size
        self._snap: Snapshot | None = None
        self._write_lock = threading.Lock()

    # ------------------------------------------------------------------ configuration / state

    @property
    def super_users(self) -> frozenset[str]:
        return self._super_users

    @property
    def allow_everyone_if_no_acl_found(self) -> bool:
        return self._no_acl.allowed

    @property
    def cidr_hosts(self) -> bool:
        """Hosts with `/` are networks (KIP-1276, opt-in); False: compared as strings."""
        return self._cidr

    @property
    def ready(self) -> bool:
        """True once the first `load()` (or `update()`) has happened."""
        return self._snap is not None

    @property
    def version(self) -> int:
        """Bumps on every change of the ACL set; 0 before the first load."""
        snap = self._snap
        return snap.version if snap is not None else 0

    def acl_count(self) -> int:
        snap = self._snap
        return snap.count if snap is not None else 0

    # ------------------------------------------------------------------ decisions

    def is_super_user(self, principal: str, groups: frozenset[str] = NO_GROUPS) -> bool:
        """`principal`, or one of the session's `groups`, is a super user."""
        return held_by(self._super_users, principal, groups)

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
        groups: frozenset[str] = NO_GROUPS,
    ) -> Decision:
        """Decide one action on a LITERAL resource name (queries are names, never patterns).

        `host` is the client IP as Java formats it (docs/authz.md, "Hosts"). `groups`: the
        session's group principals (`Group:NAME`), whose ACLs apply to it as its own do
        (docs/authz.md, "Group principals"). Raises AuthorizerNotReadyError for everyone but
        super users until the first load.
        """
        # held_by(self._super_users, ...), inlined for the hot path: a call costs more than
        # the test, and most sessions have no groups and no group is a super user
        if principal in self._super_users:
            return SUPER_USER
        if groups:
            super_groups = self._super_groups
            if super_groups and not super_groups.isdisjoint(groups):
                return SUPER_USER
            # a frozenset keeps its hash: a session's groups cost one more slot in the key
            key: tuple[object, ...] = (
                principal,
                host,
                operation,
                resource_type,
                resource_name,
                groups,
            )
        else:
            key = (principal, host, operation, resource_type, resource_name)
        snap = self._snap
        if snap is None:
            raise AuthorizerNotReadyError("The authorizer has not loaded its ACLs yet.")
        cache = snap.cache
        decision = cache.young.get(key)  # the common hit, without a call; then the full get
        if decision is None:
            decision = cache.get(key)
        if decision is None:
            index = snap.types.get(resource_type)
            if index is None:
                decision = self._no_acl
            else:
                decision = index.decide(
                    principal,
                    host,
                    operation,
                    resource_name,
                    self._no_acl,
                    groups & snap.group_principals if groups else (),
                )
            cache.put(key, decision)
        return decision

    def authorize_by_resource_type(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        groups: frozenset[str] = NO_GROUPS,
    ) -> Decision:
        """KIP-679: may the caller do `operation` on at least one resource of the type?
        Kafka's default-interface algorithm, which KRaft uses (docs/authz.md,
        "`authorizeByResourceType`")."""
        if resource_type == ResourceType.ANY:
            raise ValueError("Must specify a non-filter resource type for authorizeByResourceType")
        if resource_type == ResourceType.UNKNOWN:
            raise ValueError("Unknown resource type")
        if operation == AclOperation.ANY:
            raise ValueError("Must specify a non-filter operation type for authorizeByResourceType")
        if operation == AclOperation.UNKNOWN:
            raise ValueError("Unknown operation type")
        if self.is_super_user(principal, groups):
            return SUPER_USER
        snap = self._snap
        if snap is None:
            raise AuthorizerNotReadyError("The authorizer has not loaded its ACLs yet.")
        key = (principal, host, operation, resource_type, None, groups)
        decision = snap.cache.get(key)
        if decision is None:
            decision = byresourcetype.decide(
                snap.type_groups(resource_type),
                principal,
                host,
                operation,
                lambda: self.authorize(
                    principal, host, operation, resource_type, byresourcetype.PROBE_NAME, groups
                ),
                groups & snap.group_principals if groups else (),
                snap.cidr_hosts(resource_type, host) if snap.cidr else (),
            )
            snap.cache.put(key, decision)
        return decision

    def authorized_operations(
        self,
        principal: str,
        host: str,
        resource_type: ResourceType,
        resource_name: str,
        groups: frozenset[str] = NO_GROUPS,
    ) -> int:
        """The 32-bit authorized-operations field: bit `1 << code` per supported, allowed
        operation of the type (docs/authz.md, "Operations per resource type"; ALL is never a
        bit)."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, resource_name, groups).allowed:
                bits |= 1 << op
        return bits

    # ------------------------------------------------------------------ the ACL set

    def load(self, bindings: Iterable[AclBinding]) -> None:
        """Replace every ACL with `bindings` (duplicates collapse) and mark the authorizer ready."""
        unique = set(_checked(bindings))
        with self._write_lock:
            old = self._snap
            if old is not None and old.count == len(unique) and unique == old.binding_set():
                return  # same ACL set: keep the snapshot and its warm cache
            version = old.version + 1 if old is not None else 1
            self._publish(Snapshot.build(unique, version, self._cache_size, self._cidr))

    def update(self, add: Iterable[AclBinding] = (), remove: Iterable[AclBinding] = ()) -> None:
        """One atomic batch: `remove` is applied first, then `add` (so a binding in both ends up
        present). Readers see the ACL set before or after the whole batch, never in between."""
        add, remove = _checked(add), list(remove)
        with self._write_lock:
            self._apply(remove, add)

    def _apply(self, remove: list[AclBinding], add: list[AclBinding]) -> None:
        """Publish the next snapshot; the caller holds the write lock."""
        old = self._snap
        base = old if old is not None else Snapshot({}, 0, self._cache_size, self._cidr)
        new = base.apply(remove, add, base.version + 1, self._cache_size)
        if new is None and old is None:
            new = Snapshot({}, 1, self._cache_size, self._cidr)
        if new is not None:
            self._publish(new)

    def _publish(self, snap: Snapshot) -> None:
        for rtype in self._prebuild:
            snap.type_groups(rtype)
        self._snap = snap

    def create_acls(self, bindings: Iterable[AclBinding]) -> list[InvalidAclError | None]:
        """CreateAcls: validate each binding as Kafka does (with `cidr_hosts`, a host with `/`
        must be a network) and add the valid ones in one batch. One result per binding (None =
        created, or already present)."""
        results: list[InvalidAclError | None] = []
        valid = []
        for b in bindings:
            try:
                b.validate(cidr_hosts=self._cidr)
            except InvalidAclError as exc:
                results.append(exc)
            else:
                results.append(None)
                valid.append(b)
        self.update(add=valid)
        return results

    def delete_acls(
        self, filters: Iterable[AclBindingFilter]
    ) -> list[list[AclBinding] | InvalidAclError]:
        """DeleteAcls with KRaft semantics (docs/authz.md, "Managing ACLs"): every filter
        reports every ACL it matches, even one another filter also matched; all removals are
        one atomic batch."""
        with self._write_lock:
            results, doomed = self.match_filters(filters)
            if doomed:
                self._apply(doomed, [])
        return results

    def match_filters(self, filters: Iterable[AclBindingFilter]) -> FilterMatches:
        """`model.match_filters` over one snapshot, through its index (Snapshot.matching)."""
        snap = self._snap
        return match_filters(snap.matching if snap is not None else scan(()), filters)

    def acls(self, filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """ACLs matching `filter` (all when None), from one snapshot, in Kafka's index order."""
        snap = self._snap
        if snap is None:
            return []
        return snap.matching(filter or AclBindingFilter.ANY)
