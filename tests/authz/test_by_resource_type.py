"""Suite D (Kafka's BaseAuthorizerTest: authorizeByResourceType under KRaft, the Authorizer
interface's default implementation) plus project case P4; docs/authz.md, "Tests ported from
Kafka" and "`authorizeByResourceType`"."""

from __future__ import annotations

import uuid

import pytest

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclBinding
from tests.authz.helpers import ALLOW, DENY, LIT, PRE, TX, C, G, Op, T, abrt, acl, loaded

U1, U2 = "User:user1", "User:user2"
H1, H2 = "192.168.1.1", "192.168.1.2"


@pytest.fixture
def names():
    return f"sb1{uuid.uuid4()}", f"sb2{uuid.uuid4()}"


def authorizer() -> Authorizer:
    return loaded(super_users=["User:superuser1", "User:superuser2"])


def topic(name, principal, host, op, perm) -> AclBinding:
    return acl(T, name, LIT, principal, host, op, perm)


def test_d1_multiple_add_and_remove(names):
    r1 = names[0]
    authz = authorizer()
    allow_read = topic(r1, U1, H1, Op.READ, ALLOW)
    deny_read = topic(r1, U1, H1, Op.READ, DENY)
    for _ in range(10):
        assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "DENY"
        authz.update(add=[allow_read])
        assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "ALLOW"
        for _ in range(10):
            authz.update(add=[deny_read])
            assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "DENY"
            authz.update(remove=[deny_read], add=[allow_read])
            assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "ALLOW"
        authz.update(remove=[allow_read])
        assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "DENY"


def test_d2_unrelated_deny_wont_dominate_allow(names):
    r1, r2 = names
    authz = authorizer()
    authz.update(
        add=[
            topic(r1, U1, H1, Op.READ, DENY),
            topic(r1, U2, H1, Op.READ, DENY),
            topic(r1, U1, H2, Op.WRITE, DENY),
            topic(r1, U2, H2, Op.READ, DENY),
            topic(r1, U1, H2, Op.READ, ALLOW),
            topic(r2, U1, H2, Op.READ, DENY),
            acl(G, "s", PRE, U1, H2, Op.READ, DENY),
        ]
    )
    assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "DENY"
    assert abrt(authz, f"{U1}@{H1}", Op.READ, G) == "DENY"
    assert abrt(authz, f"{U1}@{H1}", Op.READ, TX) == "DENY"
    assert abrt(authz, f"{U1}@{H1}", Op.READ, C) == "DENY"
    assert abrt(authz, f"{U1}@{H2}", Op.READ, T) == "ALLOW"


def test_d3_deny_takes_precedence(names):
    authz = authorizer()
    authz.update(add=[topic(names[0], U1, H1, Op.WRITE, ALLOW)])
    assert abrt(authz, f"{U1}@{H1}", Op.WRITE, T) == "ALLOW"
    authz.update(add=[topic(names[0], U1, H1, Op.WRITE, DENY)])
    assert abrt(authz, f"{U1}@{H1}", Op.WRITE, T) == "DENY"


def test_d4_prefixed_resource_deny_dominate():
    authz = authorizer()
    steps = [("abcde", ALLOW, "ALLOW"), ("abcd", DENY, "DENY"), ("abc", ALLOW, "ALLOW"),
             ("a", DENY, "DENY"), ("ab", ALLOW, "DENY")]  # fmt: skip
    for name, perm, expected in steps:
        authz.update(add=[acl(G, name, PRE, U1, H1, Op.READ, perm)])
        assert abrt(authz, f"{U1}@{H1}", Op.READ, G) == expected, name


def test_d5_wildcard_resource_deny_dominate():
    authz = authorizer()
    steps = [(acl(G, "hello", PRE, U1, H1, Op.WRITE, ALLOW), "ALLOW"),
             (acl(G, "*", LIT, U1, H1, Op.WRITE, DENY), "DENY"),
             (acl(G, "*", LIT, U1, H1, Op.WRITE, ALLOW), "DENY"),
             (acl(G, "aloha", LIT, U1, H1, Op.WRITE, ALLOW), "DENY")]  # fmt: skip
    for binding, expected in steps:
        authz.update(add=[binding])
        assert abrt(authz, f"{U1}@{H1}", Op.WRITE, G) == expected, binding


def test_d6_with_all_operation_ace(names):
    authz = authorizer()
    assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "DENY"
    authz.update(
        add=[topic(names[0], U1, H1, Op.WRITE, DENY), topic(names[0], U1, H1, Op.ALL, ALLOW)]
    )
    assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "ALLOW"
    authz.update(add=[topic(names[0], U1, H1, Op.ALL, DENY)])
    assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "DENY"


