"""Issue 25 item 1: a session holds a user principal and group principals (`Group:NAME`);
an ACL on a group applies to every session in it, with Kafka's rules otherwise unchanged."""

from __future__ import annotations

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.index import held_by
from tests.authz.helpers import ALLOW, DENY, LIT, PRE, Op, T, acl

PAYMENTS = frozenset({"Group:payments"})
BOTH = frozenset({"Group:payments", "Group:contractors"})


def _authorizer(*bindings, **kwargs) -> Authorizer:
    a = Authorizer(**kwargs)
    a.load(bindings)
    return a


def test_a_group_acl_applies_to_its_members_only():
    a = _authorizer(acl(T, "orders", LIT, "Group:payments", "*", Op.READ, ALLOW))
    got = a.authorize("User:alice", "10.0.0.1", Op.READ, T, "orders", PAYMENTS)
    assert got.allowed and got.acl is not None and got.acl.principal == "Group:payments"
    assert not a.authorize("User:alice", "10.0.0.1", Op.READ, T, "orders").allowed
    # the cache keeps the two sessions of one user apart, in either order
    assert a.authorize("User:alice", "10.0.0.1", Op.READ, T, "orders", PAYMENTS).allowed


def test_deny_on_any_group_wins():
    a = _authorizer(
        acl(T, "orders", LIT, "Group:payments", "*", Op.READ, ALLOW),
        acl(T, "ord", PRE, "Group:contractors", "*", Op.ALL, DENY),
    )
    got = a.authorize("User:bob", "10.0.0.1", Op.READ, T, "orders", BOTH)
    assert not got.allowed and got.acl is not None and got.acl.principal == "Group:contractors"
    assert a.authorize("User:carol", "10.0.0.1", Op.READ, T, "orders", PAYMENTS).allowed


def test_user_wildcard_still_matches_users_and_group_wildcard_is_just_a_name():
    a = _authorizer(
        acl(T, "public", LIT, "User:*", "*", Op.READ, ALLOW),
        acl(T, "team", LIT, "Group:*", "*", Op.READ, ALLOW),
    )
    assert a.authorize("User:alice", "h", Op.READ, T, "public", PAYMENTS).allowed
    # Kafka's only wildcard principal is User:*; Group:* matches a group named `*` alone
    assert not a.authorize("User:alice", "h", Op.READ, T, "team", PAYMENTS).allowed
    assert a.authorize("User:alice", "h", Op.READ, T, "team", frozenset({"Group:*"})).allowed


def test_a_group_may_be_a_super_user():
    a = _authorizer(super_users=["Group:platform-admins"])
    admins = frozenset({"Group:platform-admins"})
    assert a.authorize("User:ops", "h", Op.ALTER, T, "x", admins).rule == "SUPER_USER"
    assert a.is_super_user("User:ops", admins) and not a.is_super_user("User:ops")
    assert a.authorize_by_resource_type("User:ops", "h", Op.WRITE, T, admins).allowed


def test_group_acls_are_acls_for_allow_everyone_if_no_acl_found():
    a = _authorizer(
        acl(T, "orders", LIT, "Group:payments", "*", Op.READ, ALLOW),
        allow_everyone_if_no_acl_found=True,
    )
    assert a.authorize("User:x", "h", Op.READ, T, "other").rule == "NO_ACL_DEFAULT"
    assert not a.authorize("User:x", "h", Op.READ, T, "orders").allowed  # an ACL exists


def test_the_groups_matched_follow_updates():
    binding = acl(T, "orders", LIT, "Group:payments", "*", Op.WRITE, ALLOW)
    a = _authorizer()
    assert not a.authorize("User:a", "h", Op.WRITE, T, "orders", PAYMENTS).allowed
    a.update(add=[binding])
    assert a.authorize("User:a", "h", Op.WRITE, T, "orders", PAYMENTS).allowed
    a.update(remove=[binding])
    assert not a.authorize("User:a", "h", Op.WRITE, T, "orders", PAYMENTS).allowed


def test_fifty_groups_without_acls_cost_no_extra_lookups():
    """A session in 50 groups of which none has an ACL matches rows of its user alone."""
    a = _authorizer(acl(T, "orders", LIT, "Group:payments", "*", Op.READ, ALLOW))
    many = frozenset(f"Group:g{i}" for i in range(50))
    assert a._snap is not None and many & a._snap.group_principals == frozenset()
    assert a.authorize("User:a", "h", Op.READ, T, "orders", many | PAYMENTS).allowed


def test_held_by_the_principal_or_one_of_its_groups():
    """index.held_by: the one test behind super users, the protected topics' guard and the
    dry-run principals."""
    chosen = frozenset({"User:admin", "Group:platform-admins"})
    assert held_by(chosen, "User:admin", frozenset())
    assert held_by(chosen, "User:ops", frozenset({"Group:x", "Group:platform-admins"}))
    assert not held_by(chosen, "User:ops", frozenset({"Group:x"}))
    assert not held_by(chosen, "User:ops", frozenset())
    assert not held_by(frozenset(), "User:admin", PAYMENTS)
