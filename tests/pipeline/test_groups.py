"""The session's groups are part of the decision key (docs/pipeline.md, "Groups in the decision
key"): a request the proxy allowed through an ACL on one of its session's `Group:` principals
is decided again with that group by `aclgate whatif`, `report` and `advise`. Lines written
before the audit had `groups` are sessions without groups."""

from __future__ import annotations

import csv
import io
import json

import pytest

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclBinding
from aclgate.pipeline.advisor import Key, Observations, propose, removals
from aclgate.pipeline.deciders import deciders
from aclgate.pipeline.evaluate import Policy, decide
from aclgate.pipeline.report import ReportOptions, run_report
from aclgate.pipeline.schema import KEY_FIELDS, acl_entry
from aclgate.pipeline.spark import Progress
from aclgate.proxy.audit.formats import cloudevent, ocsf
from aclgate.proxy.cli import main
from tests.pipeline.helpers import event, write_acl_file, write_jsonl

PAYMENTS_READ_PAY = acl_entry("TOPIC", "pay", "Group:payments", "READ")
BOB_READ_ORDERS = acl_entry("TOPIC", "orders", "User:bob", "READ")
POLICY = [PAYMENTS_READ_PAY, BOB_READ_ORDERS]
PAYMENTS = ["Group:payments"]

READ_PAY = ("User:alice", "10.0.0.1", "READ", "TOPIC", "pay")


def acl_text(entries: list[dict[str, str]]) -> str:
    return json.dumps({"version": 1, "acls": entries})


# ------------------------------------------------------------------- without Spark


def test_decide_asks_with_the_sessions_groups():
    keys = [
        (*READ_PAY, ["Group:ops", "Group:payments"]),
        (*READ_PAY, []),
        (*READ_PAY, None),  # a line from before `groups`
        ("User:alice", "10.0.0.1", "DESCRIBE", "TOPIC", "pay", ("Group:payments",)),
    ]
    rows = list(decide(Policy(acl_text(POLICY)), keys))
    assert [row[:6] for row in rows] == keys  # the key comes back as given: it joins
    assert [(row[6], row[7]) for row in rows] == [
        ("ALLOWED", "ACL"),
        ("DENIED", "DEFAULT_DENY"),
        ("DENIED", "DEFAULT_DENY"),
        ("ALLOWED", "ACL"),  # READ implies DESCRIBE, for a group's ACL too
    ]
    assert rows[0][8] == PAYMENTS_READ_PAY and rows[3][8] == PAYMENTS_READ_PAY


def test_a_group_super_user_is_one_in_decide():
    policy = Policy(acl_text([]), super_users=("Group:ops",))
    (row,) = decide(policy, [(*READ_PAY, ["Group:ops"])])
    assert (row[6], row[7]) == ("ALLOWED", "SUPER_USER")


def test_the_deciders_of_a_key_include_its_groups_acls():
    alice = acl_entry("TOPIC", "pay", "User:alice", "READ")
    authorizer = Authorizer()
    authorizer.load([AclBinding.from_dict(a) for a in [PAYMENTS_READ_PAY, alice]])
    with_group = (*READ_PAY, ("Group:payments",))
    found = deciders(authorizer, [with_group, (*READ_PAY, ())])
    assert sorted(a.to_dict()["principal"] for a in found[with_group]) == [
        "Group:payments",
        "User:alice",
    ]
    assert [a.to_dict() for a in found[(*READ_PAY, ())]] == [alice]


def test_a_group_acl_that_decides_an_observed_request_is_not_removable():
    keys = [
        Key(*READ_PAY, ("Group:payments",)),
        Key("User:bob", "10.0.0.2", "READ", "TOPIC", "orders"),
    ]
    assert removals(POLICY, keys, [PAYMENTS_READ_PAY]) == []
    assert removals(POLICY, keys[1:], [PAYMENTS_READ_PAY]) == [PAYMENTS_READ_PAY]


