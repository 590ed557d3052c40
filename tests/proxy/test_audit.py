"""The audit log writer and the Kafka-style authorizer log line."""

from __future__ import annotations

import gzip
import json

from aclgate.authz.decision import DEFAULT_DENY, NO_ACL_ALLOW, Decision
from aclgate.authz.model import AclBinding, AclOperation
from aclgate.proxy.audit.decisions import kafka_log_line
from aclgate.proxy.audit.file import AuditFile
from aclgate.proxy.audit.log import AuditLog
from tests.fixtures.decisions import decision_record

SCHEMA_FIELDS = [
    "schema_version", "ts", "ts_first", "count", "proxy", "listener", "principal", "groups", "host", "client_id",
    "api", "api_key", "api_version", "operation", "resource_type", "resource_name", "decision",
    "enforced", "rule", "acl",
]  # fmt: skip


class Clock:
    def __init__(self, t: float = 1_800_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def record(
    log: AuditLog,
    decision: Decision,
    principal: str = "User:alice",
    name: str = "orders",
    enforced: bool = True,
):
    log.record(
        decision_record(
            decision, name, principal, "10.1.2.3", listener="SASL_SSL", client_id="rdkafka",
            enforced=enforced,
        )
    )  # fmt: skip


def lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_denied_written_at_once_allowed_aggregated_per_window(tmp_path):
    clock = Clock()
    log = AuditLog(tmp_path / "audit.jsonl", "aclgate-1", window=10, clock=clock)
    acl = AclBinding.from_dict(
        {
            "resource_type": "TOPIC",
            "resource_name": "ord",
            "pattern_type": "PREFIXED",
            "principal": "User:alice",
            "host": "*",
            "operation": "WRITE",
            "permission_type": "ALLOW",
        }
    )
    allowed = Decision(True, "ACL", acl)
    for _ in range(5):
        record(log, allowed)
        clock.t += 1
    record(log, DEFAULT_DENY, principal="User:bob")
    log.tick()
    assert [e["principal"] for e in lines(log.path)] == ["User:bob"]  # window not over yet
    clock.t += 10
    log.tick()
    events = lines(log.path)
    denied, agg = events
    assert list(denied) == SCHEMA_FIELDS and list(agg) == SCHEMA_FIELDS
    assert denied["decision"] == "DENIED" and denied["count"] == 1 and denied["ts_first"] is None
    assert denied["rule"] == "DEFAULT_DENY" and denied["acl"] is None
    assert agg["count"] == 5 and agg["decision"] == "ALLOWED" and agg["rule"] == "ACL"
    assert agg["acl"] == acl.to_dict() and agg["acl"]["pattern_type"] == "PREFIXED"
    assert agg["ts_first"] < agg["ts"] and agg["ts"].endswith("Z") and len(agg["ts"]) == 27
    assert agg["schema_version"] == 1 and agg["proxy"] == "aclgate-1" and agg["host"] == "10.1.2.3"


def test_denial_storm_is_aggregated_past_the_rate_limit_and_nothing_is_lost(tmp_path):
    clock = Clock()
    log = AuditLog(tmp_path / "audit.jsonl", "p", denied_per_second=10, clock=clock)
    for _ in range(25):
        record(log, DEFAULT_DENY, enforced=False)
    log.close()
    events = lines(log.path)
    assert len(events) == 11  # 10 single lines, then one aggregated line for the other 15
    assert sum(e["count"] for e in events) == 25
    assert all(e["enforced"] is False for e in events)
    assert log.denied_aggregated == 15


def test_rotation_gzips_and_prunes(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", "p", max_bytes=2000, keep=3)
    for i in range(200):
        record(log, DEFAULT_DENY, name=f"t{i}")
    log.close()
    rotated = sorted(tmp_path.glob("audit-*.jsonl.gz"))
    assert 1 <= len(rotated) <= 3
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob("audit-*.jsonl"))
    kept = [
        json.loads(x)
        for p in rotated
        for x in gzip.decompress(p.read_bytes()).decode().splitlines()
    ]
    kept += lines(log.path)
    names = [e["resource_name"] for e in kept]
    assert names == sorted(names, key=lambda n: int(n[1:]))  # in order, only the oldest pruned
    assert names[-1] == "t199"


def test_no_acl_default_allowed_rule(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", "p")
    record(log, NO_ACL_ALLOW)
    log.close()
    (event,) = lines(log.path)
    assert event["rule"] == "NO_ACL_DEFAULT" and event["decision"] == "ALLOWED"


def test_kafka_log_line_is_word_for_word_standard_authorizer():
    acl = AclBinding.from_dict(
        {
            "resource_type": "TOPIC",
            "resource_name": "alp",
            "pattern_type": "PREFIXED",
            "principal": "User:bob",
            "host": "*",
            "operation": "READ",
            "permission_type": "DENY",
        }
    )
    line = kafka_log_line(
        decision_record(
            Decision(False, "ACL", acl), "alpha", "User:bob", "127.0.0.1",
            operation=AclOperation.READ, api_key=1,
        )
    )  # fmt: skip
    # StandardAuthorizerTest.testDenyAuditLogging (docs/audit.md, "The authorizer log line")
    assert line == (
        "Principal = User:bob is Denied operation = READ from host = 127.0.0.1 on resource = "
        "Topic:LITERAL:alpha for request = Fetch with resourceRefCount = 1 based on rule "
        "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=alp, patternType=PREFIXED, "
        "principal=User:bob, host=*, operation=READ, permissionType=DENY))"
    )


def test_rotated_files_are_compressed_in_a_worker_thread(tmp_path, monkeypatch):
    import threading

    seen = []
    real = AuditFile._gzip

    def spy(self, path):
        seen.append(threading.current_thread() is threading.main_thread())
        real(self, path)

    monkeypatch.setattr(AuditFile, "_gzip", spy)
    log = AuditLog(tmp_path / "audit.jsonl", "p", max_bytes=20_000)
    for i in range(500):
        record(log, DEFAULT_DENY, name=f"topic-{i}")
    log.close()
    assert seen and not any(seen), "gzip must not run on the event loop's thread"
    assert list(tmp_path.glob("audit-*.jsonl.gz"))


def test_a_denial_line_reaches_the_file_before_any_flush(tmp_path):
    """A proxy killed right after a denial (kill -9, OOM) must not lose its audit line."""
    log = AuditLog(tmp_path / "audit.jsonl", "p", clock=Clock())
    record(log, DEFAULT_DENY, principal="User:mallory")
    record(log, Decision(True, "ACL", None))  # allowed: aggregated, written when the window ends
    assert [e["principal"] for e in lines(log.path)] == ["User:mallory"]  # no tick, no close
    log.close()


class ListSink:
    """An AuditSink (proxy/audit/sink.py) that keeps what it is given."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, bool]] = []

    def write(self, line: str, key: str, urgent: bool) -> None:
        self.lines.append((line, key, urgent))

    def tick(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_denials_past_the_limit_reach_the_sinks_as_counted_lines_within_a_tick(tmp_path):
    """No denial is aggregated away: past the per-second limit each one is still in the
    `count` of a line, written at the next tick (not at the window's end) and marked urgent."""
    clock = Clock()
    sink = ListSink()
    log = AuditLog(tmp_path / "audit.jsonl", "p", window=60, denied_per_second=3, clock=clock,
                   sinks=[sink])  # fmt: skip
    for _ in range(10):
        record(log, DEFAULT_DENY, principal="User:mallory")
    record(log, Decision(True, "ACL", None))  # allowed: waits for the window
    clock.t += 1
    log.tick()
    events = [json.loads(text) for text, _, _ in sink.lines]
    assert [e["count"] for e in events] == [1, 1, 1, 7]
    assert all(e["decision"] == "DENIED" for e in events)
    assert all(key == "User:mallory" and urgent for _, key, urgent in sink.lines)
    assert [text for text, _, _ in sink.lines] == log.path.read_text().splitlines(keepends=True)
    log.close()
    assert json.loads(sink.lines[-1][0])["decision"] == "ALLOWED"


def test_an_audit_log_without_a_file_feeds_its_sinks_only(tmp_path):
    sink = ListSink()
    log = AuditLog(None, "p", clock=Clock(), sinks=[sink])
    record(log, DEFAULT_DENY)
    log.close()
    assert len(sink.lines) == 1 and log.lines_written == 1 and log.file is None
    assert not list(tmp_path.iterdir())


def test_the_log_line_names_the_sessions_groups_and_the_group_acl():
    acl = AclBinding.from_dict(
        {"resource_type": "TOPIC", "resource_name": "pay", "pattern_type": "PREFIXED",
         "principal": "Group:contractors", "host": "*", "operation": "READ",
         "permission_type": "DENY"}
    )  # fmt: skip
    groups = frozenset({"Group:payments", "Group:contractors"})
    record = decision_record(Decision(False, "ACL", acl), "payments", "User:bob", groups=groups)
    line = kafka_log_line(record)
    assert line.startswith(
        "Principal = User:bob (groups = Group:contractors, Group:payments) is Denied operation"
    )
    assert "principal=Group:contractors" in line
