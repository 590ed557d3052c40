"""Suite C: Kafka's AuthorizerTest, KRaft cases (docs/authz.md, "Tests ported from Kafka").

Not ported: C1 testAuthorizeThrowsOnNonLiteralResource — a query here is a resource *name*, so a
non-LITERAL query cannot be expressed; C5 / C9 (custom KafkaPrincipal subclasses) — principals
are plain `type:name` strings here, so there is nothing to normalise; C31-C46 are ZooKeeper-only
(znode storage, change notifications, ZK TLS config, IBP checks, lagging ZK caches).
"""

from __future__ import annotations

import uuid

import pytest

from aclgate.authz.authorizer import Authorizer, parse_allow_everyone, parse_super_users
from aclgate.authz.model import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    InvalidAclError,
    PatternType,
    ResourceType,
)
from tests.authz.helpers import ALLOW, DENY, LIT, PRE, C, G, Op, T, abrt, decide

SUPER_USERS = "User:superuser1; User:superuser2"
ALICE = "User:alice@192.168.0.1"


def fixture(allow_everyone: bool = False) -> Authorizer:
    authz = Authorizer(
        super_users=parse_super_users(SUPER_USERS), allow_everyone_if_no_acl_found=allow_everyone
    )
    authz.load([])
    return authz


def on(resource: tuple, principal: str, host: str, op: Op, perm) -> AclBinding:
    """An entry attached to a resource pattern (type, name, pattern)."""
    return AclBinding(*resource, principal, host, op, perm)


def allow_read(resource):
    return on(resource, "User:*", "*", Op.READ, ALLOW)


def allow_write(resource):
    return on(resource, "User:*", "*", Op.WRITE, ALLOW)


def deny_read(resource):
    return on(resource, "User:*", "*", Op.READ, DENY)


def fresh_resource():
    return (T, f"foo-{uuid.uuid4()}", LIT)


W = (T, "*", LIT)
PX = (T, "foo", PRE)
CL = (C, CLUSTER_NAME, LIT)


def entries_on(authz: Authorizer, resource) -> set[AclBinding]:
    return set(authz.acls(AclBindingFilter(*resource)))


def create(authz: Authorizer, *bindings: AclBinding) -> None:
    assert authz.create_acls(bindings) == [None] * len(bindings)


def remove(authz: Authorizer, *bindings: AclBinding) -> None:
    authz.delete_acls([b.to_filter() for b in bindings])


def test_c2_empty_resource_name():
    authz = fixture()
    assert decide(authz, ALICE, Op.READ, G, "") == "DENY"
    create(authz, allow_read((G, "*", LIT)))
    assert decide(authz, ALICE, Op.READ, G, "") == "ALLOW"


def test_c3_empty_acl_name_is_rejected():
    authz = fixture()
    [result] = authz.create_acls([allow_read((G, "", LIT))])
    assert isinstance(result, InvalidAclError)
    assert str(result) == "Invalid empty resource name"
    assert authz.acls() == []


def test_c4_topic_acl():
    h1, h2 = "192.168.1.1", "192.168.1.2"
    r = fresh_resource()
    authz = fixture()
    create(
        authz,
        on(r, "User:alice", h1, Op.READ, ALLOW),
        on(r, "User:alice", h2, Op.READ, ALLOW),
        on(r, "User:alice", h1, Op.READ, DENY),
        on(r, "User:alice", h1, Op.WRITE, ALLOW),
        on(r, "User:alice", "*", Op.DESCRIBE, ALLOW),
        on(r, "User:rob", "*", Op.READ, ALLOW),
        on(r, "User:batman", "*", Op.WRITE, ALLOW),
    )
    name = r[1]
    expected = [
        (f"User:alice@{h2}", Op.READ, "ALLOW"),
        (f"User:alice@{h1}", Op.READ, "DENY"),
        (f"User:alice@{h1}", Op.WRITE, "ALLOW"),
        (f"User:alice@{h2}", Op.WRITE, "DENY"),
        (f"User:alice@{h1}", Op.DESCRIBE, "ALLOW"),
        (f"User:alice@{h2}", Op.DESCRIBE, "ALLOW"),
        (f"User:alice@{h1}", Op.ALTER, "DENY"),
        (f"User:alice@{h2}", Op.ALTER, "DENY"),
        (f"User:rob@{h1}", Op.DESCRIBE, "ALLOW"),
        (f"User:batman@{h1}", Op.DESCRIBE, "ALLOW"),
        (f"User:rob@{h1}", Op.READ, "ALLOW"),
        (f"User:batman@{h1}", Op.WRITE, "ALLOW"),
    ]
    assert [(who, op, decide(authz, who, op, T, name)) for who, op, _ in expected] == expected