def test_the_advisor_grants_the_user_what_its_group_allowed():
    """A request allowed through a group's ACL is not missed: the proposal grants the user.
    The same request denied to the user's session without the group stays allowed (user ACLs
    cannot tell the sessions apart), as a request seen both allowed and denied does."""
    obs = Observations()
    obs.allowed = {Key(*READ_PAY, ("Group:payments",))}
    obs.denied = {Key(*READ_PAY), Key("User:alice", "10.0.0.1", "WRITE", "TOPIC", "pay")}
    for k in obs.allowed | obs.denied:
        obs.seen[k.resource_type].add(k.resource_name)
    assert obs.settle() == 1
    assert obs.denied == {Key("User:alice", "10.0.0.1", "WRITE", "TOPIC", "pay")}
    proposal = propose(obs)
    assert proposal.acls == [acl_entry("TOPIC", "pay", "User:alice", "READ")]
    assert proposal.conflicts == []


def test_a_denied_request_of_a_group_super_user_is_checked_as_one():
    """With `Group:ops` a super user, a session in it is allowed everything: the advisor's
    check asks with the groups (a key that reaches it is reported, not silently kept)."""
    obs = Observations()
    obs.denied = {Key("User:eve", "10.0.0.9", "READ", "TOPIC", "pay", ("Group:ops",))}
    proposal = propose(obs, super_users=("Group:ops",))
    assert [c["why"] for c in proposal.conflicts] == ["allowed by rule SUPER_USER"]
    assert propose(obs).conflicts == []


# ---------------------------------------------------------------------- with Spark

TS = [f"2026-11-21T12:0{i}:00.000000Z" for i in range(5)]


