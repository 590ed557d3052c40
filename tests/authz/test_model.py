"""The ACL model: wire codes, parsing, create/filter validation (suite E where it applies).

Not ported: E1 (ZooKeeper ACL JSON), E5-E8 (KRaft metadata records and their batching
iterator), E9-E12 (ClusterMetadataAuthorizer's controller mutator) — no such components here.
"""

from __future__ import annotations

import itertools

import pytest

from aclgate.authz.model import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
    operation_name,
    parse_enum,
    parse_operation_cli,
)
from tests.authz.helpers import ALLOW, DENY, LIT, PRE, C, G, Op, T, acl, loaded


def test_wire_codes():
    assert {t.name: int(t) for t in ResourceType} == {
        "UNKNOWN": 0, "ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4,
        "TRANSACTIONAL_ID": 5, "DELEGATION_TOKEN": 6, "USER": 7,
    }  # fmt: skip
    assert {p.name: int(p) for p in PatternType} == {
        "UNKNOWN": 0, "ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4,
    }  # fmt: skip
    assert [o.name for o in AclOperation] == [
        "UNKNOWN", "ANY", "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE",
        "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
        "CREATE_TOKENS", "DESCRIBE_TOKENS",
    ]  # fmt: skip
    assert [int(o) for o in AclOperation] == list(range(15))
    assert {p.name: int(p) for p in AclPermissionType} == {
        "UNKNOWN": 0, "ANY": 1, "DENY": 2, "ALLOW": 3,
    }  # fmt: skip
    assert (CLUSTER_NAME, WILDCARD, WILDCARD_PRINCIPAL) == ("kafka-cluster", "*", "User:*")


def test_supported_operations_per_type():
    assert set(SUPPORTED_OPERATIONS[G]) == {
        Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
    }  # fmt: skip
    assert len(SUPPORTED_OPERATIONS[T]) == 8 and Op.ALL not in SUPPORTED_OPERATIONS[T]
    assert set(SUPPORTED_OPERATIONS[ResourceType.USER]) == {Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Read", Op.READ),
        ("READ", Op.READ),
        ("read", Op.READ),
        ("DescribeConfigs", Op.DESCRIBE_CONFIGS),
        ("describeconfigs", Op.DESCRIBE_CONFIGS),
        ("DESCRIBECONFIGS", Op.DESCRIBE_CONFIGS),
        ("Describe_Configs", Op.UNKNOWN),
        ("DESCRIBE_CONFIGS", Op.UNKNOWN),
        ("IdempotentWrite", Op.IDEMPOTENT_WRITE),
        ("All", Op.ALL),
        ("Reed", Op.UNKNOWN),
    ],
)
def test_cli_operation_parsing_is_security_utils(text, expected):
    assert parse_operation_cli(text) is expected


def test_operation_names_are_pascal_case():
    assert operation_name(Op.DESCRIBE_CONFIGS) == "DescribeConfigs"
    assert operation_name(Op.CLUSTER_ACTION) == "ClusterAction"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("topic", T), ("Transactional_Id", ResourceType.TRANSACTIONAL_ID),
     ("TransactionalId", ResourceType.TRANSACTIONAL_ID), ("prefixed", PRE)],
)  # fmt: skip
def test_file_enum_parsing_is_case_insensitive(text, expected):
    assert parse_enum(type(expected), text) is expected


def test_file_enum_parsing_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown AclOperation 'REED'"):
        parse_enum(AclOperation, "REED")
    with pytest.raises(ValueError):
        parse_enum(AclOperation, "DESCRIBE__CONFIGS")


def test_binding_dict_round_trip():
    # E3: binding conversions are the identity
    for b in (
        acl(C, CLUSTER_NAME, LIT, "User:*", "*", Op.ALTER, ALLOW),
        acl(T, "foo_", PRE, "User:*", "*", Op.READ, ALLOW),
        acl(G, "mygroup", LIT, "User:foo", "10.0.0.1", Op.READ, DENY),
    ):
        assert AclBinding.from_dict(b.to_dict()) == b


def test_e4_equality():
    bindings = [
        acl(C, CLUSTER_NAME, LIT, "User:*", "*", Op.ALTER, ALLOW),
        acl(T, "foo_", PRE, "User:*", "*", Op.READ, ALLOW),
        acl(G, "mygroup", LIT, "User:foo", "*", Op.READ, DENY),
        acl(G, "mygroup", PRE, "User:foo", "*", Op.READ, DENY),
        acl(G, "foo", PRE, "User:foo", "*", Op.READ, DENY),
    ]
    for a, b in itertools.combinations(bindings, 2):
        assert a != b
    assert len(set(bindings)) == 5


def test_e2_index_order():
    a0 = acl(C, CLUSTER_NAME, LIT, "User:*", "*", Op.ALTER, ALLOW)
    a1 = acl(T, "foo_", PRE, "User:*", "*", Op.READ, ALLOW)
    a2 = acl(G, "mygroup", LIT, "User:foo", "*", Op.READ, DENY)
    a3 = acl(G, "mygroup", PRE, "User:foo", "*", Op.READ, DENY)
    a4 = acl(G, "foo", PRE, "User:foo", "*", Op.READ, DENY)
    # TOPIC before GROUP before CLUSTER; LITERAL before PREFIXED; names in reverse order
    assert loaded([a4, a0, a3, a2, a1]).acls() == [a1, a2, a3, a4, a0]