def test_c6_deny_takes_precedence():
    r = fresh_resource()
    authz = fixture()
    create(
        authz, on(r, "User:*", "*", Op.ALL, ALLOW), on(r, "User:alice", "192.168.2.1", Op.ALL, DENY)
    )
    assert decide(authz, "User:alice@192.168.2.1", Op.READ, T, r[1]) == "DENY"


def test_c7_allow_all_access():
    r = fresh_resource()
    authz = fixture()
    create(authz, on(r, "User:*", "*", Op.ALL, ALLOW))
    assert decide(authz, "User:random@192.0.4.4", Op.READ, T, r[1]) == "ALLOW"


def test_c8_super_user_has_access():
    r = fresh_resource()
    authz = fixture()
    create(authz, on(r, "User:*", "*", Op.ALL, DENY))
    for su in ("User:superuser1", "User:superuser2"):
        decision = authz.authorize(su, "192.0.4.4", Op.READ, T, r[1])
        assert (decision.allowed, decision.rule, decision.kafka_rule()) == (
            True,
            "SUPER_USER",
            "SuperUser",
        )


def test_c10_wildcard_acls():
    r = fresh_resource()
    authz = fixture()
    assert decide(authz, ALICE, Op.READ, T, r[1]) == "DENY"
    create(authz, on(W, "User:alice", "192.168.3.1", Op.READ, ALLOW))
    assert decide(authz, "User:alice@192.168.3.1", Op.READ, T, r[1]) == "ALLOW"
    create(
        authz,
        on(r, "User:alice", "192.168.3.1", Op.WRITE, ALLOW),
        on(W, "User:alice", "192.168.3.1", Op.WRITE, DENY),
    )
    assert decide(authz, "User:alice@192.168.3.1", Op.WRITE, T, r[1]) == "DENY"


def test_c11_no_acl_found():
    decision = fixture().authorize("User:alice", "192.168.0.1", Op.READ, T, "x")
    assert (decision.allowed, decision.rule, decision.kafka_rule()) == (
        False,
        "NO_ACL_DEFAULT",
        "DefaultDeny",
    )


def test_c12_no_acl_found_override():
    decision = fixture(allow_everyone=True).authorize("User:alice", "192.168.0.1", Op.READ, T, "x")
    assert (decision.allowed, decision.rule, decision.kafka_rule()) == (
        True,
        "NO_ACL_DEFAULT",
        "DefaultAllow",
    )


def test_c13_config_with_whitespace():
    authz = Authorizer(
        super_users=parse_super_users("  User:superuser1 ;  User:superuser2  "),
        allow_everyone_if_no_acl_found=parse_allow_everyone(" true"),
    )
    authz.load([])
    assert decide(authz, ALICE, Op.READ, T, "anything") == "ALLOW"
    assert authz.super_users == {"User:superuser1", "User:superuser2"}


