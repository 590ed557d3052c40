"""aclgate.authz.aclfile: the version-1 ACL file format, parsing errors and the canonical dump."""

from __future__ import annotations

import json

import pytest

from aclgate.authz.aclfile import AclFileError, dump_acl_file, parse_acl_file
from tests.authz.helpers import ALLOW, DENY, LIT, PRE, C, G, Op, T, acl

ENTRY = {
    "resource_type": "TOPIC",
    "resource_name": "orders",
    "pattern_type": "LITERAL",
    "principal": "User:alice",
    "host": "*",
    "operation": "READ",
    "permission_type": "ALLOW",
}
ORDERS = acl(T, "orders", LIT, "User:alice", "*", Op.READ, ALLOW)


def doc(*entries, **top) -> str:
    return json.dumps({"version": 1, "acls": list(entries), **top})


def test_the_issue_example_parses():
    assert parse_acl_file(doc(ENTRY)) == [ORDERS]
    assert parse_acl_file(doc(ENTRY).encode()) == [ORDERS]


def test_enum_names_are_case_insensitive():
    entry = {**ENTRY, "resource_type": "topic", "pattern_type": "Literal", "operation": "read",
             "permission_type": "allow"}  # fmt: skip
    assert parse_acl_file(doc(entry)) == [ORDERS]
    pascal = {**ENTRY, "operation": "DescribeConfigs", "resource_type": "TransactionalId"}
    [b] = parse_acl_file(doc(pascal))
    assert (b.operation, b.resource_type.name) == (Op.DESCRIBE_CONFIGS, "TRANSACTIONAL_ID")


def test_duplicates_collapse_in_file_order():
    other = {**ENTRY, "operation": "WRITE"}
    assert [b.operation for b in parse_acl_file(doc(other, ENTRY, other))] == [Op.WRITE, Op.READ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "acls.json: invalid JSON at line 1 column 2: Expecting property name enclosed in double quotes"),
        ("[]", 'acls.json: expected a JSON object with "version" and "acls"'),
        (json.dumps({"acls": []}), "acls.json: unsupported version None (expected 1)"),
        (json.dumps({"version": 2, "acls": []}), "acls.json: unsupported version 2 (expected 1)"),
        (json.dumps({"version": True, "acls": []}), "acls.json: unsupported version True (expected 1)"),
        (json.dumps({"version": 1, "acls": {}}), 'acls.json: "acls" must be a list'),
        (doc(comment="x"), "acls.json: unknown top-level field 'comment'"),
        (doc(ENTRY, "nope"), "acls.json: acls[1]: expected an object, got str"),
        (doc({**ENTRY, "permision_type": "ALLOW"}), "acls.json: acls[0].permision_type: unknown field 'permision_type'"),
        (doc({k: v for k, v in ENTRY.items() if k != "host"}), "acls.json: acls[0].host: missing field"),
        (doc({**ENTRY, "host": None}), "acls.json: acls[0].host: expected a string, got None"),
        (doc({**ENTRY, "operation": "REED"}), "acls.json: acls[0].operation: unknown AclOperation 'REED'"),
        (doc({**ENTRY, "operation": "ANY"}), "acls.json: acls[0].operation: Invalid operation ANY"),
        (doc({**ENTRY, "pattern_type": "MATCH"}), "acls.json: acls[0].pattern_type: Invalid patternType MATCH"),
        (doc({**ENTRY, "permission_type": "UNKNOWN"}), "acls.json: acls[0].permission_type: Invalid permissionType UNKNOWN"),
        (doc({**ENTRY, "resource_type": "ANY"}), "acls.json: acls[0].resource_type: Invalid resourceType ANY"),
        (doc({**ENTRY, "resource_name": ""}), "acls.json: acls[0].resource_name: Invalid empty resource name"),
        (doc({**ENTRY, "resource_type": "CLUSTER"}), "acls.json: acls[0].resource_name: The only valid name for the CLUSTER resource is kafka-cluster"),
        (doc({**ENTRY, "principal": "alice"}), "acls.json: acls[0].principal: expected a string in format principalType:principalName but got alice"),
    ],
)  # fmt: skip
def test_errors_name_the_file_entry_and_field(text, message):
    with pytest.raises(AclFileError) as err:
        parse_acl_file(text, "acls.json")
    assert str(err.value).startswith(message)


def test_non_utf8_is_an_error():
    with pytest.raises(AclFileError, match=r"^f: not UTF-8"):
        parse_acl_file(b'{"version": 1, "acls": ["\xff"]}', "f")


def test_dump_is_canonical_sorted_deduplicated_and_round_trips():
    bindings = [
        acl(G, "b", PRE, "User:z", "*", Op.READ, DENY),
        acl(T, "b", LIT, "User:a", "*", Op.WRITE, ALLOW),
        acl(C, "kafka-cluster", LIT, "User:a", "*", Op.ALTER, ALLOW),
        acl(T, "a", LIT, "User:a", "*", Op.READ, ALLOW),
        acl(T, "b", LIT, "User:a", "*", Op.WRITE, ALLOW),
    ]
    text = dump_acl_file(bindings)
    assert text == dump_acl_file(reversed(bindings))
    assert text.endswith("}\n")
    assert set(parse_acl_file(text)) == set(bindings)
    entries = text.splitlines()[3:-2]
    assert len(entries) == 4  # one ACL per line, de-duplicated
    assert [json.loads(e.rstrip(","))["resource_name"] for e in entries] == [
        "a",
        "b",
        "b",
        "kafka-cluster",
    ]
    assert json.loads(entries[0].rstrip(",")) == {
        **ENTRY,
        "resource_name": "a",
        "principal": "User:a",
    }


def test_empty_dump():
    assert dump_acl_file([]) == '{\n  "version": 1,\n  "acls": []\n}\n'
    assert parse_acl_file(dump_acl_file([])) == []


def test_unicode_names_survive():
    b = acl(G, "grüppe-東京", LIT, "User:ünïcode", "*", Op.READ, ALLOW)
    text = dump_acl_file([b])
    assert "grüppe-東京" in text
    assert parse_acl_file(text.encode("utf-8")) == [b]
