"""Client scenarios shared by the tansu and Apache Kafka transparency tests.

Each scenario drives one real client library through a bootstrap address (the proxy) and
asserts what a user would see: topics created, every record produced and consumed back in a
group with committed offsets, topics listed, the group described, and every broker address
the client was given pointing at the proxy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

N = 1000
# tansu holds the first JoinGroup for about session.timeout.ms / 2; Kafka rejects < 6000.
SESSION_TIMEOUT_MS = 6000


def assert_addresses_are_proxy(
    addresses: Iterable[tuple[str, int]], proxy_host: str, proxy_ports: set[int]
):
    addresses = list(addresses)
    assert addresses, "the client saw no brokers"
    for host, port in addresses:
        assert (host, port) in {(proxy_host, p) for p in proxy_ports}, (
            f"client was given {host}:{port}, not a proxy address {proxy_host}:{sorted(proxy_ports)}"
        )


def expected_values(prefix: str, n: int = N) -> list[str]:
    return sorted(f"{prefix}-{i}" for i in range(n))


# ------------------------------------------------------------------------ confluent-kafka


def confluent_roundtrip(
    bootstrap: str, topic: str, group: str, proxy_ports: set[int], proxy_host="127.0.0.1"
):
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(N):
        producer.produce(topic, key=str(i).encode(), value=f"cf-{i}".encode())
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
        }
    )
    consumer.subscribe([topic])
    values: list[str] = []
    deadline = time.monotonic() + 60
    while len(values) < N and time.monotonic() < deadline:
        for msg in consumer.consume(500, 1.0):
            assert msg.error() is None, msg.error()
            values.append(msg.value().decode())
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    consumer.close()
    assert sorted(values) == expected_values("cf")
    assert sum(tp.offset for tp in committed) == N

    metadata = admin.list_topics(timeout=10)
    assert topic in metadata.topics
    assert_addresses_are_proxy(
        ((b.host, b.port) for b in metadata.brokers.values()), proxy_host, proxy_ports
    )
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.group_id == group
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[
        group
    ].result(10)
    assert sum(tp.offset for tp in offsets.topic_partitions if tp.topic == topic) == N
    cluster = admin.describe_cluster().result(10)
    assert_addresses_are_proxy(((n.host, n.port) for n in cluster.nodes), proxy_host, proxy_ports)


def confluent_idempotent_and_transactions(
    bootstrap: str, topic: str, txn_id: str, *, hides_aborted: bool = True
):
    """`hides_aborted=False` for tansu, whose read_committed Fetch returns aborted records
    (also without aclgate)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)

    idempotent = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(100):
        idempotent.produce(topic, value=f"idem-{i}".encode())
    assert idempotent.flush(30) == 0

    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(10):
        txn.produce(topic, value=f"committed-{i}".encode())
    txn.commit_transaction(30)
    txn.begin_transaction()
    for i in range(10):
        txn.produce(topic, value=f"aborted-{i}".encode())
    # Deliver before aborting: librdkafka may send EndTxn before the coordinator has seen the
    # transaction's AddPartitionsToTxn and fail with a fatal INVALID_TXN_STATE
    # (confluentinc/librdkafka#4849, also without a proxy). Delivered-then-aborted records
    # also make the read_committed check below stronger: they are in the log and must be hidden.
    assert txn.flush(30) == 0
    txn.abort_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, value=b"committed-last")
    txn.commit_transaction(30)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{txn_id}-reader",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
        }
    )
    consumer.subscribe([topic])
    values: list[str] = []
    deadline = time.monotonic() + 60
    while "committed-last" not in values and time.monotonic() < deadline:
        for msg in consumer.consume(200, 1.0):
            if msg.error() is None:
                values.append(msg.value().decode())
    consumer.close()
    assert sorted(v for v in values if v.startswith("idem")) == expected_values("idem", 100)
    assert sorted(v for v in values if v.startswith("committed")) == sorted(
        [f"committed-{i}" for i in range(10)] + ["committed-last"]
    )
    aborted = [v for v in values if v.startswith("aborted")]
    assert not aborted if hides_aborted else len(aborted) <= 10


# --------------------------------------------------------------------------- kafka-python


def kafka_python_roundtrip(
    bootstrap: str, topic: str, group: str, proxy_ports: set[int], proxy_host="127.0.0.1"
):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    admin.create_topics([NewTopic(topic, 3, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(N):
        producer.send(topic, key=str(i).encode(), value=f"kp-{i}".encode())
    producer.flush(30)
    producer.close()

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=1000,
    )
    values: list[str] = []
    deadline = time.monotonic() + 60
    while len(values) < N and time.monotonic() < deadline:
        for records in consumer.poll(1000).values():
            values.extend(r.value.decode() for r in records)
    consumer.commit()
    committed = [consumer.committed(TopicPartition(topic, p)) or 0 for p in range(3)]
    consumer.close()
    assert sorted(values) == expected_values("kp")
    assert sum(committed) == N

    assert topic in admin.list_topics()
    cluster = admin.describe_cluster()
    assert_addresses_are_proxy(
        ((b["host"], b["port"]) for b in cluster["brokers"]), proxy_host, proxy_ports
    )
    described = admin.describe_groups([group])
    assert described[group]["group_id"] == group
    offsets = admin.list_group_offsets(group)[group]
    assert sum(o.offset for tp, o in offsets.items() if tp.topic == topic) == N
    admin.close()


# ------------------------------------------------------------------------------- aiokafka


async def aiokafka_roundtrip(
    bootstrap: str, topic: str, group: str, proxy_ports: set[int], proxy_host="127.0.0.1"
):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 3, 1)])
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        await producer.start()
        try:
            batch = [
                producer.send(topic, key=str(i).encode(), value=f"ak-{i}".encode())
                for i in range(N)
            ]
            await asyncio.gather(*[await b for b in batch])
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=1000,
        )
        await consumer.start()
        values: list[str] = []
        try:
            deadline = time.monotonic() + 60
            while len(values) < N and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    values.extend(r.value.decode() for r in records)
            await consumer.commit()
            committed = [await consumer.committed(TopicPartition(topic, p)) or 0 for p in range(3)]
            brokers = [(b.host, b.port) for b in consumer._client.cluster.brokers()]
        finally:
            await consumer.stop()
        assert sorted(values) == expected_values("ak")
        assert sum(committed) == N
        assert_addresses_are_proxy(brokers, proxy_host, proxy_ports)

        assert topic in await admin.list_topics()
        described = await admin.describe_consumer_groups([group])
        # aiokafka hands back the raw DescribeGroups response: (error_code, group_id, state, ...)
        (error_code, group_id, state, *_rest) = described[0].groups[0]
        assert (error_code, group_id) == (0, group) and state in ("Empty", "Stable")
    finally:
        await admin.close()
