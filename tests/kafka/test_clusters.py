"""Single node and 3-node KRaft clusters start and serve real clients."""

from __future__ import annotations

import random
import socket
import time

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from tests.fixtures.kafka import require_kafka
from tests.kafka.cluster import KafkaCluster, KafkaStartError, api_versions_ok, metadata_brokers

pytestmark = pytest.mark.kafka

N = 20


def confluent_round_trip(cfg: dict, topic: str, group: str) -> list[bytes]:
    p = Producer({**cfg, "acks": "all", "linger.ms": 5})
    for i in range(N):
        p.produce(topic, key=str(i).encode(), value=f"ck-{i}".encode())
    assert p.flush(30) == 0
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
    deadline = time.monotonic() + 60
    try:
        while len(got) < N and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def kafka_python_round_trip(cfg: dict, topic: str, group: str) -> list[bytes]:
    p = KafkaProducer(acks="all", **cfg)
    for i in range(N):
        p.send(topic, key=str(i).encode(), value=f"kp-{i}".encode())
    p.flush(30)
    p.close()
    c = KafkaConsumer(
        topic,
        group_id=group,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        consumer_timeout_ms=30000,
        **cfg,
    )
    got = []
    try:
        for m in c:
            got.append(m.value)
            if len(got) == N:
                break
        c.commit()
    finally:
        c.close()
    return got


def test_single_node_round_trip_confluent(kafka_single, kafka_topic_name):
    kafka_single.create_topic(kafka_topic_name, partitions=2)
    cfg = kafka_single.listener("PLAINTEXT").confluent_config()
    got = confluent_round_trip(cfg, kafka_topic_name, f"g-{kafka_topic_name}")
    assert sorted(got) == sorted(f"ck-{i}".encode() for i in range(N))


def test_single_node_round_trip_kafka_python_with_auto_create(kafka_single, kafka_topic_name):
    cfg = kafka_single.listener("PLAINTEXT").kafka_python_config()
    got = kafka_python_round_trip(cfg, kafka_topic_name, f"g-{kafka_topic_name}")
    assert sorted(got) == sorted(f"kp-{i}".encode() for i in range(N))


def test_single_node_identity(kafka_single):
    assert kafka_single.node_ids == [1]
    host, port = kafka_single.listener("PLAINTEXT").addresses[0][1:]
    assert api_versions_ok(host, port)
    assert metadata_brokers(host, port) == {1: (host, port)}


def test_three_node_metadata_lists_brokers_1_2_3(kafka_cluster3):
    lst = kafka_cluster3.listener("PLAINTEXT")
    want = {n: (h, p) for n, h, p in lst.addresses}
    assert set(want) == {1, 2, 3}
    # every node gives the same answer, with the addresses of the listener asked
    for node_id in (1, 2, 3):
        assert metadata_brokers("127.0.0.1", lst.port(node_id)) == want
    md = kafka_cluster3.admin().list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    admin = KafkaAdminClient(**lst.kafka_python_config())
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert sorted(b["broker_id"] for b in cluster["brokers"]) == [1, 2, 3]
    assert cluster["controller_id"] in (1, 2, 3)


def test_three_node_round_trip_both_clients(kafka_cluster3, kafka_topic_name):
    kafka_cluster3.create_topic(kafka_topic_name, partitions=3, replication_factor=3)
    md = kafka_cluster3.admin().list_topics(kafka_topic_name, timeout=10)
    parts = md.topics[kafka_topic_name].partitions.values()
    assert {p.leader for p in parts} == {1, 2, 3}  # leaders spread over all brokers
    assert all(sorted(p.replicas) == [1, 2, 3] for p in parts)

    lst = kafka_cluster3.listener("PLAINTEXT")
    got = confluent_round_trip(lst.confluent_config(), kafka_topic_name, "g1-" + kafka_topic_name)
    assert sorted(got) == sorted(f"ck-{i}".encode() for i in range(N))
    got = kafka_python_round_trip(
        lst.kafka_python_config(), kafka_topic_name, "g2-" + kafka_topic_name
    )
    assert len(got) == N  # the first N of 2N records on the topic, from the start


def _hold_internal_port(size: int = 10) -> tuple[int, socket.socket]:
    """A base port p for a one-node cluster, with p+1 (its INTERNAL listener) held by us.

    INTERNAL is the listener the start-up probe talks to, so the probe can never see the node
    ready: the node must exit on the bind failure (taking PLAINTEXT instead raced, INTERNAL
    could answer the probe before the PLAINTEXT acceptor failed). The block sits below the
    ephemeral range so a client connection made elsewhere in the suite cannot take one of the
    node's other ports first.
    """
    for _ in range(200):
        base = random.randrange(20000, 32000, size)
        held = socket.socket()
        try:
            held.bind(("127.0.0.1", base + 1))
            for p in (base, *range(base + 2, base + size)):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", p))
        except OSError:
            held.close()
            continue
        held.listen()
        return base, held
    raise RuntimeError("no free block of 10 ports in 20000-32000")


def test_start_failure_reports_the_node_log(tmp_path):
    require_kafka()
    base, taken = _hold_internal_port()
    with taken:
        port = taken.getsockname()[1]
        cluster = KafkaCluster(base_port=base, workdir=tmp_path)  # INTERNAL wants `port`
        with pytest.raises(KafkaStartError) as exc:
            cluster.start()
    msg = str(exc.value)
    assert "node 1 exited during start-up" in msg
    assert f"Socket server failed to bind to 127.0.0.1:{port}: Address already in use" in msg, msg
    assert not cluster.nodes[0].alive()
    assert (tmp_path / "node-1" / "server.log").is_file()  # kept for a look
