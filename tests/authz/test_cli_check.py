"""`aclgate check`: policy unit tests for operators, run as a subprocess."""

from __future__ import annotations

import json

import pytest

from aclgate.authz.aclfile import dump_acl_file
from tests.authz.cli import run
from tests.authz.helpers import ALLOW, DENY, LIT, PRE, G, Op, T, acl

POLICY = [
    acl(T, "orders", PRE, "User:alice", "*", Op.READ, ALLOW),
    acl(T, "orders-secret", LIT, "User:*", "*", Op.ALL, DENY),
    acl(G, "*", LIT, "User:alice", "10.0.0.1", Op.READ, ALLOW),
]


@pytest.fixture
def files(tmp_path):
    acl_file = tmp_path / "acls.json"
    acl_file.write_text(dump_acl_file(POLICY))
    return acl_file, tmp_path / "queries.jsonl"


def query(principal, op, rtype, name, host="10.0.0.1", **extra):
    return {"principal": principal, "host": host, "operation": op, "resource_type": rtype,
            "resource_name": name, **extra}  # fmt: skip


def lines(result):
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_decisions_rules_and_deciding_acls(files):
    acl_file, queries = files
    qs = [
        query("User:alice", "READ", "TOPIC", "orders-eu", id=1),
        query("User:alice", "describe", "topic", "orders-eu"),  # READ implies DESCRIBE
        query("User:alice", "READ", "TOPIC", "orders-secret"),
        query("User:bob", "READ", "TOPIC", "orders-eu"),
        query("User:bob", "READ", "TOPIC", "payments"),
        query("User:ops", "ALTER", "CLUSTER", "kafka-cluster"),
        query("User:alice", "READ", "GROUP", "*weird", host="10.0.0.1"),
        query("User:alice", "READ", "GROUP", "billing", host="10.0.0.2"),
    ]
    queries.write_text("\n".join(json.dumps(q) for q in qs) + "\n\n")
    result = run("check", "--acl-file", str(acl_file), "--queries", str(queries),
                 "--super-user", "User:ops")  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    out = lines(result)
    assert [{k: o[k] for k in q} for o, q in zip(out, qs, strict=True)] == qs  # input echoed
    assert [(o["decision"], o["rule"]) for o in out] == [
        ("ALLOWED", "ACL"),
        ("ALLOWED", "ACL"),
        ("DENIED", "ACL"),
        ("DENIED", "DEFAULT_DENY"),
        ("DENIED", "NO_ACL_DEFAULT"),
        ("ALLOWED", "SUPER_USER"),
        ("ALLOWED", "ACL"),  # the literal `*` matches names starting with `*` (docs/authz.md)
        ("DENIED", "DEFAULT_DENY"),  # the `*` ACL covers billing, but for another host
    ]
    assert out[0]["acl"] == POLICY[0].to_dict()
    assert out[2]["acl"] == POLICY[1].to_dict()
    assert out[3]["acl"] is None and out[5]["acl"] is None


def test_allow_everyone_and_stdin(files):
    acl_file, _ = files
    stdin = json.dumps(query("User:bob", "WRITE", "TOPIC", "payments")) + "\n"
    result = run("check", "--acl-file", str(acl_file), "--queries", "-",
                 "--allow-everyone-if-no-acl-found", stdin=stdin)  # fmt: skip
    assert result.returncode == 0
    assert [(o["decision"], o["rule"]) for o in lines(result)] == [("ALLOWED", "NO_ACL_DEFAULT")]


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"principal": "User:a", "host": "h", "operation": "READ", "resource_type": "TOPIC"}),
         "field 'resource_name' missing"),
        (json.dumps(query("User:a", "REED", "TOPIC", "t")), "unknown AclOperation 'REED'"),
        (json.dumps(query("User:a", "ANY", "TOPIC", "t")), "operation ANY is a filter value"),
        (json.dumps(query("User:a", "READ", "ANY", "t")), "resource_type ANY is a filter value"),
        (json.dumps(query("alice", "READ", "TOPIC", "t")), "principalType:principalName"),
        (json.dumps(query("User:a", "READ", "TOPIC", 7)), "field 'resource_name' must be a string"),
    ],
)  # fmt: skip
def test_malformed_line_names_the_line_and_prints_nothing(files, bad_line, message):
    acl_file, queries = files
    good = json.dumps(query("User:alice", "READ", "TOPIC", "orders"))
    queries.write_text(f"{good}\n\n{bad_line}\n{good}\n")
    result = run("check", "--acl-file", str(acl_file), "--queries", str(queries))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"aclgate check: {queries}:3: ")
    assert message in result.stderr


def test_unusable_acl_file(files, tmp_path):
    _, queries = files
    queries.write_text("")
    result = run("check", "--acl-file", str(tmp_path / "missing.json"), "--queries", str(queries))
    assert (result.returncode, result.stdout) == (2, "")
    assert "missing.json: ACL file does not exist" in result.stderr
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"version": 1, "acls": [{"resource_type": "TOPIC"}]}')
    result = run("check", "--acl-file", str(corrupt), "--queries", str(queries))
    assert result.returncode == 2
    assert "corrupt.json: acls[0].resource_name: missing field" in result.stderr