BASE = acl(T, "*", LIT, "User:*", "*", Op.ALTER, ALLOW)  # E13: valid


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"pattern_type": PatternType.UNKNOWN}, "pattern_type", "Invalid patternType UNKNOWN"),
        ({"pattern_type": PatternType.ANY}, "pattern_type", "Invalid patternType ANY"),
        ({"pattern_type": PatternType.MATCH}, "pattern_type", "Invalid patternType MATCH"),
        ({"resource_type": ResourceType.UNKNOWN}, "resource_type", "Invalid resourceType UNKNOWN"),
        ({"resource_type": ResourceType.ANY}, "resource_type", "Invalid resourceType ANY"),
        ({"operation": Op.UNKNOWN}, "operation", "Invalid operation UNKNOWN"),
        ({"operation": Op.ANY}, "operation", "Invalid operation ANY"),
        ({"permission_type": AclPermissionType.UNKNOWN}, "permission_type",
         "Invalid permissionType UNKNOWN"),
        ({"permission_type": AclPermissionType.ANY}, "permission_type", "Invalid permissionType ANY"),
        ({"resource_name": ""}, "resource_name", "Invalid empty resource name"),
        ({"resource_type": C, "resource_name": "other"}, "resource_name",
         "The only valid name for the CLUSTER resource is kafka-cluster"),
        ({"principal": "alice"}, "principal",
         "expected a string in format principalType:principalName but got alice"),
    ],
)  # fmt: skip
def test_e13_create_validation(change, field, message):
    BASE.validate()
    fields = {**{k: getattr(BASE, k) for k in BASE.__slots__}, **change}
    with pytest.raises(InvalidAclError) as err:
        AclBinding(**fields).validate()
    assert (err.value.field, str(err.value)) == (field, message)


def test_e14_filter_validation():
    AclBindingFilter(
        ResourceType.ANY, "*", LIT, "User:*", "*", Op.ANY, AclPermissionType.ANY
    ).validate()
    with pytest.raises(InvalidAclError, match=r"^Unknown patternFilter\.$"):
        AclBindingFilter(pattern_type=PatternType.UNKNOWN).validate()
    with pytest.raises(InvalidAclError, match=r"^Unknown entryFilter\.$"):
        AclBindingFilter(permission_type=AclPermissionType.UNKNOWN).validate()


def test_e15_e16_load_then_replace_with_nothing():
    authz = loaded([BASE])
    assert authz.acl_count() == 1
    authz.load([])
    assert authz.acl_count() == 0 and authz.acls() == []


def test_e17_create_and_delete_with_invalid_parts():
    a0 = acl(C, CLUSTER_NAME, LIT, "User:*", "*", Op.ALTER, ALLOW)
    a1 = acl(T, "foo_", PRE, "User:*", "*", Op.READ, ALLOW)
    a2 = acl(G, "mygroup", LIT, "User:foo", "*", Op.READ, DENY)
    bad = acl(T, "x", PatternType.UNKNOWN, "User:*", "*", Op.READ, ALLOW)
    authz = loaded()
    results = authz.create_acls([a0, a1, a2, bad])
    assert results[:3] == [None, None, None]
    assert str(results[3]) == "Invalid patternType UNKNOWN"
    deleted = authz.delete_acls(
        [
            AclBindingFilter(ResourceType.ANY, None, LIT),
            AclBindingFilter(ResourceType.UNKNOWN, None, LIT),
        ]
    )
    assert set(deleted[0]) == {a0, a2}
    assert str(deleted[1]) == "Unknown patternFilter."
    assert authz.acls() == [a1]


def test_e18_delete_dedupe():
    b = acl(T, "topic-1", LIT, "User:user", "10.0.0.1", Op.ALL, ALLOW)
    for filters in ([AclBindingFilter.ANY], [b.to_filter()], [AclBindingFilter.ANY, b.to_filter()]):
        authz = loaded([b])
        version = authz.version
        assert authz.delete_acls(filters) == [[b]] * len(filters)
        assert authz.acls() == [] and authz.version == version + 1  # one removal


MATCH_CASES = [
    # (binding, filter, matches)
    (acl(T, "foo", LIT, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(T, "foo", PatternType.ANY), True),
    (acl(T, "foo", PRE, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(T, "foo", PatternType.ANY), True),
    (acl(T, "fo", PRE, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(T, "foo", PatternType.ANY), False),
    (acl(T, "fo", PRE, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(T, "foo", PatternType.MATCH), True),
    (acl(T, "*", LIT, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(T, "foo", PatternType.MATCH), True),
    (acl(T, "*", LIT, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(T, "foo", PatternType.ANY), False),
    (acl(T, "foox", PRE, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(T, "foo", PatternType.MATCH), False),
    (acl(T, "foo", LIT, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(T, "foo", PRE), False),
    (acl(T, "foo", LIT, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(G, "foo"), False),
    (acl(T, "foo", LIT, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(principal="User:*"), False),
    (acl(T, "foo", LIT, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(operation=Op.DESCRIBE), False),
    (acl(T, "foo", LIT, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(host="*", operation=Op.READ), True),
    (acl(T, "foo", LIT, "User:a", "*", Op.READ, ALLOW), AclBindingFilter(permission_type=DENY), False),
]  # fmt: skip


@pytest.mark.parametrize(("binding", "flt", "expected"), MATCH_CASES)
def test_filter_any_and_match_semantics(binding, flt, expected):
    assert flt.matches(binding) is expected


def test_listing_uses_java_string_order_for_names_beyond_the_bmp():
    emoji = acl(G, "\U0001f600", LIT, "User:a", "*", Op.READ, ALLOW)  # UTF-16: D83D DE00
    replacement = acl(G, "\ufffd", LIT, "User:a", "*", Op.READ, ALLOW)  # UTF-16: FFFD
    # names sort descending; in UTF-16 units U+FFFD is the greater, in code points the smaller
    assert loaded([emoji, replacement]).acls() == [replacement, emoji]
