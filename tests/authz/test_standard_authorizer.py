"""Suite A: Kafka's StandardAuthorizerTest (labels in docs/authz.md, "Tests ported from Kafka").

Not ported (Kafka-internal, no equivalent component here): A18 testStartWithEarlyStartListeners,
A20 testCompleteInitialLoad, A21 testCompleteInitialLoadWithException (per-listener start
futures); A14-A17 check the log line and level, which belong to the proxy's audit logger — the
`based on rule` part they pin is ported below through Decision.kafka_rule().
"""

from __future__ import annotations

import pytest

from aclgate.authz.authorizer import (
    Authorizer,
    AuthorizerNotReadyError,
    parse_allow_everyone,
    parse_super_users,
)
from aclgate.authz.model import AclBindingFilter, ResourceType
from tests.authz.helpers import (
    ALLOW,
    DENY,
    LIT,
    LOCAL,
    PRE,
    G,
    Op,
    T,
    acl,
    decide,
    loaded,
)

SUPERMAN = "User:superman"


def foo_acl(op, perm):
    return acl(T, "foo_", PRE, "User:bob", "*", op, perm)


def bar_acl(op, perm):
    return acl(G, "bar", LIT, "User:*", "*", op, perm)


# A1
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, []),
        (" ", []),
        ("User:bob;User:alice ", ["User:bob", "User:alice"]),
        (";  User:bob  ;  User:alice ", ["User:bob", "User:alice"]),
        (":alice", [":alice"]),
    ],
)
def test_a1_configured_super_users(value, expected):
    assert parse_super_users(value) == expected


def test_a1_invalid_super_user_message():
    with pytest.raises(ValueError) as err:
        parse_super_users("bob;:alice")
    assert str(err.value) == ("expected a string in format principalType:principalName but got bob")


# A2 (and C13's trimming)
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False),
        ("true", True),
        ("false", False),
        (" true ", True),
        ("TRUE", True),
        ("yes", False),
    ],
)
def test_a2_default_result(value, expected):
    assert parse_allow_everyone(value) is expected


# A3 / A4 / A5
@pytest.mark.parametrize(("allow_everyone", "topic2"), [(True, "ALLOW"), (False, "DENY")])
def test_a3_a4_allow_everyone_if_no_acl_found(allow_everyone, topic2):
    authz = loaded(
        [acl(T, "topic1", LIT, "User:Alice", "*", Op.READ, ALLOW)],
        super_users=parse_super_users("User:alice;User:chris"),
        allow_everyone=allow_everyone,
    )
    assert decide(authz, f"User:Bob@{LOCAL}", Op.READ, T, "topic1") == "DENY"
    assert decide(authz, f"User:Bob@{LOCAL}", Op.READ, T, "topic2") == topic2


def test_a5_configure():
    authz = Authorizer(
        super_users=parse_super_users("User:alice;User:chris"),
        allow_everyone_if_no_acl_found=parse_allow_everyone("true"),
    )
    assert authz.super_users == {"User:alice", "User:chris"}
    assert authz.allow_everyone_if_no_acl_found is True


def _single(binding, who, op, rtype, name):
    """Kafka's findResult through a full authorize with only that ACL: ALLOW / DENY / no match."""
    decision = loaded([binding]).authorize(*who.split("@"), op, rtype, name)
    if decision.rule == "ACL":
        assert decision.acl == binding
        return "ALLOW" if decision.allowed else "DENY"
    assert (decision.allowed, decision.rule) == (False, "DEFAULT_DENY")
    return "no match"


# A6
@pytest.mark.parametrize(
    ("binding", "op", "expected"),
    [
        *[
            (foo_acl(x, ALLOW), Op.DESCRIBE, "ALLOW")
            for x in (Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER)
        ],
        (foo_acl(Op.CREATE, ALLOW), Op.DESCRIBE, "no match"),
        *[
            (foo_acl(x, DENY), Op.DESCRIBE, "no match")
            for x in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER)
        ],
        (foo_acl(Op.DESCRIBE, DENY), Op.DESCRIBE, "DENY"),
        (foo_acl(Op.DESCRIBE_CONFIGS, ALLOW), Op.DESCRIBE_CONFIGS, "ALLOW"),
        (foo_acl(Op.ALTER_CONFIGS, ALLOW), Op.DESCRIBE_CONFIGS, "ALLOW"),
        (foo_acl(Op.ALTER_CONFIGS, DENY), Op.DESCRIBE_CONFIGS, "no match"),
        (foo_acl(Op.ALTER_CONFIGS, DENY), Op.ALTER_CONFIGS, "DENY"),
    ],
)
def test_a6_find_result_implication(binding, op, expected):
    assert _single(binding, f"User:bob@{LOCAL}", op, T, "foo_bar") == expected


