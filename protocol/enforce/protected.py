"""Resources no policy can open: topics aclgate keeps for itself (the ACL store's topic, an
audit topic), denied to everyone but super users whatever the ACLs say.

A prefixed or wildcard ALLOW (`TOPIC:*`, `TOPIC:__`) must not hand out the ACL log: whoever
could write it could grant themselves anything, whoever could read it would learn the whole
policy (docs/authz.md, "Protected topics"). The check sits in front of the authorizer, in
the one call every topic decision goes through (AuthContext), so every API is covered: a
denied DESCRIBE hides the topic from Metadata, every other operation on it fails as
unauthorized. A denial is audited with the rule DEFAULT_DENY and no ACL, and is enforced in
every mode: a dry run (`--mode dry-run`, a dry-run scope) observes the policy, it never opens
the ACL log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aclgate.authz.decision import DEFAULT_DENY, Decision
from aclgate.authz.index import held_by
from aclgate.authz.model import AclOperation, ResourceType

#: (principal, host, operation, resource type, name, the session's group principals)
Authorize = Callable[[str, str, AclOperation, ResourceType, str, frozenset[str]], Decision]


#: the decision on a protected topic: DEFAULT_DENY's fields, but its own object, so the
#: context can tell it apart (`decision is PROTECTED`) and enforce it in dry-run too
PROTECTED = Decision(*DEFAULT_DENY)


def guard(
    authorize: Authorize, protected: frozenset[str], super_users: frozenset[str]
) -> Authorize:
    """`authorize`, with every topic in `protected` denied to all but `super_users`; the
    very same function when nothing is protected (the hot path pays nothing)."""
    if not protected:
        return authorize
    topic = ResourceType.TOPIC

    def guarded(
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        groups: frozenset[str],
    ) -> Decision:
        if (
            name in protected
            and resource_type == topic
            and not held_by(super_users, principal, groups)
        ):
            return PROTECTED
        return authorize(principal, host, operation, resource_type, name, groups)

    return guarded


def is_protected(
    policy_protected: frozenset[str],
    super_users: frozenset[str],
    principal: str,
    resource_type: ResourceType,
    name: str,
    groups: frozenset[str] = frozenset(),
) -> bool:
    """Whether `guard` denies this principal everything on the resource."""
    return (
        name in policy_protected
        and resource_type == ResourceType.TOPIC
        and not held_by(super_users, principal, groups)
    )


def cluster_grant_excludes(
    protected: frozenset[str],
    super_users: frozenset[str],
    principal: str,
    names: Iterable[str | None],
    groups: frozenset[str] = frozenset(),
) -> bool:
    """Whether a cluster-wide grant (DELETE CLUSTER deletes every topic, CREATE CLUSTER creates
    any) must not be taken as covering this request's topics: one of them is protected, or is
    named by an id (None) that may be one. Such a request goes the per-topic way instead."""
    if not protected or held_by(super_users, principal, groups):
        return False
    return any(n is None or n in protected for n in names)
