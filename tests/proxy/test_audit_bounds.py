"""The audit log and the denial log keep bounded client-chosen strings (issue 20, B8): strings
are cut (protocol/bounds.py), each aggregation holds at most `max_keys` keys and
`max_key_bytes` bytes of such strings and is written early at its bound, counted; every
decision stays in the trail."""

from __future__ import annotations

import hashlib
import logging
import re
from types import SimpleNamespace

from aclgate.authz.decision import DEFAULT_DENY, NO_ACL_ALLOW, Decision
from aclgate.authz.model import AclOperation
from aclgate.protocol import bounds, header
from aclgate.proxy.audit.decisions import DecisionRecorder
from aclgate.proxy.audit.log import AuditLog
from tests.fixtures.decisions import decision_record
from tests.fixtures.rawclient import RawClient
from tests.listeners.util import metadata_request, read_audit
from tests.proxy.test_audit import Clock, lines
from tests.proxy.test_log_safety import denied_produce

MARKER = re.compile(r"\.\.\.\[(\d+) chars sha256:([0-9a-f]{16})\]$")
CTX = SimpleNamespace(principal="User:eve", host="10.0.0.9", listener="PLAINTEXT")


def decide(rec: DecisionRecorder, name: str, decision: Decision, client_id: str = "c") -> None:
    """One decision, reported as AuthContext.check reports it."""
    rec.decided(
        decision_record(
            decision, name, "User:eve", "10.0.0.9", operation=AclOperation.DESCRIBE,
            client_id=client_id, api_key=3, api_version=4,
        )
    )  # fmt: skip


def total_count(events: list[dict]) -> int:
    return sum(e["count"] for e in events)


