"""The least-privilege advisor: safe prefixes, implied operations, and the round trip."""

from __future__ import annotations

import io
import json

import pytest

from aclgate.pipeline.advise import AdviseOptions, observations, run_advise
from aclgate.pipeline.advisor import Key, Observations, candidate_prefixes, propose
from aclgate.pipeline.inputs import expand_inputs
from aclgate.pipeline.reader import read_audit
from aclgate.pipeline.spark import Progress
from tests.pipeline.helpers import aclgate, check_decisions


def obs(allowed, denied=(), also_seen=()) -> Observations:
    o = Observations()
    o.allowed = {Key(*k) for k in allowed}
    o.denied = {Key(*k) for k in denied}
    for k in [*o.allowed, *o.denied, *(Key("User:x", "*", "READ", *r) for r in also_seen)]:
        o.seen[k.resource_type].add(k.resource_name)
    return o


def acls_of(proposal) -> set[tuple]:
    return {
        (
            a["principal"],
            a["operation"],
            a["resource_type"],
            a["resource_name"],
            a["pattern_type"],
            a["host"],
        )
        for a in proposal.acls
    }


def reads(principal: str, *topics: str, host: str = "10.0.0.1") -> list[tuple]:
    return [(principal, host, "READ", "TOPIC", t) for t in topics]


def test_prefix_candidates_end_at_separators():
    assert candidate_prefixes("team-a.orders_v1") == ["team-", "team-a.", "team-a.orders_"]
    assert candidate_prefixes("plain") == []


def test_prefix_collapses_when_every_seen_topic_was_read():
    p = propose(obs(reads("User:a", "pay.x", "pay.y", "pay.z")), min_prefix=3)
    assert acls_of(p) == {("User:a", "READ", "TOPIC", "pay.", "PREFIXED", "*")}


def test_prefix_does_not_collapse_over_a_topic_someone_else_uses():
    p = propose(
        obs(reads("User:a", "pay.x", "pay.y", "pay.z"), also_seen=[("TOPIC", "pay.secret")])
    )
    assert {a[3] for a in acls_of(p)} == {"pay.x", "pay.y", "pay.z"}
    assert {a[4] for a in acls_of(p)} == {"LITERAL"}


def test_prefix_needs_min_prefix_resources():
    allowed = reads("User:a", "pay.x", "pay.y")
    assert {a[4] for a in acls_of(propose(obs(allowed), min_prefix=3))} == {"LITERAL"}
    assert acls_of(propose(obs(allowed), min_prefix=2)) == {
        ("User:a", "READ", "TOPIC", "pay.", "PREFIXED", "*")
    }
    assert {a[4] for a in acls_of(propose(obs(allowed), min_prefix=0))} == {"LITERAL"}


def test_shortest_safe_prefix_wins_and_groups_collapse_too():
    allowed = reads("User:a", "t.eu.1", "t.eu.2", "t.us.1") + [
        ("User:a", "10.0.0.1", "READ", "GROUP", g) for g in ("a-1", "a-2", "a-3")
    ]
    p = propose(obs(allowed, also_seen=[("TOPIC", "t.apac.9")]), min_prefix=2)
    assert acls_of(p) == {
        ("User:a", "READ", "TOPIC", "t.eu.", "PREFIXED", "*"),
        ("User:a", "READ", "TOPIC", "t.us.1", "LITERAL", "*"),
        ("User:a", "READ", "GROUP", "a-", "PREFIXED", "*"),
    }


def test_no_describe_where_read_or_write_implies_it():
    allowed = [
        ("User:a", "10.0.0.1", "READ", "TOPIC", "t"),
        ("User:a", "10.0.0.1", "DESCRIBE", "TOPIC", "t"),
        ("User:a", "10.0.0.1", "DESCRIBE", "TOPIC", "only-described"),
        ("User:a", "10.0.0.1", "ALTER_CONFIGS", "TOPIC", "t"),
        ("User:a", "10.0.0.1", "DESCRIBE_CONFIGS", "TOPIC", "t"),
    ]
    assert acls_of(propose(obs(allowed))) == {
        ("User:a", "READ", "TOPIC", "t", "LITERAL", "*"),
        ("User:a", "ALTER_CONFIGS", "TOPIC", "t", "LITERAL", "*"),
        ("User:a", "DESCRIBE", "TOPIC", "only-described", "LITERAL", "*"),
    }


