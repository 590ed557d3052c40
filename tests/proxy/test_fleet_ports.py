"""Two aclgate instances in front of one 3-node Apache Kafka hand out the same port for the same
broker (docs/operations.md, `--broker-ports`): a fleet behind one DNS name or load balancer
works whichever instance a client bootstrapped from. The instances listen on two loopback
addresses (127.0.0.1 and 127.0.0.2) with the same port range, as two hosts of a fleet would.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from tests.fixtures.ports import free_port_block
from tests.fixtures.rawclient import RawClient, module, request_entity

pytestmark = pytest.mark.kafka

LIST_OFFSETS = 2
NOT_LEADER_OR_FOLLOWER = 6


def _instance(proxy_process, upstream: str, host: str, lo: int):
    return proxy_process(
        *("--upstream", upstream, "--listen", f"{host}:0"),
        *("--broker-ports", f"{lo}-{lo + 99}", "--allow-everyone-if-no-acl-found"),
    )


def _cluster_view(bootstrap: str, topic: str) -> tuple[dict[int, tuple[str, int]], dict[int, int]]:
    """({broker id: (host, port)}, {partition: leader id}) as a client sees them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic, timeout=20)
    brokers = {b.id: (b.host, b.port) for b in md.brokers.values()}
    leaders = {p.id: p.leader for p in md.topics[topic].partitions.values()}
    return brokers, leaders


def _latest_offset_error(address: str, topic: str, partition: int) -> int:
    """ListOffsets v7 for one partition at `address`: a broker that does not lead it says 6."""
    m = module(LIST_OFFSETS, 7)
    body = request_entity(
        LIST_OFFSETS,
        7,
        replica_id=-1,
        isolation_level=0,
        topics=(
            m.ListOffsetsTopic(
                name=topic,
                partitions=(
                    m.ListOffsetsPartition(
                        partition_index=partition, current_leader_epoch=-1, timestamp=-1
                    ),
                ),
            ),
        ),
    )
    with RawClient(address) as raw:
        answer = raw.request(body)
    return int(answer.topics[0].partitions[0].error_code)


def test_two_instances_hand_out_the_same_port_for_each_broker(
    kafka_cluster3, kafka_topic_name, proxy_process
):
    topic = kafka_topic_name
    kafka_cluster3.create_topic(topic, partitions=3, replication_factor=1)
    upstream = kafka_cluster3.listener("PLAINTEXT").bootstrap
    lo = free_port_block(100)
    a = _instance(proxy_process, upstream, "127.0.0.1", lo)
    b = _instance(proxy_process, upstream, "127.0.0.2", lo)
    a_bootstrap, b_bootstrap = a.bootstrap, f"127.0.0.2:{b.bootstrap_port}"

    brokers_a, leaders = _cluster_view(a_bootstrap, topic)
    brokers_b, leaders_b = _cluster_view(b_bootstrap, topic)
    assert sorted(brokers_a) == [1, 2, 3]
    # the documented rule: port = FIRST + node id, on every instance
    assert {n: port for n, (_, port) in brokers_a.items()} == {n: lo + n for n in brokers_a}
    assert {n: port for n, (_, port) in brokers_b.items()} == {
        n: port for n, (_, port) in brokers_a.items()
    }
    assert {host for host, _ in brokers_a.values()} == {"127.0.0.1"}
    assert {host for host, _ in brokers_b.values()} == {"127.0.0.2"}
    assert leaders == leaders_b
    assert len(set(leaders.values())) > 1, leaders  # the partitions are led by several brokers

    # the port A hands out for broker N reaches broker N on B as well: only the leader
    # answers ListOffsets for a partition, every other broker says NOT_LEADER_OR_FOLLOWER
    for partition, leader in leaders.items():
        for node, (_, port) in brokers_a.items():
            error = _latest_offset_error(f"127.0.0.2:{port}", topic, partition)
            assert error == (0 if node == leader else NOT_LEADER_OR_FOLLOWER), (partition, node)

    # and clients use them: written through A, read through B
    producer = Producer({"bootstrap.servers": a_bootstrap})
    for partition in leaders:
        producer.produce(topic, f"via-a-{partition}".encode(), partition=partition)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": b_bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic])
        seen: set[bytes] = set()
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen.add(msg.value())
            if len(seen) == len(leaders):
                break
        assert seen == {f"via-a-{p}".encode() for p in leaders}
    finally:
        consumer.close()