def trail() -> list[dict]:
    """alice, in Group:payments, reads `pay` through the group's ACL only (in the three audit
    formats); bob's line predates `groups`; carol, without groups, is denied on `pay`."""
    alice = {"groups": PAYMENTS, "acl": PAYMENTS_READ_PAY, "rule": "ACL"}
    read = event("User:alice", "READ", "TOPIC", "pay", "ALLOWED", count=4, **alice)
    again = event("User:alice", "READ", "TOPIC", "pay", "ALLOWED", count=2, ts=TS[1], **alice)
    describe = event("User:alice", "DESCRIBE", "TOPIC", "pay", "ALLOWED", api="Metadata",
                     ts=TS[2], **alice)  # fmt: skip
    return [
        read,
        ocsf(again),
        cloudevent(describe, "aclgate://aclgate-1", "e-1"),
        event("User:bob", "READ", "TOPIC", "orders", "ALLOWED", "ACL", BOB_READ_ORDERS,
              count=3, host="10.0.0.2", ts=TS[3]),
        event("User:carol", "READ", "TOPIC", "pay", "DENIED", "DEFAULT_DENY", groups=[],
              host="10.0.0.3", ts=TS[4]),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    root = tmp_path_factory.mktemp("groups")
    lines = trail()
    assert "groups" not in lines[3]  # bob's line is one from before the field
    write_jsonl(root / "audit" / "a.jsonl", lines)
    write_acl_file(root / "policy.json", POLICY)
    write_acl_file(root / "without-group.json", [BOB_READ_ORDERS])
    return root


def whatif(root, candidate: str, out: str, capsys, status: int) -> dict:
    """`aclgate whatif --fail-on-break` on the trail: its exit status and summary."""
    args = ["whatif", "--audit", str(root / "audit"), "--candidate-acl-file", str(root / candidate)]
    assert main([*args, "--out", str(root / out), "--fail-on-break"]) == status
    capsys.readouterr()
    return json.loads((root / out / "summary.json").read_text())


@pytest.mark.spark
def test_whatif_under_the_same_policy_flips_nothing(spark, audit, capsys):
    summary = whatif(audit, "policy.json", "same", capsys, 0)
    assert summary["to_denied"] == {"events": 0, "keys": 0}
    assert summary["to_allowed"] == {"events": 0, "keys": 0}
    assert summary["unchanged"] == {"events": 11, "keys": 4}
    rows = spark.read.parquet(str(audit / "same" / "decisions")).collect()
    decided = {(r.principal, r.operation, tuple(r.groups)): r.candidate_decision for r in rows}
    assert decided == {
        ("User:alice", "READ", ("Group:payments",)): "ALLOWED",
        ("User:alice", "DESCRIBE", ("Group:payments",)): "ALLOWED",
        ("User:bob", "READ", ()): "ALLOWED",  # no `groups` in the line: none
        ("User:carol", "READ", ()): "DENIED",
    }


@pytest.mark.spark
def test_whatif_without_the_group_acl_shows_the_flip_with_the_groups(spark, audit, capsys):
    summary = whatif(audit, "without-group.json", "flip", capsys, 1)
    assert summary["to_denied"] == {"events": 7, "keys": 2}
    assert summary["unchanged"] == {"events": 4, "keys": 2}
    listed = {(r["operation"], tuple(r["groups"])) for r in summary["to_denied_list"]}
    assert listed == {("READ", ("Group:payments",)), ("DESCRIBE", ("Group:payments",))}
    (part,) = (audit / "flip" / "to_denied").glob("part-*.csv")
    rows = list(csv.DictReader(part.read_text().splitlines()))
    assert list(rows[0])[: len(KEY_FIELDS)] == list(KEY_FIELDS)
    assert [(r["principal"], r["groups"], r["operation"], r["count"]) for r in rows] == [
        ("User:alice", "Group:payments", "READ", "6"),
        ("User:alice", "Group:payments", "DESCRIBE", "1"),
    ]
    page = (audit / "flip" / "report.html").read_text()
    assert "<th>groups</th>" in page and "<td>Group:payments</td>" in page


@pytest.mark.spark
def test_the_report_counts_the_group_acl_as_used(spark, audit):
    opts = ReportOptions(
        audit=[str(audit / "audit")],
        out=str(audit / "report"),
        acl_file=str(audit / "policy.json"),
        candidate_acl_file=str(audit / "policy.json"),
    )
    summary = run_report(spark, opts, Progress("report", opts.stages(), io.StringIO()))
    usage = summary["acl_usage"]
    assert (usage["acls"], usage["used"], usage["redundant"], usage["unused"]) == (2, 2, 0, 0)
    assert usage["removable"] == []
    group = next(r for r in usage["most_used"] if r["principal"] == "Group:payments")
    assert (group["status"], group["decisions"], group["would_decide"], group["sole"]) == (
        "used",
        7,
        7,
        7,
    )
    assert summary["whatif"]["to_denied"] == {"events": 0, "keys": 0}
    assert summary["distinct"]["decision_keys"] == 4
    access = {
        (r.principal, r.operation, tuple(r.groups)): r["count"]
        for r in spark.read.parquet(str(audit / "report" / "access")).collect()
    }
    assert access == {
        ("User:alice", "READ", ("Group:payments",)): 6,
        ("User:alice", "DESCRIBE", ("Group:payments",)): 1,
        ("User:bob", "READ", ()): 3,
        ("User:carol", "READ", ()): 1,
    }
    (part,) = (audit / "report" / "denied" / "csv").glob("part-*.csv")
    (denied,) = csv.DictReader(part.read_text().splitlines())
    assert (denied["principal"], denied["groups"]) == ("User:carol", "")


@pytest.mark.spark
def test_advise_grants_the_user_and_leaves_group_super_users_out(spark, audit, capsys):
    out = audit / "advice.json"
    assert main(["advise", "--audit", str(audit / "audit"), "--out", str(out)]) == 0
    entries = json.loads(out.read_text())["acls"]
    assert {(e["principal"], e["operation"], e["resource_name"]) for e in entries} == {
        ("User:alice", "READ", "pay"),  # DESCRIBE implied
        ("User:bob", "READ", "orders"),
    }
    args = ["advise", "--audit", str(audit / "audit"), "--out", str(out)]
    assert main([*args, "--super-user", "Group:payments"]) == 0
    entries = json.loads(out.read_text())["acls"]
    assert {e["principal"] for e in entries} == {"User:bob"}
    capsys.readouterr()