def test_hosts_are_pinned_only_when_a_denial_needs_it():
    allowed = reads("User:a", "t1", "t2") + reads("User:a", "t1", host="10.0.0.2")
    denied = reads("User:a", "t1", host="10.9.9.9")
    p = propose(obs(allowed, denied))
    assert acls_of(p) == {
        ("User:a", "READ", "TOPIC", "t1", "LITERAL", "10.0.0.1"),
        ("User:a", "READ", "TOPIC", "t1", "LITERAL", "10.0.0.2"),
        ("User:a", "READ", "TOPIC", "t2", "LITERAL", "*"),
    }
    assert p.conflicts == []


def test_prefix_falls_back_to_literals_when_a_denial_hides_under_it():
    allowed = reads("User:a", "p.1", "p.2", "p.3")
    denied = [("User:a", "10.0.0.7", "READ", "TOPIC", "p.2")]
    p = propose(obs(allowed, denied))
    assert ("User:a", "READ", "TOPIC", "p.2", "LITERAL", "10.0.0.1") in acls_of(p)
    assert ("User:a", "READ", "TOPIC", "p.1", "LITERAL", "*") in acls_of(p)
    assert not any(a[4] == "PREFIXED" for a in acls_of(p))


def test_unavoidable_conflicts_are_reported():
    allowed = [("User:a", "10.0.0.1", "READ", "TOPIC", "t")]
    denied = [("User:a", "10.0.0.1", "DESCRIBE", "TOPIC", "t")]
    p = propose(obs(allowed, denied))
    assert acls_of(p) == {("User:a", "READ", "TOPIC", "t", "LITERAL", "10.0.0.1")}
    assert len(p.conflicts) == 1 and "implies DESCRIBE" in p.conflicts[0]["why"]


def test_shapes_are_recognised():
    allowed = [
        *reads("User:c", "t.1"),
        ("User:c", "h", "READ", "GROUP", "g"),
        ("User:p", "h", "WRITE", "TOPIC", "t.1"),
        ("User:p", "h", "WRITE", "TRANSACTIONAL_ID", "tx"),
        ("User:adm", "h", "ALTER", "CLUSTER", "kafka-cluster"),
    ]
    shapes = propose(obs(allowed)).shapes
    assert shapes["User:c"]["shape"] == "consumer"
    assert shapes["User:p"]["shape"] == "transactional producer"
    assert shapes["User:adm"] == {
        **shapes["User:adm"],
        "shape": "custom",
        "other": ["ALTER CLUSTER"],
    }


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("advise")
    result = aclgate(
        "audit-sample", "--events", "4000", "--out", str(root / "audit"), "--seed", "3"
    )
    assert result.returncode == 0, result.stderr
    return root


@pytest.mark.spark
@pytest.mark.parametrize("dry_run", [False, True], ids=["strict", "with-dry-run-denials"])
def test_round_trip_with_aclgate_acls_and_check(spark, sample, dry_run):
    out = sample / f"advice-{dry_run}.json"
    opts = AdviseOptions(
        audit=[str(sample / "audit")],
        out=str(out),
        include_dry_run_denials=dry_run,
        super_users=["User:admin"],
        explain=str(sample / "explain.json"),
    )
    summary = run_advise(spark, opts, Progress("advise", 3, io.StringIO()))
    assert summary["conflicts"] == []
    assert summary["prefixed_acls"] > 0
    assert json.loads((sample / "explain.json").read_text())["acls"] == summary["acls"]

    listed = aclgate("acls", "--acl-file", str(out), "--list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("permissionType=ALLOW") == summary["acls"]

    data = read_audit(spark, expand_inputs([str(sample / "audit")]))
    try:
        seen, _ = observations(data.events, include_dry_run_denials=False)
        dry = {
            Key.of([r[f] for f in Key._fields])
            for r in data.events.filter("decision = 'DENIED' AND NOT enforced").collect()
        }
    finally:
        data.release()
    decided = check_decisions(out, [*seen.allowed, *seen.denied], "--super-user=User:admin")
    assert all(decided[k]["decision"] == "ALLOWED" for k in seen.allowed)
    must_deny = seen.denied - dry if dry_run else seen.denied
    assert must_deny and all(decided[k]["decision"] == "DENIED" for k in must_deny)
    dry_allowed = [k for k in dry if decided[k]["decision"] == "ALLOWED"]
    assert (len(dry_allowed) == len(dry)) if dry_run else dry_allowed == []
    shapes = summary["principals"]
    assert shapes["User:payments-reader"]["shape"] == "consumer"
    assert shapes["User:orders-svc"]["shape"] == "transactional producer"
    assert "User:admin" not in shapes
    # payments.cards-raw is written but never read by payments-reader: no payments.* READ.
    assert "payments.*" not in shapes["User:payments-reader"]["consumes_from"]
    assert "payments.*" in shapes["User:payments-svc"]["produces_to"]