def test_an_aggregation_at_its_key_bound_is_written_early_and_loses_no_decision(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", "p", window=10, clock=Clock(), max_keys=100)
    rec = DecisionRecorder({}, log)
    for i in range(1050):
        decide(rec, f"topic-{i}", NO_ACL_ALLOW)
        decide(rec, f"topic-{i}", NO_ACL_ALLOW)  # the same key: counted, not a new key
        assert log.held()[0] <= 100
    assert log.aggregation_overflows == 10
    log.tick()  # the window is not over: only to the OS
    written = lines(log.path)  # the ten early aggregations
    assert len(written) == 1000 and {e["count"] for e in written} == {2}
    log.close()  # the window's aggregation, written
    assert log.held() == (0, 0)
    assert total_count(lines(log.path)) == 2100


def test_an_aggregation_at_its_byte_bound_is_written_early(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", "p", window=10, clock=Clock(), max_key_bytes=64_000)
    rec = DecisionRecorder({}, log)
    for i in range(2000):
        decide(rec, f"{i:05d}" + "n" * 30_000, NO_ACL_ALLOW)  # cut to 512 characters
        assert log.held()[1] <= 64_000
    assert log.aggregation_overflows > 0
    log.close()
    events = lines(log.path)
    assert total_count(events) == 2000 and len({e["resource_name"] for e in events}) == 2000
    assert {len(e["resource_name"]) for e in events} == {bounds.RESOURCE_NAME}


def test_a_flood_of_distinct_denied_names_holds_bounded_keys(tmp_path):
    """Past the per-second limit denials are aggregated until the next tick: 20,000 distinct
    30 KB names in one second held 19,000 keys and 549 MiB before; now at most the bound."""
    log = AuditLog(tmp_path / "audit.jsonl", "p", denied_per_second=10, clock=Clock())
    rec = DecisionRecorder({}, log)
    keys, key_bytes = 0, 0
    for i in range(10_000):
        decide(rec, f"{i:05d}" + "t" * 5_000, DEFAULT_DENY)
        held = log.held()
        keys, key_bytes = max(keys, held[0]), max(key_bytes, held[1])
    assert keys <= log.max_keys and key_bytes <= log.max_key_bytes
    assert log.aggregation_overflows >= 1
    log.tick()
    events = lines(log.path)
    assert total_count(events) == 10_000 and log.held() == (0, 0)
    assert max(len(e["resource_name"]) for e in events) == bounds.RESOURCE_NAME


def test_the_audit_log_cuts_what_it_is_given_and_counts_a_cut_key_as_one(tmp_path):
    """Principal, client id and resource name are cut in the line; the same long decision
    twice is one key (a known cut key is found again, not added twice)."""
    log = AuditLog(tmp_path / "audit.jsonl", "p", window=10, clock=Clock())
    principal, cid, name = "User:" + "p" * 5000, "c" * 5000, "n" * 5000
    for decision in (NO_ACL_ALLOW, NO_ACL_ALLOW, DEFAULT_DENY):
        log.record(
            decision_record(
                decision, name, principal, operation="DESCRIBE", client_id=cid, api_key=3,
                api_version=4,
            )
        )  # fmt: skip
    assert log.held()[0] == 1
    log.close()
    denied, allowed = lines(log.path)
    assert allowed["count"] == 2 and denied["count"] == 1
    for event in (denied, allowed):
        assert event["principal"] == bounds.bounded(principal, bounds.PRINCIPAL)
        assert event["client_id"] == bounds.bounded(cid, bounds.CLIENT_ID)
        assert event["resource_name"] == bounds.bounded(name, bounds.RESOURCE_NAME)


def test_the_denial_log_line_and_its_rate_limit_key_carry_the_cut_name(caplog):
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    rec = DecisionRecorder({}, None)
    name = "secret-" + "s" * 30_000
    decide(rec, name, DEFAULT_DENY)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "aclgate.authorizer"]
    assert f"Topic:LITERAL:{bounds.bounded(name, bounds.RESOURCE_NAME)} for request" in line
    assert all(len(key[3]) <= bounds.RESOURCE_NAME for key in rec.denial_log._seen)


def test_distinct_long_client_ids_through_the_proxy(tansu, proxy_factory, tmp_path):
    """2,000 requests, each with a new 30 KB client id (231 MB for 4,000 before): the audit
    lines carry the cut ids, each with the digest of its whole id, and what the aggregation
    holds stays within its bound, written early and counted past it."""
    audit_file = tmp_path / "audit.jsonl"
    proxy = proxy_factory(tansu.bootstrap, audit_file=audit_file, audit_window=3600)
    audit = proxy.server.audit
    proxy.run(lambda: setattr(audit, "max_key_bytes", 256 * 1024))
    ids = [f"client-{i:05d}-" + "x" * 30_000 for i in range(2000)]
    with RawClient(proxy.bootstrap) as client:
        for cid in ids:
            client.request(metadata_request("b8-topic"), client_id=cid)
    _, key_bytes = proxy.run(audit.held)
    assert key_bytes <= 256 * 1024, key_bytes
    assert proxy.run(lambda: max(map(len, header._CLIENT_IDS), default=0)) <= bounds.CLIENT_ID
    events = [e for e in read_audit(proxy, audit_file) if e["resource_name"] == "b8-topic"]
    assert total_count(events) == 2000  # every decision is in the trail
    digests = {}
    for event in events:
        cid = event["client_id"]
        mark = MARKER.search(cid)
        assert len(cid) == bounds.CLIENT_ID and mark is not None
        digests[mark.group(2)] = cid
    assert len(digests) == 2000
    for cid in ids[:10]:  # a reader can find the line of a known id
        digest = hashlib.sha256(cid.encode()).hexdigest()[: bounds.DIGEST_CHARS]
        assert digests[digest].startswith(cid[:100])
    assert proxy.metric("aclgate_audit_aggregation_overflow_total") >= 1


def test_denied_long_topic_names_through_the_proxy(tansu, proxy_factory, tmp_path, caplog):
    """Denied Produce requests naming distinct 30 KB topics: the audit lines and the denial
    log lines carry the cut names (each 30 KB before)."""
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    acls = tmp_path / "acls.json"
    acls.write_text('{"version": 1, "acls": []}')
    audit_file = tmp_path / "audit.jsonl"
    proxy = proxy_factory(
        tansu.bootstrap,
        acl_file=acls,
        allow_everyone_if_no_acl_found=False,
        audit_file=audit_file,
    )
    names = [f"t{i:03d}-" + "n" * 30_000 for i in range(200)]
    with RawClient(proxy.bootstrap) as client:
        for name in names:
            answer = client.request(denied_produce(name))
            assert answer.responses[0].partition_responses[0].error_code == 29
    events = [e for e in read_audit(proxy, audit_file) if e["api"] == "Produce"]
    assert sorted(e["resource_name"] for e in events) == [
        bounds.bounded(name, bounds.RESOURCE_NAME) for name in names
    ]
    logged = [r.getMessage() for r in caplog.records if r.name == "aclgate.authorizer"]
    assert logged and max(map(len, logged)) < 2 * bounds.RESOURCE_NAME
