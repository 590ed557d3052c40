"""The `kafka` ACL store (proxy/aclstore/kafka/store.py) against a real 3-node Apache Kafka: several
store instances, each with its own Authorizer, sharing one ACL topic, as a fleet of proxies does.

Each test uses a topic of its own on the session's kafka_cluster3.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import pytest_asyncio
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from aclgate.authz.aclrecords import encode_change
from aclgate.authz.authorizer import Authorizer, AuthorizerNotReadyError
from aclgate.authz.fingerprint import acl_fingerprint
from aclgate.authz.model import AclBinding, AclOperation, ResourceType
from aclgate.proxy.aclstore.backend import AclStoreError
from aclgate.proxy.aclstore.kafka.store import KafkaAclBackend, KafkaStoreSettings, read_acl_topic

pytestmark = [pytest.mark.asyncio, pytest.mark.kafka]


def acl(name: str, principal: str = "User:alice", permission: str = "ALLOW") -> AclBinding:
    return AclBinding.from_dict(
        {
            "resource_type": "TOPIC",
            "resource_name": name,
            "pattern_type": "LITERAL",
            "principal": principal,
            "host": "*",
            "operation": "READ",
            "permission_type": permission,
        }
    )


def reads(authorizer: Authorizer, topic: str, principal: str = "User:alice") -> bool:
    return authorizer.authorize(
        principal, "127.0.0.1", AclOperation.READ, ResourceType.TOPIC, topic
    ).allowed


@pytest.fixture
def settings(kafka_cluster3, kafka_topic_name) -> KafkaStoreSettings:
    return KafkaStoreSettings(
        bootstrap=kafka_cluster3.bootstrap, topic=f"acls-{kafka_topic_name}", change_timeout=20
    )


@pytest_asyncio.fixture
async def fleet(settings):
    """`await fleet()` -> a started KafkaAclBackend on the shared topic; all stopped at the end."""
    started: list[KafkaAclBackend] = []

    async def start(s: KafkaStoreSettings | None = None, **authorizer) -> KafkaAclBackend:
        backend = KafkaAclBackend(s or settings, Authorizer(**authorizer))
        await backend.start()
        started.append(backend)
        return backend

    yield start
    for backend in started:
        await backend.stop()


async def eventually(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def in_step(*backends: KafkaAclBackend) -> bool:
    """Every instance has applied the same offset and holds the same policy (staleness, which
    the load on the machine can make differ, is not compared)."""
    seen = {(b.status().applied_offset, b.status().fingerprint) for b in backends}
    return len(seen) == 1


def raw_records(settings: KafkaStoreSettings) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of the topic as a plain consumer sees it (offset, key, value)."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": "raw",
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(settings.topic, 0, OFFSET_BEGINNING)])
    out = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "no end of partition in 10 s"
            if msg.error():
                break
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


async def test_the_topic_is_created_compacted_with_one_partition_on_three_replicas(
    fleet, settings, kafka_cluster3
):
    await fleet()
    admin = kafka_cluster3.admin()
    md = admin.list_topics(settings.topic, timeout=10).topics[settings.topic]
    assert len(md.partitions) == 1
    assert len(md.partitions[0].replicas) == 3
    from confluent_kafka.admin import ConfigResource
    from confluent_kafka.admin import ResourceType as CR

    resource = ConfigResource(CR.TOPIC, settings.topic)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["min.insync.replicas"].value == "2"


async def test_a_change_through_one_instance_is_enforced_by_the_other(fleet):
    a, b = await fleet(), await fleet()
    assert not reads(b.authorizer, "orders")
    await a.change([acl("orders")], [])
    assert reads(a.authorizer, "orders")  # read-your-writes: in force when change returns
    await eventually(lambda: reads(b.authorizer, "orders"))
    await b.change([], [acl("orders")])
    assert not reads(b.authorizer, "orders")
    await eventually(lambda: not reads(a.authorizer, "orders"))
    await eventually(lambda: in_step(a, b))
    status = a.status()
    assert (status.backend, status.loaded, status.error) == ("kafka", True, None)
    assert status.fingerprint == acl_fingerprint([])


async def test_concurrent_writes_through_both_end_in_the_same_order_and_fingerprint(
    fleet, settings
):
    a, b = await fleet(), await fleet()

    async def writer(backend: KafkaAclBackend, who: str) -> None:
        for i in range(15):
            await backend.change(
                [acl(f"t{i}", f"User:{who}")], [acl(f"t{i - 2}", f"User:{who}")] if i >= 2 else []
            )

    await asyncio.gather(writer(a, "a"), writer(b, "b"), writer(a, "c"), writer(b, "d"))
    await eventually(lambda: a.status().applied_offset == b.status().applied_offset)
    sa, sb = a.status(), b.status()
    assert sa.fingerprint == sb.fingerprint
    expected = [acl(f"t{i}", f"User:{w}") for w in "abcd" for i in (13, 14)]
    assert sa.fingerprint == acl_fingerprint(expected)
    assert set(a.authorizer.acls()) == set(b.authorizer.acls()) == set(expected)
    # and a third instance replaying the log from scratch agrees
    c = await fleet()
    assert c.status().fingerprint == sa.fingerprint
    assert set(read_acl_topic(settings)) == set(expected)


async def test_the_same_binding_created_twice_is_removed_by_one_delete(fleet, settings):
    """Two instances creating one binding at once may write two UUIDs: removing the binding
    tombstones every UUID that holds it."""
    a, b = await fleet(), await fleet()
    dup = acl("dup")
    # both write it before either has seen the other's record
    await asyncio.gather(a.change([dup], []), b.change([dup], []))
    await eventually(lambda: in_step(a, b))
    holders = a.state.holders([dup])[dup]
    assert 1 <= len(holders) <= 2
    await a.change([], [dup])
    assert not reads(a.authorizer, "dup")
    await eventually(lambda: in_step(a, b))
    assert not reads(b.authorizer, "dup")
    assert read_acl_topic(settings) == []


async def test_a_replay_warns_of_cidr_hosts_without_the_option(fleet, caplog):
    """A host with `/` stored while --acl-host-cidr is off (a literal, as in Kafka 4.3.1): the
    replay logs one WARNING with their number and the flag; with the option, none."""
    import logging

    net = AclBinding.from_dict({**acl("orders").to_dict(), "host": "10.0.0.0/8"})
    writer = await fleet()
    await writer.change([net, acl("payments")], [])
    caplog.set_level(logging.WARNING, logger="aclgate.aclstore")
    caplog.clear()
    await fleet()
    cidr = [r.getMessage() for r in caplog.records if "have a host with '/'" in r.getMessage()]
    assert len(cidr) == 1 and "1 ACL(s)" in cidr[0] and "--acl-host-cidr" in cidr[0]
    caplog.clear()
    await fleet(cidr_hosts=True)
    assert not [r for r in caplog.records if "have a host with '/'" in r.getMessage()]


async def test_nothing_is_authorized_but_super_users_until_the_replay_ends(fleet, settings):
    writer = await fleet()
    await writer.change([acl("early")], [])
    late = KafkaAclBackend(settings, Authorizer(super_users=["User:admin"]))
    with pytest.raises(AuthorizerNotReadyError):
        reads(late.authorizer, "early")
    assert reads(late.authorizer, "anything", "User:admin")
    assert not late.status().loaded
    await late.start()
    try:
        assert reads(late.authorizer, "early")
        assert late.status().loaded
    finally:
        await late.stop()


async def test_a_restarted_instance_rebuilds_the_same_policy_after_compaction(
    fleet, settings, kafka_cluster3
):
    # a topic that compacts at once: tiny segments, no lag, tombstones dropped quickly
    admin = kafka_cluster3.admin()
    config = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.001",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "100",
        "max.compaction.lag.ms": "200",
    }
    admin.create_topics([NewTopic(settings.topic, 1, 3, config=config)])[settings.topic].result(20)
    a = await fleet()
    for i in range(30):
        await a.change([acl(f"c{i}")], [acl(f"c{i - 1}")] if i % 3 else [])
    before = a.status()
    written = len(raw_records(settings))

    def compacted() -> bool:
        # every change rolls the segment (segment.ms): the cleaner works behind them
        return len(raw_records(settings)) < written

    deadline = time.monotonic() + 60
    while not compacted():
        assert time.monotonic() < deadline, "the ACL topic was not compacted in 60 s"
        await a.change([acl("roll")], [])
        await a.change([], [acl("roll")])
        written += 2
        await asyncio.sleep(1)
    await eventually(lambda: not reads(a.authorizer, "roll"))
    restarted = await fleet()
    assert restarted.status().fingerprint == a.status().fingerprint == before.fingerprint
    assert set(restarted.authorizer.acls()) == set(a.authorizer.acls())


def _produce(settings: KafkaStoreSettings, key: bytes, value: bytes | None, headers=None) -> int:
    producer = Producer({"bootstrap.servers": settings.bootstrap, "acks": "all"})
    offsets: list[int] = []
    producer.produce(
        settings.topic,
        key=key,
        value=value,
        headers=headers,
        partition=0,
        on_delivery=lambda e, m: offsets.append(m.offset()),
    )
    assert producer.flush(20) == 0
    return offsets[0]


async def test_a_corrupt_record_stops_the_replay_and_marks_the_instance_degraded(fleet, settings):
    a = await fleet()
    await a.change([acl("kept")], [])
    before = a.status()
    # a record a newer (or broken) writer left: version 2
    bad_id = uuid.uuid4()
    _, records = encode_change([(bad_id, acl("x"))], [])
    key, value, headers = records[0]
    assert value is not None
    bad = _produce(settings, key, value.replace(b'"v":1', b'"v":2'), headers)
    # a good record after it, which must not be applied either (never skip: it could be a DENY)
    _, after = encode_change([(uuid.uuid4(), acl("after"))], [])
    _produce(settings, *after[0])
    await eventually(lambda: a.status().error is not None)
    status = a.status()
    assert f"offset {bad}" in status.error and "degraded" in status.error
    assert status.applied_offset == bad
    assert status.fingerprint == before.fingerprint  # the last good snapshot stays in force
    assert reads(a.authorizer, "kept") and not reads(a.authorizer, "after")
    assert a.undecodable_records == 1
    with pytest.raises(AclStoreError, match="degraded"):
        await a.change([acl("refused")], [])
    # a new instance does not load a policy it cannot read to its end
    with pytest.raises(AclStoreError, match=f"offset {bad}"):
        await fleet()
    with pytest.raises(AclStoreError, match=f"offset {bad}"):
        read_acl_topic(settings)
    # the operator's way past it, once checked: skip that offset
    skipping = await fleet(
        KafkaStoreSettings(settings.bootstrap, settings.topic, skip_offsets=frozenset({bad}))
    )
    assert reads(skipping.authorizer, "kept") and reads(skipping.authorizer, "after")
    assert skipping.status().error is None


async def test_an_unreachable_cluster_fails_the_start_with_a_clear_error():
    settings = KafkaStoreSettings(bootstrap="127.0.0.1:1", topic="x", connect_timeout=3)
    backend = KafkaAclBackend(settings, Authorizer())
    with pytest.raises(AclStoreError, match=r"cannot reach 127\.0\.0\.1:1"):
        await asyncio.wait_for(backend.start(), 20)
