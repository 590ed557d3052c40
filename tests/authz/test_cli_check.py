"""`aclgate check`: policy unit tests for operators, run as a subprocess."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

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


# --- --expect: policy tests that gate CI


def expect_run(files, qs, *extra):
    acl_file, queries = files
    queries.write_text("\n".join(json.dumps(q) for q in qs) + "\n")
    return run("check", "--acl-file", str(acl_file), "--queries", str(queries), "--expect", *extra)


RIGHT = [
    query("User:alice", "READ", "TOPIC", "orders-eu", expect="ALLOWED", expect_rule="ACL", id="a1"),
    query("User:alice", "READ", "TOPIC", "orders-secret", expect="DENIED"),
    query("User:bob", "WRITE", "TOPIC", "orders", expect="DENIED", expect_rule="DEFAULT_DENY"),
]


def test_expect_passes_on_right_expectations(files, tmp_path):
    junit = tmp_path / "report.xml"
    result = expect_run(files, RIGHT, "--junit-xml", str(junit))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "OK: 3 queries, 3 as expected, 0 different\n"

    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("3", "0")
    names = [tc.get("name") for tc in suite.iter("testcase")]
    assert names[0] == "1: a1: User:alice READ TOPIC:orders-eu from 10.0.0.1"
    assert not list(suite.iter("failure"))


def test_expect_fails_on_a_wrong_verdict_or_rule_with_a_diff(files, tmp_path):
    wrong = [
        *RIGHT,
        query("User:bob", "READ", "TOPIC", "orders-eu", expect="ALLOWED", id="bob reads"),
        query(
            "User:alice", "READ", "TOPIC", "orders-x", expect="ALLOWED", expect_rule="SUPER_USER"
        ),
    ]
    junit = tmp_path / "report.xml"
    result = expect_run(files, wrong, "--junit-xml", str(junit))
    assert (result.returncode, result.stderr) == (1, "")
    q = files[1]
    assert result.stdout == (
        "--- expected\n+++ actual\n"
        f"@@ {q}:4 @@ bob reads: User:bob READ TOPIC:orders-eu from 10.0.0.1\n"
        "-ALLOWED\n+DENIED by DEFAULT_DENY\n"
        f"@@ {q}:5 @@ User:alice READ TOPIC:orders-x from 10.0.0.1\n"
        "-ALLOWED by SUPER_USER\n"
        "+ALLOWED by ACL StandardAcl(resourceType=TOPIC, resourceName=orders, "
        "patternType=PREFIXED, principal=User:alice, host=*, operation=READ, "
        "permissionType=ALLOW)\n"
        "FAILED: 5 queries, 3 as expected, 2 different\n"
    )

    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("5", "2")
    failures = [tc for tc in suite.iter("testcase") if tc.find("failure") is not None]
    assert [tc.get("name").split(":")[0] for tc in failures] == ["4", "5"]
    assert (
        failures[0].find("failure").get("message") == "expected ALLOWED, got DENIED by DEFAULT_DENY"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, "field 'expect' missing"),
        ({"expect": "allowed"}, "field 'expect' must be one of ALLOWED, DENIED"),
        ({"expect": "DENIED", "expect_rule": "NOPE"}, "field 'expect_rule' must be one of"),
    ],
)
def test_expect_needs_a_valid_expectation_on_every_line(files, extra, message):
    result = expect_run(files, [RIGHT[0], query("User:a", "READ", "TOPIC", "t", **extra)])
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"aclgate check: {files[1]}:2: {message}")


def test_junit_without_expect_and_kafka_store_without_bootstrap(files, tmp_path):
    acl_file, queries = files
    queries.write_text("")
    result = run("check", "--acl-file", str(acl_file), "--queries", str(queries),
                 "--junit-xml", str(tmp_path / "x.xml"))  # fmt: skip
    assert (result.returncode, result.stderr) == (2, "aclgate check: --junit-xml needs --expect\n")
    result = run("check", "--acl-store", "kafka", "--queries", str(queries), "--expect")
    assert (result.returncode, result.stdout) == (2, "")
    assert "--acl-store kafka needs --acl-bootstrap" in result.stderr
    result = run("check", "--queries", str(queries))
    assert (result.returncode, result.stderr) == (
        2,
        "aclgate check: --acl-store file needs --acl-file\n",
    )


def test_group_principals_in_queries(tmp_path):
    """Issue 25: a query may carry the session's groups; a group ACL and a group DENY apply."""
    acl_file, queries = tmp_path / "acls.json", tmp_path / "q.jsonl"
    acl_file.write_text(
        dump_acl_file(
            [
                acl(T, "pay", PRE, "Group:payments", "*", Op.READ, ALLOW),
                acl(T, "pay", PRE, "Group:contractors", "*", Op.READ, DENY),
            ]
        )
    )
    qs = [
        query("User:ann", "READ", "TOPIC", "payments", groups=["Group:payments"]),
        query(
            "User:bob", "READ", "TOPIC", "payments", groups=["Group:payments", "Group:contractors"]
        ),
        query("User:cid", "READ", "TOPIC", "payments"),
    ]
    queries.write_text("".join(json.dumps(q) + "\n" for q in qs))
    out = lines(run("check", "--acl-file", str(acl_file), "--queries", str(queries)))
    assert [(o["decision"], o["acl"] and o["acl"]["principal"]) for o in out] == [
        ("ALLOWED", "Group:payments"),
        ("DENIED", "Group:contractors"),
        ("DENIED", None),
    ]
    queries.write_text(json.dumps(query("User:a", "READ", "TOPIC", "x", groups="payments")) + "\n")
    bad = run("check", "--acl-file", str(acl_file), "--queries", str(queries))
    assert bad.returncode == 2 and "'groups' must be a list" in bad.stderr
