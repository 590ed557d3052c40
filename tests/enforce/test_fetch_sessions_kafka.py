"""KIP-227 fetch sessions kept through aclgate in front of Apache Kafka: a session opens and
goes on incrementally, a revoked ACL ends it on the next fetch (FETCH_SESSION_ID_NOT_FOUND),
the client's full fetch that follows is refused the partition, and no connection can use
another's session. Then real consumers (the Java consumer, kafka-python, confluent-kafka,
aiokafka): a revoked ACL takes effect on the next fetch (docs/design.md, "Fetch sessions")."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta, i64

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import AclBinding
from aclgate.protocol.enforce.fetchsessions import FetchSessions
from aclgate.protocol.versions import request_class
from tests.fixtures.rawclient import RawClient, request_entity
from tests.fixtures.scripted_broker import _defaults
from tests.kafka.cluster import TOOL_JVM_OPTS, TOOLS_LOG4J, java_command
from tests.kafka.tools import TOOLS

pytestmark = pytest.mark.kafka


def allow(principal: str, resource_type: str, name: str, operation: str = "READ") -> AclBinding:
    return AclBinding.from_dict(
        {
            "resource_type": resource_type,
            "resource_name": name,
            "pattern_type": "LITERAL",
            "principal": principal,
            "host": "*",
            "operation": operation,
            "permission_type": "ALLOW",
        }
    )


class Acls:
    """The proxy's ACL file, rewritten and reloaded at once."""

    def __init__(self, path, proxy=None):
        self.path, self.proxy = path, proxy

    def set(self, topics=(), groups=(), described=()) -> None:
        """READ on `topics` and `groups`, DESCRIBE only on `described`."""
        acls = [allow("User:ANONYMOUS", "TOPIC", t) for t in topics]
        acls += [allow("User:ANONYMOUS", "TOPIC", t, "DESCRIBE") for t in described]
        acls += [allow("User:ANONYMOUS", "GROUP", g) for g in groups]
        self.path.write_text(dump_acl_file(acls))
        if self.proxy is not None:
            self.proxy.run(self.proxy.server.watcher.reload_once)


@pytest.fixture
def gate(kafka_single, kafka_topic_name, proxy_factory, tmp_path):
    """(proxy, acls, topic): aclgate in front of Kafka, its principal allowed to read `topic`."""
    topic = f"{kafka_topic_name}-s"
    kafka_single.create_topic(topic)
    acls = Acls(tmp_path / "acls.json")
    acls.set(topics=[topic])
    proxy = proxy_factory(
        kafka_single.bootstrap, acl_file=acls.path, allow_everyone_if_no_acl_found=False
    )
    acls.proxy = proxy
    return proxy, acls, topic


