"""What-if decisions are exactly `aclgate check`'s, on every distinct decision key."""

from __future__ import annotations

import json

import pytest

from aclgate.pipeline.acls import load_acls
from aclgate.pipeline.evaluate import Policy
from aclgate.pipeline.inputs import expand_inputs
from aclgate.pipeline.reader import read_audit
from aclgate.pipeline.schema import KEY_FIELDS, acl_entry
from aclgate.pipeline.whatif import compare
from tests.pipeline.helpers import aclgate, check_decisions, event, write_jsonl

pytestmark = pytest.mark.spark

# Keys that exercise the corners of the rules, appended to a generated log.
CORNERS = [
    ("User:analytics", "READ", "GROUP", "*weird"),  # LITERAL * matches names starting with *
    ("User:ANONYMOUS", "READ", "TOPIC", "orders.created"),
    ("User:ANONYMOUS", "DESCRIBE", "TOPIC", "orders.created"),  # DENY READ does not deny DESCRIBE
    ("User:payments-reader", "DESCRIBE", "TOPIC", "payments.refunds"),  # implied by READ
    ("User:nobody", "READ", "TOPIC", "unclaimed-topic"),  # no ACL at all on the resource
    ("User:analytics", "IDEMPOTENT_WRITE", "CLUSTER", "kafka-cluster"),
    ("User:admin", "ALTER", "CLUSTER", "kafka-cluster"),
]
# Sessions with groups (the key's `groups`): ann reads audit-* only through Group:auditors.
GROUP_CORNERS = [
    ("User:ann", "READ", "TOPIC", "audit-log", ["Group:eu", "Group:auditors"]),
    ("User:ann", "READ", "TOPIC", "audit-log", []),
    ("User:ann", "DESCRIBE", "TOPIC", "audit-log", ["Group:auditors"]),
]
EXTRA_ACLS = [
    acl_entry("TOPIC", "audit-", "Group:auditors", "READ", "PREFIXED"),
    acl_entry("GROUP", "*", "User:analytics", "READ"),
    acl_entry("TOPIC", "orders.", "User:*", "READ", "PREFIXED", "DENY", host="0:0:0:0:0:0:0:1"),
    acl_entry("TOPIC", "orders.", "User:ANONYMOUS", "ALL", "PREFIXED", host="0:0:0:0:0:0:0:1"),
]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("whatif")
    result = aclgate(
        "audit-sample", "--events", "3000", "--out", str(root / "audit"), "--files", "2",
        "--gzip", "--candidate-out", str(root / "candidate.json"), "--seed", "11",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    corners = [
        event(p, op, rt, name, "DENIED", "DEFAULT_DENY", host=host)
        for p, op, rt, name in CORNERS
        for host in ("10.1.1.1", "0:0:0:0:0:0:0:1")
    ] + [
        event(p, op, rt, name, "DENIED", "DEFAULT_DENY", groups=groups)
        for p, op, rt, name, groups in GROUP_CORNERS
    ]
    write_jsonl(root / "audit" / "corners.jsonl", corners)
    candidate = json.loads((root / "candidate.json").read_text())
    candidate["acls"] += EXTRA_ACLS
    (root / "candidate.json").write_text(json.dumps(candidate))
    return root


@pytest.mark.parametrize(
    ("super_users", "allow_everyone"),
    [(("User:admin",), False), ((), True)],
    ids=["default", "open"],
)
def test_parity_with_aclgate_check(spark, generated, super_users, allow_everyone):
    candidate = load_acls(str(generated / "candidate.json"))
    data = read_audit(spark, expand_inputs([str(generated / "audit")]))
    try:
        policy = Policy(candidate.text, super_users, allow_everyone)
        rows = compare(spark, data.events, policy).collect()
    finally:
        data.release()
    ours = {(*(r[f] for f in KEY_FIELDS[:5]), tuple(r["groups"])): r for r in rows}
    assert len(ours) > 150
    assert {(p, op, rt, n) for p, _, op, rt, n, _ in ours} >= set(CORNERS)
    assert {(p, op, rt, n, g) for p, _, op, rt, n, g in ours if p == "User:ann"} == {
        (p, op, rt, n, tuple(sorted(g))) for p, op, rt, n, g in GROUP_CORNERS
    }
    extra = [f"--super-user={u}" for u in super_users]
    if allow_everyone:
        extra.append("--allow-everyone-if-no-acl-found")
    theirs = check_decisions(generated / "candidate.json", list(ours), *extra)
    mismatches = []
    for key, row in ours.items():
        acl = row["candidate_acl"].asDict() if row["candidate_acl"] else None
        got = (row["candidate_decision"], row["candidate_rule"], acl)
        want = (theirs[key]["decision"], theirs[key]["rule"], theirs[key]["acl"])
        if got != want:
            mismatches.append((key, got, want))
    assert mismatches == []
    outcomes = {(r["candidate_decision"], r["candidate_rule"]) for r in rows}
    assert ("DENIED", "ACL") in outcomes and ("ALLOWED", "ACL") in outcomes
    assert ("DENIED", "DEFAULT_DENY") in outcomes
    ann = {(r["operation"], tuple(r["groups"])): r["candidate_decision"] for r in rows
           if r["principal"] == "User:ann"}  # fmt: skip
    assert ann == {
        ("READ", ("Group:auditors", "Group:eu")): "ALLOWED",
        ("READ", ()): "DENIED",
        ("DESCRIBE", ("Group:auditors",)): "ALLOWED",  # READ implies DESCRIBE
    }
    expected_default = ("ALLOWED" if allow_everyone else "DENIED", "NO_ACL_DEFAULT")
    assert expected_default in outcomes
