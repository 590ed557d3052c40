"""The audit topic sink (--audit-topic; proxy/audit/kafka.py) with real clients and tansu: the
events of a running proxy arrive in the topic as the file has them, keyed by principal, in
order per principal; the topic is invisible and untouchable through the proxy but for super
users; a full spool counts and logs its losses; a spool left by a stopped instance is sent
first by the next one. The cluster-down-and-back case is tests/proxy/test_audit_topic_outage.py
(Apache Kafka, which keeps its data over a restart)."""

from __future__ import annotations

import collections
import gc
import json
import logging
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from aclgate.proxy.audit.kafka import AuditTopicSettings, KafkaAuditSink
from aclgate.proxy.demo.embedded_broker import free_port
from tests.enforce.conftest import start_enforced, users_file  # noqa: F401 (a fixture)
from tests.enforce.test_clients_enforced import create_topics, produce
from tests.fixtures.wait import wait_until

DECISION_FIELDS = [
    "schema_version", "ts", "ts_first", "count", "proxy", "listener", "principal", "groups", "host", "client_id",
    "api", "api_key", "api_version", "operation", "resource_type", "resource_name", "decision",
    "enforced", "rule", "acl",
]  # fmt: skip


def acl(principal: str, operation: str, name: str, pattern: str = "LITERAL") -> dict:
    return {
        "resource_type": "TOPIC",
        "resource_name": name,
        "pattern_type": pattern,
        "principal": principal,
        "host": "*",
        "operation": operation,
        "permission_type": "ALLOW",
    }


def write_acls(path: Path, *acls: dict) -> None:
    path.write_text(json.dumps({"version": 1, "acls": list(acls)}))