def test_c14_acl_management_apis():
    r = fresh_resource()
    authz = fixture()
    a1 = on(r, "User:alice", "host1", Op.READ, ALLOW)
    a2 = on(r, "User:alice", "host1", Op.WRITE, ALLOW)
    a3 = on(r, "User:bob", "host2", Op.READ, ALLOW)
    a4 = on(r, "User:bob", "host2", Op.WRITE, ALLOW)
    a5 = on(r, "User:bob", "*", Op.READ, ALLOW)
    create(authz, a1, a2, a3, a4)
    assert entries_on(authz, r) == {a1, a2, a3, a4}
    create(authz, a5)
    assert entries_on(authz, r) == {a1, a2, a3, a4, a5}
    assert set(authz.acls(AclBindingFilter(principal="User:alice"))) == {a1, a2}
    assert set(authz.acls(AclBindingFilter(principal="User:bob"))) == {a3, a4, a5}

    def entry(resource, b):
        return on(resource, b.principal, b.host, b.operation, b.permission_type)

    extra = [
        on(W, "User:bob", "*", Op.READ, ALLOW),
        on((C, "*", LIT), "User:bob", "host1", Op.READ, ALLOW),
        *[entry((G, "*", LIT), b) for b in (a1, a2, a3, a4, a5)],
        *[entry((G, "test-ConsumerGroup", LIT), b) for b in (a1, a2, a3, a4, a5)],
    ]
    authz.update(add=extra)  # (C, "*") fails Kafka's create validation, so add it directly
    assert set(authz.acls()) == {a1, a2, a3, a4, a5, *extra}
    remove(authz, a1, a5)
    assert entries_on(authz, r) == {a2, a3, a4}
    authz.delete_acls([AclBindingFilter(*r)])
    assert entries_on(authz, r) == set()
    create(authz, a1)
    remove(authz, a1)
    assert entries_on(authz, r) == set()


def test_c15_two_separate_creates_on_one_resource():
    authz = fixture()
    r = (T, "test", LIT)
    create(authz, on(r, "User:alice", "*", Op.READ, ALLOW))
    create(authz, on(r, "User:bob", "*", Op.READ, DENY))
    assert entries_on(authz, r) == {
        on(r, "User:alice", "*", Op.READ, ALLOW),
        on(r, "User:bob", "*", Op.READ, DENY),
    }


ALL_13 = [o for o in Op if o not in (Op.ANY, Op.UNKNOWN)]


@pytest.mark.parametrize(
    ("setup", "allowed"),
    [
        ([(Op.ALL, ALLOW)], set(ALL_13)),
        ([(Op.ALL, DENY), (Op.ALL, ALLOW)], set()),
        ([(Op.READ, ALLOW)], {Op.READ, Op.DESCRIBE}),
        ([(Op.WRITE, ALLOW)], {Op.WRITE, Op.DESCRIBE}),
        ([(Op.DELETE, ALLOW)], {Op.DELETE, Op.DESCRIBE}),
        ([(Op.ALTER, ALLOW)], {Op.ALTER, Op.DESCRIBE}),
        ([(Op.DESCRIBE, DENY), (Op.ALL, ALLOW)], set(ALL_13) - {Op.DESCRIBE}),
        ([(Op.ALTER_CONFIGS, ALLOW)], {Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}),
        ([(Op.DESCRIBE_CONFIGS, DENY), (Op.ALL, ALLOW)], set(ALL_13) - {Op.DESCRIBE_CONFIGS}),
    ],
)
def test_c16_acl_inheritance(setup, allowed):
    authz = fixture()
    create(authz, *[on(CL, "User:alice", "*", op, perm) for op, perm in setup])
    got = {
        op
        for op in ALL_13
        if decide(authz, "User:alice@192.168.3.1", op, C, CLUSTER_NAME) == "ALLOW"
    }
    assert got == allowed


def test_c17_allowed_by_wildcard_resource():
    authz = fixture()
    create(authz, allow_read(W))
    assert decide(authz, ALICE, Op.READ, T, fresh_resource()[1]) == "ALLOW"


@pytest.mark.parametrize("resource", [W, PX], ids=["c18-wildcard", "c21-prefixed"])
def test_c18_c21_delete_one_acl(resource):
    authz = fixture()
    create(authz, allow_read(resource), allow_write(resource))
    remove(authz, allow_read(resource))
    assert entries_on(authz, resource) == {allow_write(resource)}


@pytest.mark.parametrize("resource", [W, PX], ids=["c19-wildcard", "c22-prefixed"])
def test_c19_c22_delete_all_acls_on_resource(resource):
    authz = fixture()
    create(authz, allow_read(resource), allow_write(resource))
    authz.delete_acls([AclBindingFilter(*resource)])
    assert authz.acls() == []


def test_c20_allowed_by_prefixed_resource():
    authz = fixture()
    create(authz, allow_read(PX))
    assert decide(authz, ALICE, Op.READ, T, fresh_resource()[1]) == "ALLOW"


