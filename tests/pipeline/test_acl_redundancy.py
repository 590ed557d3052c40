"""Unused vs redundant ACLs: a crafted policy where two ACLs shadow each other.

The proxy names one deciding ACL per request; the report must not call the other one unused
(removing both would break alice), and the removal plan must never take out both.
"""

from __future__ import annotations

import pytest

from aclgate.pipeline.acl_usage import acl_usage_table, removal_plan, usage_summary
from aclgate.pipeline.acls import load_acls
from aclgate.pipeline.advisor import Key, removals
from aclgate.pipeline.aggregate import grouped_events
from aclgate.pipeline.evaluate import Policy
from aclgate.pipeline.inputs import expand_inputs
from aclgate.pipeline.reader import fine_table, read_audit
from aclgate.pipeline.schema import ACL_FIELDS, acl_entry
from tests.pipeline.helpers import event, write_acl_file, write_jsonl

ORDERS_LIT = acl_entry("TOPIC", "orders", "User:alice", "READ")  # the one the proxy names
ORDERS_PRE = acl_entry("TOPIC", "ord", "User:alice", "READ", pattern_type="PREFIXED")  # shadowed
BOB_PAYMENTS = acl_entry("TOPIC", "payments", "User:bob", "WRITE")
CAROL_NOTHING = acl_entry("TOPIC", "nothing", "User:carol", "READ")  # no request at all
DENY_SECRET = acl_entry("TOPIC", "secret", "User:*", "READ", permission_type="DENY")
DENY_MALLORY = acl_entry("TOPIC", "secret", "User:mallory", "ALL", permission_type="DENY")
POLICY = [ORDERS_LIT, ORDERS_PRE, BOB_PAYMENTS, CAROL_NOTHING, DENY_SECRET, DENY_MALLORY]


def name(acl) -> str:
    return f"{acl['permission_type']} {acl['principal']} {acl['operation']} {acl['resource_name']}"


def log():
    return [
        event("User:alice", "READ", "TOPIC", "orders", "ALLOWED", "ACL", ORDERS_LIT, count=4),
        event("User:alice", "DESCRIBE", "TOPIC", "orders", "ALLOWED", "ACL", ORDERS_LIT),
        event("User:bob", "WRITE", "TOPIC", "payments", "ALLOWED", "ACL", BOB_PAYMENTS, count=2),
        event("User:mallory", "READ", "TOPIC", "secret", "DENIED", "ACL", DENY_SECRET, count=3),
        event("User:alice", "READ", "TOPIC", "secret", "DENIED", "ACL", DENY_SECRET),
        event("User:admin", "ALTER", "CLUSTER", "kafka-cluster", "ALLOWED", "SUPER_USER"),
    ]


@pytest.mark.spark
def test_report_separates_unused_from_redundant(spark, tmp_path):
    """The report's acl_usage step (pipeline/report.py) on the crafted log."""
    audit = write_jsonl(tmp_path / "audit.jsonl", log())
    acls = load_acls(str(write_acl_file(tmp_path / "acls.json", POLICY)))
    policy = Policy(acls.text, ("User:admin",))
    data = read_audit(spark, expand_inputs([str(audit)]))
    base = grouped_events(fine_table(data, None, None)).cache()
    table = acl_usage_table(spark, base, acls, policy).cache()
    usage = usage_summary(table)
    usage["removable"] = removal_plan(table, base, acls, policy)
    assert {k: usage[k] for k in ("acls", "used", "redundant", "unused")} == {
        "acls": 6, "used": 2, "redundant": 3, "unused": 1,
    }  # fmt: skip
    assert [name(r) for r in usage["unused_acls"]] == [name(CAROL_NOTHING)]
    redundant = {
        name(r): ([name(c) for c in r["covered_by"]], r["decisions"], r["would_decide"], r["sole"])
        for r in usage["redundant_acls"]
    }
    assert redundant == {
        # each of the pair decides alice's 5 requests; the audit only ever names the literal one
        name(ORDERS_LIT): ([name(ORDERS_PRE)], 5, 5, 0),
        name(ORDERS_PRE): ([name(ORDERS_LIT)], 0, 5, 0),
        # mallory is denied by both DENYs; alice's secret read only by the User:* one
        name(DENY_MALLORY): ([name(DENY_SECRET)], 0, 3, 0),
    }
    plan = [
        (name(r), r["status"], r["covered_by"] and name(r["covered_by"]))
        for r in usage["removable"]
    ]
    assert plan == [
        (name(CAROL_NOTHING), "unused", None),
        (name(DENY_MALLORY), "redundant", name(DENY_SECRET)),
        (name(ORDERS_PRE), "redundant", name(ORDERS_LIT)),  # the named one stays
    ]
    status = {name(r.asDict()): r.status for r in table.collect()}
    assert status[name(BOB_PAYMENTS)] == status[name(DENY_SECRET)] == "used"


def key(principal, op, name_, rtype="TOPIC", host="10.0.0.1") -> Key:
    return Key(principal, host, op, rtype, name_)


def test_removals_never_take_out_both_of_a_covering_pair():
    keys = [key("User:alice", "READ", "orders"), key("User:alice", "DESCRIBE", "orders")]
    assert removals(POLICY, keys, [ORDERS_LIT, ORDERS_PRE]) == [ORDERS_LIT]
    assert removals(POLICY, keys, [ORDERS_PRE, ORDERS_LIT]) == [ORDERS_PRE]
    # a third ACL covering both lets both go
    third = acl_entry("TOPIC", "*", "User:alice", "READ")
    assert removals([*POLICY, third], keys, [ORDERS_PRE, ORDERS_LIT]) == [ORDERS_PRE, ORDERS_LIT]


def test_an_unused_acl_that_is_the_only_one_on_a_resource_stays_when_everyone_is_allowed():
    keys = [key("User:bob", "READ", "nothing")]  # denied: carol's ACL exists on the topic
    assert removals(POLICY, keys, [CAROL_NOTHING]) == [CAROL_NOTHING]
    assert removals(POLICY, keys, [CAROL_NOTHING], allow_everyone_if_no_acl_found=True) == []
    assert set(ACL_FIELDS) == set(CAROL_NOTHING)