def read_topic(bootstrap: str, topic: str, want: int, timeout: float = 30) -> list:
    """Every record of `topic` (at least `want`, then one more second for any extra): a list
    of (partition, key, value), each partition in offset order."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}", "logger": logging}
    )
    try:
        md = consumer.list_topics(topic, timeout=10)
        partitions = sorted(md.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        got: list = []

        def more() -> bool:
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error() is None:
                    got.append((msg.partition(), msg.key(), msg.value()))
            return len(got) >= want

        wait_until(more, timeout=timeout, what=f"{want} records in {topic}")
        for _ in range(5):  # one more second: anything past `want` is an extra the test sees
            more()
        return got
    finally:
        consumer.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def audited(tansu, proxy_factory, users_file, tmp_path):  # noqa: F811
    """An authorizing proxy (SASL PLAIN; User:admin a super user; bob may write orders-*)
    sending its audit to a topic on the fronted cluster, and to a file to compare with."""
    acl_file = tmp_path / "acls.json"
    write_acls(
        acl_file,
        acl("User:bob", "WRITE", "orders-", "PREFIXED"),
        acl("User:bob", "DESCRIBE", "orders-", "PREFIXED"),
    )
    topic = unique("aclgate-audit")
    gate = start_enforced(
        tansu, proxy_factory, users_file, tmp_path, acl_file, audit_topic=topic, audit_window=1.0
    )
    gate.topic = topic  # type: ignore[attr-defined]
    gate.upstream = tansu.bootstrap  # type: ignore[attr-defined]
    return gate


def test_the_events_of_a_running_proxy_arrive_in_the_topic_keyed_by_principal(audited):
    server = audited.proxy.server
    orders = unique("orders")
    create_topics(audited, orders)  # admin: super user
    assert produce(audited, "bob", [(orders, b"1"), (orders, b"2")]) == {orders: [None, None]}
    (err,) = produce(audited, "alice", [(orders, b"no")])[orders]
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    file_lines = [json.dumps(e, separators=(",", ":")) for e in audited.audit()]  # flushes
    wait_until(lambda: server.audit_sink.sent >= server.audit.lines_written, timeout=20)
    assert server.audit.lines_written == len(file_lines)
    records = read_topic(audited.upstream, audited.topic, len(file_lines))

    # the value is the file's line, byte for byte (UTF-8, no newline); nothing more, nothing less
    values = [value.decode("utf-8") for _, _, value in records]
    assert collections.Counter(values) == collections.Counter(file_lines)
    events = [json.loads(v) for v in values]
    for (_, key, _), event in zip(records, events, strict=True):
        assert key == event["principal"].encode("utf-8")
        assert list(event) == DECISION_FIELDS
    principals = {e["principal"] for e in events}
    assert {"User:admin", "User:bob", "User:alice"} <= principals
    denied = [e for e in events if e["decision"] == "DENIED"]
    assert denied and {e["principal"] for e in denied} == {"User:alice"}
    assert all(e["resource_name"] == orders and e["rule"] == "DEFAULT_DENY" for e in denied)
    # one principal's events: one partition, in the order they were written
    for principal in principals:
        assert (
            len(
                {
                    p
                    for (p, _, _), e in zip(records, events, strict=True)
                    if e["principal"] == principal
                }
            )
            == 1
        )
        in_topic = [v for v, e in zip(values, events, strict=True) if e["principal"] == principal]
        in_file = [line for line in file_lines if json.loads(line)["principal"] == principal]
        assert in_topic == in_file

    assert audited.proxy.metric("aclgate_audit_sink_sent_total") == len(file_lines)
    assert audited.proxy.metric("aclgate_audit_sink_spooled_total") == 0
    status = server.readiness()[1]["audit_sink"]
    assert status["state"] == "sending" and status["topic"] == audited.topic


def test_the_audit_topic_is_hidden_and_denied_through_the_proxy_but_for_super_users(audited):
    topic = audited.topic
    wait_until(lambda: topic in AdminClient({"bootstrap.servers": audited.upstream})
               .list_topics(timeout=10).topics, what="the audit topic created")  # fmt: skip
    # alice may do anything to any topic, and still cannot see or touch the audit topic
    write_acls(audited.acl_file, acl("User:alice", "ALL", "*"))
    audited.proxy.run(audited.proxy.server.watcher.reload_once)
    alice = AdminClient(audited.confluent("alice"))
    assert topic not in alice.list_topics(timeout=10).topics
    assert audited.proxy.metric("aclgate_acls") == 1
    (err,) = produce(audited, "alice", [(topic, b"forged event")])[topic]
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    other = unique("other")
    assert produce(audited, "alice", [(other, b"x")]) == {other: [None]}  # the ACL works
    admin = AdminClient(audited.confluent("admin"))
    assert topic in admin.list_topics(timeout=10).topics  # a super user sees it


def test_a_full_spool_counts_and_logs_every_line_it_loses(tansu, proxy_factory, tmp_path, caplog):
    """The audit cluster is unreachable (nothing listens there) and the spool holds 2 KB: the
    lines past it are lost, counted and logged at ERROR, never silently."""
    caplog.set_level(logging.ERROR, logger="aclgate.audit")
    acl_file = tmp_path / "acls.json"
    write_acls(acl_file)
    proxy = proxy_factory(
        tansu.bootstrap,
        acl_file=acl_file,
        allow_everyone_if_no_acl_found=False,
        audit_topic="audit",
        audit_bootstrap=f"127.0.0.1:{free_port()}",
        audit_spool=tmp_path / "spool",
        audit_spool_max_bytes=2000,
        audit_delivery_timeout=1.0,
    )
    server = proxy.server
    client = AdminClient({"bootstrap.servers": proxy.bootstrap})
    for i in range(12):  # denied DESCRIBEs (librdkafka asks again and again)
        client.list_topics(f"t{i}", timeout=10)
    del client  # no more requests
    gc.collect()
    sink = server.audit_sink
    seen = [-1]

    def settled() -> bool:  # every line written and handed over
        proxy.run(server.audit.flush_aggregates)
        written, seen[0] = seen[0], server.audit.lines_written
        return written == seen[0] and sink.spooled + sink.dropped["spool_full"] == written

    wait_until(settled, timeout=20, interval=0.5, what=f"lines spooled or lost: {sink.status()}")
    written = seen[0]
    assert sink.sent == 0 and 0 < sink.spooled < written
    assert proxy.metric("aclgate_audit_sink_dropped_total", {"reason": "spool_full"}) == (
        written - sink.spooled
    )
    assert 0 < proxy.metric("aclgate_audit_sink_spool_bytes") <= 2000
    assert proxy.metric("aclgate_audit_sink_spool_limit_bytes") == 2000  # the configured limit
    full = [r.getMessage() for r in caplog.records if "is full" in r.getMessage()]
    assert full and "audit lines lost so far" in full[0]
    assert server.readiness()[1]["audit_sink"]["state"] == "spooling"


def test_a_spool_left_by_a_stopped_instance_is_sent_first_by_the_next(tansu, tmp_path):
    """Instance 1 cannot reach its cluster and stops: its lines stay in the spool. Instance 2
    starts on the same spool with the cluster there: the old lines arrive first, then the new
    ones, one principal's all in order; nothing lost, nothing twice."""
    topic, spool = unique("audit"), tmp_path / "spool"
    lines = [json.dumps({"principal": "User:alice", "n": n}) + "\n" for n in range(30)]
    first = KafkaAuditSink(
        AuditTopicSettings(f"127.0.0.1:{free_port()}", topic, spool, delivery_timeout=1.0)
    )
    for text in lines[:20]:
        first.write(text, "User:alice", True)
    first.close()
    assert first.spooled == 20 and first.sent == 0 and first.spool_pending_bytes > 0

    second = KafkaAuditSink(AuditTopicSettings(tansu.bootstrap, topic, spool))
    for text in lines[20:]:  # behind the spooled ones, whatever the timing
        second.write(text, "User:alice", True)
    wait_until(lambda: second.sent == 30, timeout=30, what="the spool and the new lines sent")
    second.close()
    records = read_topic(tansu.bootstrap, topic, 30)
    assert [value.decode() + "\n" for _, _, value in records] == lines
    assert second.spool_pending_bytes == 0 and not list(spool.glob("*.jsonl"))


