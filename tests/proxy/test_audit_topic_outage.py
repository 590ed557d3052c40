"""The audit topic while its cluster is down and back (issue 14 item 1): a running proxy (in
front of tansu) sends its audit to a topic on a separate Apache Kafka node (--audit-bootstrap).
The node is stopped; the decisions made meanwhile go to the spool; the node comes back with
its data; every line arrives, counted exactly: the topic holds the audit file's lines, each
once. The session's node is running again when the test ends."""

from __future__ import annotations

import collections
import json
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from tests.fixtures.wait import wait_until
from tests.kafka.cluster import KafkaCluster
from tests.proxy.test_audit_topic import read_topic, write_acls

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture
def audit_cluster(kafka_single: KafkaCluster) -> Iterator[KafkaCluster]:
    kafka_single.start_nodes()  # no-op when it runs
    yield kafka_single
    kafka_single.start_nodes()


def denials(proxy, names: list[str]) -> None:
    """One denied Metadata DESCRIBE per name (ANONYMOUS has no ACL), then the client is gone."""
    client = AdminClient(
        {"bootstrap.servers": proxy.bootstrap, "topic.metadata.refresh.interval.ms": -1}
    )
    for name in names:
        client.list_topics(name, timeout=10)
    del client


def test_audit_lines_spool_while_the_cluster_is_down_and_all_arrive_once_it_is_back(
    tansu, proxy_factory, audit_cluster, tmp_path
):
    acl_file = tmp_path / "acls.json"
    write_acls(acl_file)
    topic = f"aclgate-audit-{uuid.uuid4().hex[:8]}"
    proxy = proxy_factory(
        tansu.bootstrap,
        acl_file=acl_file,
        allow_everyone_if_no_acl_found=False,
        audit_file=tmp_path / "audit.jsonl",
        audit_topic=topic,
        audit_bootstrap=audit_cluster.bootstrap,
        audit_delivery_timeout=2.0,
    )
    server = proxy.server
    sink = server.audit_sink
    audit = server.audit

    def handed_over() -> int:  # lines written so far, aggregates included
        proxy.run(audit.flush_aggregates)
        return audit.lines_written

    denials(proxy, [f"before-{i}" for i in range(5)])
    wait_until(lambda: sink.sent and sink.sent == handed_over(), timeout=30, what="sent")
    assert sink.spooled == 0

    audit_cluster.stop_nodes()
    denials(proxy, [f"during-{i}" for i in range(40)])
    wait_until(lambda: sink.spool_pending_bytes > 0, timeout=30, what="lines spooled")
    during = handed_over()
    assert proxy.metric("aclgate_audit_sink_spool_bytes") > 0
    assert server.readiness()[1]["audit_sink"]["state"] == "spooling"
    assert server.readiness()[0] is True  # a spooling sink does not fail readiness

    audit_cluster.start_nodes()
    denials(proxy, [f"after-{i}" for i in range(5)])
    wait_until(
        lambda: sink.spool_pending_bytes == 0 and sink.sent == handed_over(),
        timeout=60,
        what="the spool delivered",
    )
    total = audit.lines_written
    assert sink.spooled > 0 and during < total
    assert sum(sink.dropped.values()) == 0
    assert proxy.metric("aclgate_audit_sink_sent_total") == total

    file_lines = [line for line in (tmp_path / "audit.jsonl").read_text().splitlines() if line]
    assert len(file_lines) == total
    records = read_topic(audit_cluster.bootstrap, topic, total, timeout=60)
    values = [value.decode("utf-8") for _, _, value in records]
    assert len(values) == total  # none lost, none twice
    assert collections.Counter(values) == collections.Counter(file_lines)
    names = {json.loads(v)["resource_name"] for v in values}
    assert {f"during-{i}" for i in range(40)} <= names


def test_audit_lines_spool_while_aclgate_may_not_write_the_topic_and_arrive_once_granted(
    kafka_authz, kafka_acls, tmp_path
):
    """The audit cluster has an authorizer and aclgate's identity (charlie) no permission on
    the audit topic yet: every line goes to the spool (authorization failed), none is lost;
    once WRITE and DESCRIBE are granted (docs/audit.md's table), the spool is delivered."""
    from aclgate.proxy.listen.server import ProxyServer
    from tests.fixtures.proxy import RunningProxy, make_config

    topic = f"aclgate-audit-{uuid.uuid4().hex[:8]}"
    kafka_authz.create_topic(topic, partitions=2)
    password = tmp_path / "charlie.password"
    password.write_text("charlie-secret\n")
    acl_file = tmp_path / "acls.json"
    write_acls(acl_file)
    sasl = kafka_authz.listener("SASL_PLAINTEXT")
    proxy = RunningProxy(
        ProxyServer(
            make_config(
                sasl.bootstrap,
                upstream_security_protocol="SASL_PLAINTEXT",
                upstream_sasl_mechanism="PLAIN",
                upstream_sasl_username="charlie",
                upstream_sasl_password_file=password,
                acl_file=acl_file,
                allow_everyone_if_no_acl_found=False,
                audit_file=tmp_path / "audit.jsonl",
                audit_topic=topic,
                audit_delivery_timeout=2.0,
            )
        )
    )
    try:
        server, sink, audit = (
            proxy.server,
            proxy.server.audit_sink,
            proxy.server.audit,
        )

        def handed_over() -> int:
            proxy.run(audit.flush_aggregates)
            return audit.lines_written

        denials(proxy, [f"refused-{i}" for i in range(10)])
        wait_until(lambda: sink.spooled >= 10, timeout=30, what="lines spooled")
        assert sink.sent == 0
        assert "AUTHORIZATION" in (server.readiness()[1]["audit_sink"]["last_error"] or "")

        kafka_acls.add("charlie", "WRITE", "TOPIC", topic)
        kafka_acls.add("charlie", "DESCRIBE", "TOPIC", topic)
        wait_until(
            lambda: sink.spool_pending_bytes == 0 and sink.sent == handed_over(),
            timeout=60,
            what="the spool delivered once granted",
        )
        total = audit.lines_written
    finally:
        proxy.stop()
    assert sum(sink.dropped.values()) == 0
    file_lines = [line for line in (tmp_path / "audit.jsonl").read_text().splitlines() if line]
    assert len(file_lines) == total
    records = read_topic(kafka_authz.internal.bootstrap, topic, total, timeout=60)
    values = [value.decode("utf-8") for _, _, value in records]
    assert collections.Counter(values) == collections.Counter(file_lines)