# A7
@pytest.mark.parametrize(
    ("who", "rtype", "name", "binding", "expected"),
    [
        ("User:bob", T, "foo_bar", foo_acl(Op.READ, ALLOW), "ALLOW"),
        ("User:alice", T, "foo_bar", foo_acl(Op.READ, ALLOW), "no match"),
        ("User:alice", G, "bar", bar_acl(Op.READ, DENY), "DENY"),
    ],
)
def test_a7_find_result_principal_matching(who, rtype, name, binding, expected):
    assert _single(binding, f"{who}@{LOCAL}", Op.READ, rtype, name) == expected


# A8
def test_a8_list_acls_in_index_order():
    foo_read, foo_write = foo_acl(Op.READ, ALLOW), foo_acl(Op.WRITE, ALLOW)
    bar_dc, bar_ac = bar_acl(Op.DESCRIBE_CONFIGS, DENY), bar_acl(Op.ALTER_CONFIGS, DENY)
    authz = loaded([bar_ac, foo_write, bar_dc, foo_read])
    assert authz.acls(AclBindingFilter.ANY) == [foo_read, foo_write, bar_dc, bar_ac]
    authz.update(remove=[foo_write])
    assert authz.acls() == [foo_read, bar_dc, bar_ac]
    assert authz.acls(AclBindingFilter(ResourceType.TOPIC)) == [foo_read]


# A9
def test_a9_simple_authorizations():
    authz = loaded(
        [
            foo_acl(Op.READ, ALLOW),
            foo_acl(Op.WRITE, ALLOW),
            bar_acl(Op.DESCRIBE_CONFIGS, ALLOW),
            bar_acl(Op.ALTER_CONFIGS, ALLOW),
        ]
    )
    assert decide(authz, f"User:bob@{LOCAL}", Op.READ, T, "foo_") == "ALLOW"
    assert decide(authz, f"User:fred@{LOCAL}", Op.ALTER_CONFIGS, G, "bar") == "ALLOW"


# A10
@pytest.mark.parametrize(
    ("who", "op", "name", "expected"),
    [
        ("User:alice", Op.WRITE, "foo", "DENY"),
        ("User:alice", Op.READ, "foo", "DENY"),
        ("User:alice", Op.DESCRIBE, "foo", "DENY"),
        ("User:alice", Op.READ, "foobar", "ALLOW"),
        ("User:bob", Op.DESCRIBE, "foo", "DENY"),
        ("User:bob", Op.READ, "foo", "DENY"),
        ("User:bob", Op.WRITE, "foo", "DENY"),
        ("User:bob", Op.DESCRIBE, "foobaz", "ALLOW"),
        ("User:bob", Op.READ, "foobaz", "DENY"),
    ],
)
def test_a10_deny_precedence_with_operation_all(who, op, name, expected):
    authz = loaded(
        [
            acl(T, "foo", LIT, "User:alice", "*", Op.ALL, DENY),
            acl(T, "foo", PRE, "User:alice", "*", Op.READ, ALLOW),
            acl(T, "foo", LIT, "User:*", "*", Op.ALL, DENY),
            acl(T, "foo", PRE, "User:*", "*", Op.DESCRIBE, ALLOW),
        ]
    )
    assert decide(authz, f"{who}@{LOCAL}", op, T, name) == expected


# A11
@pytest.mark.parametrize(
    ("who", "op", "name", "expected"),
    [
        ("User:alice", Op.WRITE, "foo", "ALLOW"),
        ("User:alice", Op.DESCRIBE_CONFIGS, "bar", "ALLOW"),
        ("User:alice", Op.DESCRIBE, "baz", "DENY"),
        ("User:bob", Op.WRITE, "foo", "ALLOW"),
        ("User:bob", Op.READ, "bar", "DENY"),
        ("User:bob", Op.DESCRIBE, "baz", "ALLOW"),
        ("User:malory", Op.DESCRIBE, "foo", "ALLOW"),
        ("User:malory", Op.WRITE, "bar", "DENY"),
        ("User:malory", Op.READ, "baz", "DENY"),
    ],
)
def test_a11_topic_acl_with_operation_all(who, op, name, expected):
    authz = loaded(
        [
            acl(T, "foo", LIT, "User:*", "*", Op.ALL, ALLOW),
            acl(T, "bar", PRE, "User:alice", "*", Op.ALL, ALLOW),
            acl(T, "baz", LIT, "User:bob", "*", Op.ALL, ALLOW),
        ]
    )
    assert decide(authz, f"{who}@{LOCAL}", op, T, name) == expected


# A12
H1, H2 = "192.168.1.1", "192.168.1.2"