def test_audit_topic_settings_are_checked_and_the_topic_is_protected(tmp_path):
    from aclgate.proxy.aclstore.backends import protected_topics
    from aclgate.proxy.config import ConfigError
    from tests.fixtures.proxy import make_config

    with pytest.raises(ConfigError, match="audit_topic needs --audit-spool"):
        make_config("kafka-1:9092", audit_topic="audit")
    with pytest.raises(ConfigError, match="audit_spool is only used with --audit-topic"):
        make_config("kafka-1:9092", audit_spool=tmp_path / "spool")
    with pytest.raises(ConfigError, match="also the ACL store's --acl-topic"):
        make_config("kafka-1:9092", audit_topic="acls", audit_spool=tmp_path, acl_store="kafka",
                    acl_topic="acls")  # fmt: skip
    config = make_config("kafka-1:9092", audit_topic="audit", audit_file=tmp_path / "a.jsonl")
    assert config.audit_spool_dir == tmp_path / "_a-spool"  # beside the file, never read as one
    assert protected_topics(config) == frozenset({"audit"})
    both = make_config("kafka-1:9092", audit_topic="audit", audit_spool=tmp_path,
                       acl_store="kafka")  # fmt: skip
    assert protected_topics(both) == frozenset({"audit", "__aclgate_acls"})


def test_a_spool_in_use_stops_the_start_with_one_clear_line(tmp_path, tansu):
    from aclgate.proxy.audit.spool import AuditSpool

    held = AuditSpool(tmp_path / "spool", max_bytes=1 << 20)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "aclgate", "serve", "--upstream", tansu.bootstrap,
             "--listen", "127.0.0.1:0", "--audit-topic", "audit",
             "--audit-spool", str(tmp_path / "spool")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        held.close()
    assert out.returncode == 1
    assert "cannot start: audit spool" in out.stderr and "in use by another process" in out.stderr


def test_a_sink_thread_that_dies_of_a_bug_counts_every_later_line_as_lost(
    tmp_path, monkeypatch, caplog
):
    def broken(self) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(KafkaAuditSink, "_step", broken)
    monkeypatch.setattr(KafkaAuditSink, "_ensure_topic", lambda self: None)
    sink = KafkaAuditSink(
        AuditTopicSettings(f"127.0.0.1:{free_port()}", "audit", tmp_path / "spool")
    )
    wait_until(lambda: not sink._thread.is_alive(), timeout=10)
    for _ in range(3):
        sink.write('{"principal":"User:a"}\n', "User:a", True)
    assert sink.dropped["sink_failed"] == 3 and not sink._queue
    assert "the sink thread failed" in caplog.text
    sink.close()