def test_d7_with_all_host_ace(names):
    r1, r2 = names
    authz = authorizer()
    assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "DENY"
    authz.update(add=[topic(r1, U1, H1, Op.READ, ALLOW)])
    assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "ALLOW"
    authz.update(add=[topic(r1, U1, "*", Op.READ, DENY)])
    assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "DENY"
    authz.update(add=[topic(r2, U1, H1, Op.READ, DENY)])
    assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "DENY"
    assert abrt(authz, f"{U1}@{H2}", Op.READ, T) == "DENY"
    authz.update(add=[topic(r2, U1, "*", Op.READ, ALLOW)])
    assert abrt(authz, f"{U1}@{H2}", Op.READ, T) == "ALLOW"
    authz.update(add=[topic(r2, U1, "*", Op.READ, DENY)])
    assert abrt(authz, f"{U1}@{H2}", Op.READ, T) == "DENY"


def test_d8_with_all_principal_ace(names):
    r1, r2 = names
    authz = authorizer()
    assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "DENY"
    authz.update(add=[topic(r1, U1, H1, Op.READ, ALLOW)])
    assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "ALLOW"
    authz.update(add=[topic(r1, "User:*", H1, Op.READ, DENY)])
    assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "DENY"
    authz.update(add=[topic(r2, U1, H1, Op.READ, DENY)])
    assert abrt(authz, f"{U1}@{H1}", Op.READ, T) == "DENY"
    assert abrt(authz, f"{U2}@{H1}", Op.READ, T) == "DENY"
    authz.update(add=[topic(r2, "User:*", H1, Op.READ, ALLOW)])
    assert abrt(authz, f"{U2}@{H1}", Op.READ, T) == "ALLOW"
    authz.update(add=[topic(r2, "User:*", H1, Op.READ, DENY)])
    assert abrt(authz, f"{U2}@{H1}", Op.READ, T) == "DENY"


@pytest.mark.parametrize("rtype", [T, C, G, TX])
def test_d9_super_user_has_access(rtype):
    authz = authorizer()
    authz.update(add=[acl(t, "*", LIT, "User:*", "*", Op.ALL, DENY) for t in (T, C, G, TX)])
    assert abrt(authz, "User:superuser1@192.0.4.4", Op.READ, rtype) == "ALLOW"
    assert authz.authorize_by_resource_type("User:superuser1", "1.1.1.1", Op.READ, rtype).rule == (
        "SUPER_USER"
    )


# P4: KRaft (decided) vs ZK
def test_p4_allow_everyone_does_not_short_circuit_when_probe_name_is_covered():
    authz = loaded([acl(T, "h", PRE, "User:bob", "*", Op.READ, ALLOW)], allow_everyone=True)
    assert abrt(authz, "User:alice@1.1.1.1", Op.WRITE, T) == "DENY"


def test_p4_probe_uses_implication():
    authz = loaded([acl(T, "hard", PRE, "User:alice", "*", Op.READ, ALLOW)])
    decision = authz.authorize_by_resource_type("User:alice", "1.1.1.1", Op.DESCRIBE, T)
    assert decision.allowed
    assert decision.acl == acl(T, "hard", PRE, "User:alice", "*", Op.READ, ALLOW)


def test_rejects_filter_values():
    authz = loaded()
    with pytest.raises(ValueError, match="non-filter resource type"):
        authz.authorize_by_resource_type(U1, H1, Op.READ, T.__class__.ANY)
    with pytest.raises(ValueError, match="Unknown operation type"):
        authz.authorize_by_resource_type(U1, H1, Op.UNKNOWN, T)


def test_rule_names_the_deciding_acl():
    wildcard_deny = acl(G, "*", LIT, U1, "*", Op.READ, DENY)
    allow = acl(T, "x", LIT, U1, "*", Op.READ, ALLOW)
    dominating = acl(T, "x", PRE, U1, "*", Op.ALL, DENY)
    authz = loaded([wildcard_deny, allow])
    assert authz.authorize_by_resource_type(U1, H1, Op.READ, G).acl == wildcard_deny
    assert authz.authorize_by_resource_type(U1, H1, Op.READ, T).acl == allow
    authz.update(add=[dominating])
    decision = authz.authorize_by_resource_type(U1, H1, Op.READ, T)
    assert (decision.allowed, decision.rule, decision.acl) == (False, "ACL", dominating)
    nothing = authz.authorize_by_resource_type(U2, H1, Op.READ, T)
    assert (nothing.allowed, nothing.rule) == (False, "NO_ACL_DEFAULT")  # the probe's rule
