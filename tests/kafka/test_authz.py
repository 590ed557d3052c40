"""The authorizing variant: StandardAuthorizer decides, ACLs change what a principal may do."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from kafka import KafkaConsumer
from kafka import TopicPartition as KPTopicPartition

from tests.kafka import tools

pytestmark = pytest.mark.kafka

RECORDS = [b"r0", b"r1", b"r2"]


@pytest.fixture
def topic(kafka_authz, kafka_topic_name):
    """A topic holding RECORDS, written by the super user on the INTERNAL listener."""
    kafka_authz.create_topic(kafka_topic_name)
    p = Producer(kafka_authz.internal.confluent_config())
    for r in RECORDS:
        p.produce(kafka_topic_name, r)
    assert p.flush(20) == 0
    return kafka_topic_name


def read_as(kafka, user: str, topic: str, group: str, timeout: float = 20):
    """Consume RECORDS in a group as `user` (PLAIN); returns the values or the first error."""
    cfg = kafka.listener("SASL_PLAINTEXT").confluent_config(user=user, mechanism="PLAIN")
    c = Consumer(
        {
            **cfg,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < len(RECORDS) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                return m.error()
            got.append(m.value())
    finally:
        c.close()
    return got


def test_super_user_reads_without_acls(kafka_authz, kafka_acls, topic):
    assert kafka_acls.list() == []
    assert read_as(kafka_authz, "admin", topic, "g-" + topic) == RECORDS


def test_bob_is_denied_until_an_acl_is_added_with_the_admin_api(kafka_authz, kafka_acls, topic):
    group = "g-" + topic
    kafka_acls.add("bob", "READ", "GROUP", group)
    err = read_as(kafka_authz, "bob", topic, group)
    assert isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    kafka_acls.add("bob", "READ", "TOPIC", topic)
    assert read_as(kafka_authz, "bob", topic, group) == RECORDS
    # kafka-python, no group: READ on the topic is all a plain fetch needs
    c = KafkaConsumer(
        group_id=None,
        **kafka_authz.listener("SASL_PLAINTEXT").kafka_python_config(user="bob", mechanism="PLAIN"),
    )
    try:
        c.assign([KPTopicPartition(topic, 0)])
        c.seek_to_beginning()
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < len(RECORDS) and time.monotonic() < deadline:
            for recs in c.poll(200).values():
                got += [r.value for r in recs]
    finally:
        c.close()
    assert got == RECORDS

    # and removing it takes the right away again
    kafka_acls.remove("bob", "READ", "TOPIC", topic)
    err = read_as(kafka_authz, "bob", topic, group)
    assert isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_bob_cannot_write_without_an_acl(kafka_authz, kafka_acls, topic):
    cfg = kafka_authz.listener("SASL_PLAINTEXT").confluent_config(user="bob", mechanism="PLAIN")
    reports = []
    p = Producer({**cfg, "message.timeout.ms": 5000})
    p.produce(topic, b"nope", on_delivery=lambda err, msg: reports.append(err))
    p.flush(10)
    assert [e.code() for e in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_charlie_is_allowed_after_kafka_acls_adds_an_acl(kafka_authz, kafka_acls, topic):
    group = "g-" + topic
    lst = kafka_authz.listener("SASL_PLAINTEXT")
    admin_props = lst.java_properties(user="admin", mechanism="PLAIN")
    assert isinstance(read_as(kafka_authz, "charlie", topic, group), KafkaError)

    # one kafka-acls call: READ on the topic and on the group, over SASL as the super user
    tools.kafka_acls(
        lst.bootstrap,
        "--add",
        "--allow-principal",
        "User:charlie",
        "--operation",
        "Read",
        "--topic",
        topic,
        "--group",
        group,
        config=admin_props,
    ).check()
    kafka_acls.wait_for(
        [
            kafka_acls.binding("charlie", "READ", "TOPIC", topic),
            kafka_acls.binding("charlie", "READ", "GROUP", group),
        ]
    )
    listed = tools.kafka_acls(lst.bootstrap, "--list", "--topic", topic, config=admin_props)
    assert listed.check().stdout.count("User:charlie") == 1, listed.stdout
    assert read_as(kafka_authz, "charlie", topic, group) == RECORDS