def topic_id(raw: RawClient, topic: str) -> uuid.UUID:
    m = sys.modules[request_class(3, 12).__module__]
    body = raw.request(
        request_entity(
            3,
            12,
            topics=(m.MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return body.topics[0].topic_id


def fetch(version: int, key, session_id: int, epoch: int, partitions=(0,)):
    cls = request_class(1, version)
    m = sys.modules[cls.__module__]
    field = {"topic_id": key} if version >= 13 else {"topic": key}
    topics = (
        ()
        if not partitions
        else (
            _defaults(
                m.FetchTopic,
                **field,
                partitions=tuple(
                    _defaults(
                        m.FetchPartition,
                        partition=i32(p),
                        fetch_offset=i64(0),
                        partition_max_bytes=i32(1 << 20),
                        current_leader_epoch=i32(-1),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                    )
                    for p in partitions
                ),
            ),
        )
    )
    return dataclasses.replace(
        _defaults(cls),
        max_wait=i32Timedelta.parse(timedelta(milliseconds=10)),
        min_bytes=i32(0),
        max_bytes=i32(1 << 20),
        session_id=i32(session_id),
        session_epoch=i32(epoch),
        topics=topics,
        **(
            {"replica_id": i32(-1)}
            if version < 15
            else {"replica_state": _defaults(m.ReplicaState, replica_id=i32(-1))}
        ),
    )


def partition_errors(body) -> list[int]:
    return [p.error_code for t in body.responses for p in t.partitions]


def first_fetch(raw: RawClient, version: int, key) -> object:
    """The first full fetch, retried while the new topic's leader is not serving yet
    (NOT_LEADER_OR_FOLLOWER right after creation on a loaded machine; a client retries)."""
    deadline = time.monotonic() + 15
    while True:
        opened = raw.request(fetch(version, key, 0, 0))
        retriable = partition_errors(opened) == [ErrorCode.not_leader_or_follower]
        if not retriable or time.monotonic() > deadline:
            return opened
        time.sleep(0.2)


@pytest.mark.parametrize("version", [12, 17])
def test_sessions_are_kept_and_a_revocation_ends_them(gate, version):
    proxy, acls, topic = gate
    with RawClient(proxy.bootstrap) as raw, RawClient(proxy.bootstrap) as other:
        key = topic if version < 13 else topic_id(raw, topic)
        opened = first_fetch(raw, version, key)
        assert opened.error_code == ErrorCode.none and partition_errors(opened) == [0]
        sid = opened.session_id
        assert sid != 0, "the full fetch opened a session at the broker"
        again = raw.request(fetch(version, key, sid, 1, partitions=()))
        assert (again.error_code, again.session_id) == (ErrorCode.none, sid)
        # another connection naming this session gets no session, and leaves it alone
        stranger = other.request(fetch(version, key, sid, 2, partitions=()))
        assert stranger.session_id == 0 and stranger.responses == ()
        assert raw.request(fetch(version, key, sid, 2, partitions=())).session_id == sid

        acls.set(topics=[])  # revoked: the next fetch in the session ends it
        ended = raw.request(fetch(version, key, sid, 3, partitions=()))
        assert (ended.error_code, ended.session_id) == (ErrorCode.fetch_session_id_not_found, 0)
        assert ended.responses == ()
        refused = raw.request(fetch(version, key, 0, 0))
        assert refused.session_id == 0
        assert partition_errors(refused) == [ErrorCode.topic_authorization_failed]
        # the broker closed the old session: naming it again is not this connection's either
        assert raw.request(fetch(version, key, sid, 1, partitions=())).session_id == 0

        acls.set(topics=[topic])  # allowed again: a new session opens
        reopened = raw.request(fetch(version, key, 0, 0))
        assert reopened.session_id not in (0, sid) and partition_errors(reopened) == [0]


def test_adding_a_denied_partition_ends_the_session(gate, kafka_single):
    proxy, _acls, topic = gate
    secret = topic + "-secret"
    kafka_single.create_topic(secret)
    with RawClient(proxy.bootstrap) as raw:
        sid = raw.request(fetch(12, topic, 0, 0)).session_id
        assert sid != 0
        added = raw.request(fetch(12, secret, sid, 1))
        assert (added.error_code, added.session_id) == (ErrorCode.fetch_session_id_not_found, 0)
        assert added.responses == ()


# ------------------------------------------------------------------------- real consumers


def produce_direct(bootstrap: str, topic: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, value)
    assert producer.flush(20) == 0


def sessions_held(proxy) -> int:
    """Fetch sessions the proxy tracks on its client connections now."""

    def count() -> int:
        sessions = [c.session.state(FetchSessions) for c in proxy.server.connections if c.session]
        return sum(len(s.held) for s in sessions if s is not None)

    return proxy.run(count)


def revoke_then_produce(acls, bootstrap: str, topic: str) -> None:
    """READ revoked; the topic stays visible (DESCRIBE), so the consumer keeps it assigned
    and fetching is what must stop."""
    acls.set(topics=[], groups=["*"], described=[topic])
    # a fetch authorized just before may still wait in the broker's purgatory
    # (fetch.max.wait.ms, 500 ms by default), on Kafka itself too: let it finish
    time.sleep(1.5)
    produce_direct(bootstrap, topic, b"after")


@pytest.fixture
def consuming(gate, kafka_single):
    """The gate with the group allowed and one record waiting."""
    proxy, acls, topic = gate
    acls.set(topics=[topic], groups=["*"])
    produce_direct(kafka_single.bootstrap, topic, b"before")
    return proxy, acls, topic, kafka_single.bootstrap


def test_java_consumer_stops_on_the_next_fetch(consuming):
    proxy, acls, topic, direct = consuming
    args = ["--bootstrap-server", proxy.bootstrap, "--topic", topic, "--from-beginning"]
    args += ["--group", f"g-{uuid.uuid4().hex[:6]}", "--timeout-ms", "20000"]
    args += ["--consumer-property", "fetch.max.wait.ms=200"]
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_OPTS", "JAVA_TOOL_OPTIONS")}
    cmd = java_command(
        TOOLS["kafka-console-consumer"],
        *args,
        jvm_opts=(*TOOL_JVM_OPTS, f"-Dlog4j2.configurationFile={TOOLS_LOG4J}"),
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")))
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "before\n" not in lines:
            time.sleep(0.1)
        assert "before\n" in lines, proc.stderr.read() if proc.poll() is not None else lines
        assert sessions_held(proxy) >= 1, "the Java consumer fetches in a session"
        revoke_then_produce(acls, direct, topic)
        _out, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(5)
    assert "after\n" not in lines
    assert "TopicAuthorizationException" in err


def test_kafka_python_consumer_stops_on_the_next_fetch(consuming):
    from kafka import KafkaConsumer
    from kafka.errors import TopicAuthorizationFailedError

    proxy, acls, topic, direct = consuming
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=proxy.bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=200,
    )
    try:
        got = []
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline and b"before" not in got:
            got += [r.value for recs in consumer.poll(500).values() for r in recs]
        assert got == [b"before"]
        assert sessions_held(proxy) >= 1, "kafka-python fetches in a session"
        revoke_then_produce(acls, direct, topic)
        raised = 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not raised:
            try:
                got += [r.value for recs in consumer.poll(500).values() for r in recs]
            except TopicAuthorizationFailedError:
                raised += 1
        assert b"after" not in got and raised
    finally:
        consumer.close()


def test_confluent_consumer_stops_on_the_next_fetch(consuming):
    proxy, acls, topic, direct = consuming
    consumer = Consumer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 200,
        }
    )
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 45
        first = None
        while time.monotonic() < deadline and first is None:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                first = msg.value()
        assert first == b"before"
        revoke_then_produce(acls, direct, topic)
        seen, errors = [], []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not errors:
            msg = consumer.poll(0.5)
            if msg is not None:
                (errors if msg.error() else seen).append(
                    msg.error().code() if msg.error() else msg.value()
                )
        assert b"after" not in seen
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in errors
    finally:
        consumer.close()


def test_aiokafka_consumer_stops_on_the_next_fetch(consuming):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import TopicAuthorizationFailedError

    proxy, acls, topic, direct = consuming

    async def run() -> tuple[list, int]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=proxy.bootstrap,
            group_id=f"g-{uuid.uuid4().hex[:6]}",
            auto_offset_reset="earliest",
            fetch_max_wait_ms=200,
        )
        await consumer.start()
        try:
            got: list = []
            deadline = time.monotonic() + 45
            while time.monotonic() < deadline and b"before" not in got:
                batches = await consumer.getmany(timeout_ms=500)
                got += [r.value for recs in batches.values() for r in recs]
            assert got == [b"before"]
            await asyncio.to_thread(revoke_then_produce, acls, direct, topic)
            raised = 0
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not raised:
                try:
                    batches = await consumer.getmany(timeout_ms=500)
                    got += [r.value for recs in batches.values() for r in recs]
                except TopicAuthorizationFailedError:
                    raised += 1
            return got, raised
        finally:
            await consumer.stop()

    got, raised = asyncio.run(run())
    assert b"after" not in got and raised
