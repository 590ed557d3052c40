"""Zero-copy relay of Fetch answers' record bytes (proxy/listen/splice.py, issue 24 item 3):
real brokers, real clients, and the bytes the client gets compared with what the broker
serves directly."""

from __future__ import annotations

import datetime
import hashlib
import time
import uuid

import pytest

from aclgate.protocol.codec import decode_response
from tests.fixtures.rawclient import RawClient, module, request_entity

RECORD = 64 * 1024
RECORDS = 48  # 3 MiB: several answers over --splice-min-bytes

UPSTREAMS = ["tansu", pytest.param("kafka_single", marks=pytest.mark.kafka)]


@pytest.fixture(params=UPSTREAMS)
def upstream(request):
    return request.getfixturevalue(request.param)


def _topic_with_records(bootstrap: str) -> tuple[str, list[bytes]]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"splice-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    values = [hashlib.sha256(b"%d" % i).digest() * (RECORD // 32) for i in range(RECORDS)]
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "message.max.bytes": 2_000_000}
    )
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    return topic, values


def _consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 4 << 20,
            "max.partition.fetch.bytes": 4 << 20,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for msg in consumer.consume(100, 1.0):
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    consumer.close()
    return got


def test_a_consumer_reads_every_byte_spliced(upstream, proxy_factory):
    """librdkafka through aclgate with the default --splice-min-bytes: every record as
    produced, and the record bytes went through the kernel (the counter), not Python."""
    proxy = proxy_factory(upstream.bootstrap)
    topic, values = _topic_with_records(proxy.bootstrap)
    assert _consume(proxy.bootstrap, topic, RECORDS) == values
    assert proxy.metric("aclgate_spliced_bytes_total") >= RECORD * RECORDS // 2


def test_off_means_no_splice_and_the_same_bytes(tansu, proxy_factory):
    proxy = proxy_factory(tansu.bootstrap, splice_min_bytes=0)
    topic, values = _topic_with_records(proxy.bootstrap)
    assert _consume(proxy.bootstrap, topic, RECORDS) == values
    assert proxy.metric("aclgate_spliced_bytes_total") == 0


def _fetch(version: int, topic: str, topic_id: uuid.UUID | None) -> object:
    """A sessionless Fetch of the whole partition from offset 0."""
    m = module(1, version)
    key = {"topic_id": topic_id} if version >= 13 else {"topic": topic}
    fields = dict(
        max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, max_bytes=16 << 20, isolation_level=0,
        topics=(m.FetchTopic(**key, partitions=(m.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=16 << 20,
            **({"current_leader_epoch": -1, "log_start_offset": -1} if version >= 9 else {}),
            **({"last_fetched_epoch": -1} if version >= 12 else {}),
        ),)),),
    )  # fmt: skip
    if version < 15:
        fields["replica_id"] = -1
    if version >= 7:
        fields.update(session_id=0, session_epoch=-1, forgotten_topics_data=())
    if version >= 11:
        fields["rack_id"] = ""
    return request_entity(1, version, **fields)


def _topic_id(address: str, topic: str) -> uuid.UUID:
    m = module(3, 12)
    with RawClient(address) as client:
        answer = client.request(
            request_entity(
                3, 12, topics=(m.MetadataRequestTopic(topic_id=None, name=topic),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False,
            )
        )  # fmt: skip
    return answer.topics[0].topic_id


def _records(answer) -> bytes:
    [topic] = answer.responses
    [partition] = topic.partitions
    assert partition.error_code == 0
    return bytes(partition.records or b"")


@pytest.mark.parametrize("version", [12, 17])
def test_a_slow_reader_gets_the_answer_whole(upstream, proxy_factory, version):
    """A client that does not read for a while (a tiny receive buffer, so the kernel cannot
    take the answer for it): the relay waits for it to read, the answer arrives whole and
    in order (a Fetch answer walked for its KIP-951 tagged fields at v17, relayed untouched
    at v12), and another client is served meanwhile."""
    proxy = proxy_factory(upstream.bootstrap)
    topic, _ = _topic_with_records(proxy.bootstrap)
    topic_id = _topic_id(upstream.bootstrap, topic) if version >= 13 else None
    request = _fetch(version, topic, topic_id)
    with RawClient(upstream.bootstrap) as direct:
        expected = _records(direct.request(request))
    assert len(expected) > RECORD * RECORDS
    before = proxy.metric("aclgate_spliced_bytes_total")

    with RawClient(proxy.bootstrap, timeout=10, receive_buffer=4096) as client:
        client.send(request)
        time.sleep(1.0)  # the relay meets a full socket and waits for it to drain
        with RawClient(proxy.bootstrap) as other:  # served while the slow one stalls
            assert other.request(_fetch(version, topic, topic_id)) is not None
        frame = client.recv_frame()
    assert frame is not None
    assert _records(decode_response(frame, 1, version)) == expected
    # both answers spliced but for what came in with their first reads
    assert proxy.metric("aclgate_spliced_bytes_total") - before >= 2 * (len(expected) - (256 << 10))


def test_a_client_gone_mid_answer_closes_only_its_connection(tansu, proxy_factory):
    proxy = proxy_factory(tansu.bootstrap)
    topic, values = _topic_with_records(proxy.bootstrap)
    request = _fetch(12, topic, None)
    for _ in range(3):
        client = RawClient(proxy.bootstrap, receive_buffer=4096)
        client.send(request)
        time.sleep(0.3)
        client.close()  # mid-relay: the splice to it fails, its connection closes
    assert _consume(proxy.bootstrap, topic, RECORDS) == values
    deadline = time.monotonic() + 10
    while (
        time.monotonic() < deadline
        and proxy.metric("aclgate_connections_active", {"listener": "bootstrap"}) > 0
    ):
        time.sleep(0.1)
    assert proxy.metric("aclgate_connections_active", {"listener": "bootstrap"}) == 0