@pytest.mark.parametrize("which", ["literal", "wildcard", "prefixed"])
def test_c23_c24_c25_add_acls(which):
    r = fresh_resource()
    resources = {"literal": r, "wildcard": W, "prefixed": PX}
    target = resources.pop(which)
    authz = fixture()
    create(authz, allow_read(target), allow_write(target))
    create(authz, allow_write(target), deny_read(target))
    assert entries_on(authz, target) == {allow_read(target), allow_write(target), deny_read(target)}
    for other in resources.values():
        assert entries_on(authz, other) == set()


def test_c26_authorize_with_prefixed_resource():
    u = [str(uuid.uuid4()) for _ in range(4)]
    authz = fixture()
    denied = [
        (T, "a_other", LIT),
        (T, "a_other", PRE),
        (T, f"foo-{u[1]}", PRE),
        (T, f"foo-{u[2]}", PRE),
        (T, f"foo-{u[3]}-zzz", PRE),
        (T, f"fooo-{u[0]}", PRE),
        (T, f"fo-{u[0]}", PRE),
        (T, f"fop-{u[0]}", PRE),
        (T, f"fon-{u[0]}", PRE),
        (T, "fon-", PRE),
        (T, "z_other", PRE),
        (T, "z_other", LIT),
    ]
    create(authz, *[deny_read(r) for r in denied], allow_read(PX))
    assert decide(authz, ALICE, Op.READ, T, f"foo-{u[0]}") == "ALLOW"


def test_c27_single_character_resource_acls():
    authz = fixture()
    create(authz, allow_read((T, "f", LIT)))
    assert decide(authz, ALICE, Op.READ, T, "f") == "ALLOW"
    assert decide(authz, ALICE, Op.READ, T, "foo") == "DENY"
    create(authz, allow_read((T, "_", PRE)))
    assert decide(authz, ALICE, Op.READ, T, "_foo") == "ALLOW"
    assert decide(authz, ALICE, Op.READ, T, "_") == "ALLOW"
    assert decide(authz, ALICE, Op.READ, T, "foo_") == "DENY"


def test_c28_get_acls_principal():
    r = fresh_resource()
    authz = fixture()
    create(authz, on(r, "User:alice", "*", Op.WRITE, ALLOW))
    assert len(authz.acls(AclBindingFilter(principal="User:*"))) == 0
    assert len(authz.acls(AclBindingFilter(principal="User:alice"))) == 1
    authz.delete_acls([AclBindingFilter.ANY])
    create(authz, on(r, "User:*", "*", Op.WRITE, ALLOW))
    assert len(authz.acls(AclBindingFilter(principal="User:*"))) == 1
    assert len(authz.acls(AclBindingFilter(principal="User:alice"))) == 0


def test_c29_acls_filter_and_kraft_delete_reporting():
    r1, r2, px = (T, f"foo-{uuid.uuid4()}", LIT), (T, f"bar-{uuid.uuid4()}", LIT), (T, "bar-", PRE)
    acl1 = on(r1, "User:alice", "*", Op.READ, ALLOW)
    acl2 = on(r1, "User:alice", "192.168.0.1", Op.WRITE, ALLOW)
    acl3 = on(r2, "User:alice", "*", Op.DESCRIBE, ALLOW)
    acl4 = on(px, "User:*", "*", Op.READ, ALLOW)
    authz = fixture()
    create(authz, acl1, acl2, acl3, acl4)
    match_r2 = AclBindingFilter(ResourceType.ANY, r2[1], PatternType.MATCH)
    assert set(authz.acls(AclBindingFilter.ANY)) == {acl1, acl2, acl3, acl4}
    assert set(authz.acls(AclBindingFilter(*r1))) == {acl1, acl2}
    assert set(authz.acls(AclBindingFilter(*px))) == {acl4}
    assert set(authz.acls(match_r2)) == {acl3, acl4}
    results = authz.delete_acls(
        [
            match_r2,
            acl1.to_filter(),
            AclBindingFilter(*r2),
            AclBindingFilter(T, "baz", PatternType.ANY),
        ]
    )
    assert [set(x) for x in results] == [{acl3, acl4}, {acl1}, {acl3}, set()]
    assert authz.acls() == [acl2]


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE])
def test_c30_by_resource_type_no_acl_found_override(op):
    assert abrt(fixture(allow_everyone=True), ALICE, op, T) == "ALLOW"