@pytest.mark.parametrize(
    ("who", "read_foo", "read_bar", "describe_bar"),
    [
        (f"User:alice@{LOCAL}", "ALLOW", "DENY", "ALLOW"),
        (f"User:alice@{H1}", "DENY", "DENY", "DENY"),
        (f"User:alice@{H2}", "ALLOW", "DENY", "DENY"),
        (f"User:bob@{LOCAL}", "DENY", "DENY", "ALLOW"),
        (f"User:bob@{H1}", "DENY", "DENY", "DENY"),
        (f"User:bob@{H2}", "DENY", "ALLOW", "ALLOW"),
    ],
)
def test_a12_host_address_acl_validation(who, read_foo, read_bar, describe_bar):
    authz = loaded(
        [
            acl(T, "foo", LIT, "User:alice", H1, Op.READ, DENY),
            acl(T, "foo", LIT, "User:alice", "*", Op.READ, ALLOW),
            acl(T, "bar", LIT, "User:bob", H2, Op.READ, ALLOW),
            acl(T, "bar", LIT, "User:*", LOCAL, Op.DESCRIBE, ALLOW),
        ]
    )
    assert decide(authz, who, Op.READ, T, "foo") == read_foo
    assert decide(authz, who, Op.READ, T, "bar") == read_bar
    assert decide(authz, who, Op.DESCRIBE, T, "bar") == describe_bar


# The ACL set M of A13 - A17.
M = [
    acl(T, "green2", LIT, "User:*", "*", Op.READ, ALLOW),
    acl(T, "green", PRE, "User:bob", "*", Op.READ, ALLOW),
    acl(T, "betamax4", LIT, "User:bob", "*", Op.READ, ALLOW),
    acl(T, "betamax", LIT, "User:bob", "*", Op.READ, ALLOW),
    acl(T, "beta", PRE, "User:*", "*", Op.READ, ALLOW),
    acl(T, "alpha", PRE, "User:*", "*", Op.READ, ALLOW),
    acl(T, "alp", PRE, "User:bob", "*", Op.READ, DENY),
    acl(G, "*", LIT, "User:bob", "*", Op.WRITE, ALLOW),
    acl(G, "wheel", LIT, "User:*", "*", Op.WRITE, DENY),
]


# A13
@pytest.mark.parametrize(
    ("op", "rtype", "name", "expected"),
    [
        (Op.READ, T, "green1", "ALLOW"),
        (Op.WRITE, G, "wheel", "DENY"),
        (Op.READ, T, "alpha", "DENY"),
        (Op.WRITE, G, "arbitrary", "ALLOW"),
        (Op.READ, T, "ala", "DENY"),
    ],
)
def test_a13_authorization_with_many_acls(op, rtype, name, expected):
    assert decide(loaded(M), f"User:bob@{LOCAL}", op, rtype, name) == expected


# A14 / A15: the rule part of the exact audit line
def test_a14_deny_audit_rule():
    decision = loaded(M).authorize("User:bob", "127.0.0.1", Op.READ, T, "alpha")
    assert not decision.allowed
    assert decision.kafka_rule() == (
        "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=alp, patternType=PREFIXED, "
        "principal=User:bob, host=*, operation=READ, permissionType=DENY))"
    )
    assert decision.rule == "ACL"
    assert decision.acl.to_dict() == {
        "resource_type": "TOPIC",
        "resource_name": "alp",
        "pattern_type": "PREFIXED",
        "principal": "User:bob",
        "host": "*",
        "operation": "READ",
        "permission_type": "DENY",
    }


# A16 / A17
def test_a16_allow_audit_rule():
    decision = loaded(M).authorize("User:bob", "127.0.0.1", Op.READ, T, "green1")
    assert decision.allowed
    assert decision.kafka_rule() == (
        "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=green, patternType=PREFIXED, "
        "principal=User:bob, host=*, operation=READ, permissionType=ALLOW))"
    )


# A19
def test_a19_authorization_prior_to_complete_initial_load():
    authz = Authorizer(super_users=[SUPERMAN])
    assert not authz.ready
    with pytest.raises(AuthorizerNotReadyError):
        authz.authorize("User:bob", LOCAL, Op.READ, T, "green1")
    with pytest.raises(AuthorizerNotReadyError):
        authz.authorize_by_resource_type("User:bob", LOCAL, Op.READ, T)
    assert authz.authorize(SUPERMAN, LOCAL, Op.READ, T, "green1").allowed
    assert authz.authorize(SUPERMAN, LOCAL, Op.WRITE, G, "wheel").allowed
    authz.load(M)
    assert authz.ready
    assert decide(authz, f"User:bob@{LOCAL}", Op.READ, T, "green1") == "ALLOW"


# A22
@pytest.mark.parametrize(
    ("who", "op", "name", "expected"),
    [
        ("User:bob", Op.WRITE, "foobarr", "ALLOW"),
        ("User:bob", Op.READ, "goobar", "DENY"),
        ("User:bob", Op.READ, "fooa", "ALLOW"),
        ("User:alice", Op.DESCRIBE, "fooa", "ALLOW"),
        ("User:alice", Op.WRITE, "bar", "DENY"),
        ("User:alice", Op.READ, "baz", "DENY"),
    ],
)
def test_a22_prefix_acls(who, op, name, expected):
    authz = loaded(
        [
            acl(T, "fooa", PRE, "User:alice", "*", Op.ALL, ALLOW),
            acl(T, "foobar", LIT, "User:bob", "*", Op.ALL, ALLOW),
            acl(T, "f", PRE, "User:bob", "*", Op.ALL, ALLOW),
        ]
    )
    assert decide(authz, f"{who}@{LOCAL}", op, T, name) == expected
