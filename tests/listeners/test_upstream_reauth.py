"""KIP-368 on the proxy's side of the upstream: Apache Kafka with connections.max.reauth.ms
closes a connection whose SASL session expired at its next request. The proxy renews its own
login on each client's upstream connection before that, so clients never notice."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.fixtures.kafka import _cluster
from tests.fixtures.rawclient import RawClient
from tests.listeners.util import metadata_request, sasl_login, unique

pytestmark = pytest.mark.kafka

LIFETIME_MS = 2000


@pytest.fixture(scope="module")
def kafka_reauth(tmp_path_factory):
    yield from _cluster(
        "kafka_reauth",
        tmp_path_factory,
        listeners=("SASL_PLAINTEXT",),
        mechanisms=("SCRAM-SHA-512",),
        broker_config={"connections.max.reauth.ms": LIFETIME_MS},
    )


@pytest.fixture
def reauth_proxy(kafka_reauth, proxy_factory, tmp_path):
    secret = tmp_path / "upstream-password"
    secret.write_text("admin-secret\n")
    return proxy_factory(
        kafka_reauth.listener("SASL_PLAINTEXT").bootstrap,
        upstream_security_protocol="SASL_PLAINTEXT",
        upstream_sasl_mechanism="SCRAM-SHA-512",
        upstream_sasl_username="admin",
        upstream_sasl_password_file=secret,
    )


def test_the_cluster_really_closes_an_expired_session(kafka_reauth):
    """Without a renewal the broker drops the connection: what the proxy must prevent."""
    with RawClient(kafka_reauth.listener("SASL_PLAINTEXT").bootstrap, timeout=10) as raw:
        answer = sasl_login(raw, "SCRAM-SHA-512", "admin", "admin-secret", version=1)
        assert answer.error_code == ErrorCode.none
        assert answer.session_lifetime.total_seconds() * 1000 == pytest.approx(LIFETIME_MS, 10)
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        raw.send(metadata_request())
        assert raw.recv_frame() is None


def test_one_client_connection_outlives_several_upstream_sessions(kafka_reauth, reauth_proxy):
    topic = unique("reauth")
    kafka_reauth.create_topic(topic)
    deadline = time.monotonic() + 3.5 * LIFETIME_MS / 1000
    answered = 0
    with RawClient(reauth_proxy.bootstrap, timeout=10) as raw:
        while time.monotonic() < deadline:
            # bursts of pipelined requests, so some arrive while a renewal holds them
            sent = [raw.send(metadata_request(topic)) for _ in range(10)]
            for cid in sent:
                frame = raw.recv_frame()
                assert frame is not None, f"closed after {answered} answers"
                assert int.from_bytes(frame[4:8], "big") == cid  # in order
                answered += 1
            time.sleep(0.1)
    renewed = reauth_proxy.metric("aclgate_upstream_reauthentications_total", {"result": "ok"})
    assert renewed >= 2  # (3 expected; a margin for a loaded machine) control conn. not counted
    assert (
        reauth_proxy.metric("aclgate_upstream_reauthentications_total", {"result": "failed"}) == 0
    )


def connections(proxy) -> float:
    return sum(
        proxy.metric("aclgate_connections_total", {"listener": listener})
        for listener in ("bootstrap", "broker")
    )


def test_producer_and_consumer_across_renewals(kafka_reauth, reauth_proxy):
    topic = unique("reauth-clients")
    kafka_reauth.create_topic(topic)
    cfg = {"bootstrap.servers": reauth_proxy.bootstrap}
    producer = Producer({**cfg, "linger.ms": 5, "enable.idempotence": True})
    producer.produce(topic, b"v0")
    assert producer.flush(30) == 0
    sent, connected = 1, connections(reauth_proxy)
    deadline = time.monotonic() + 3 * LIFETIME_MS / 1000
    while time.monotonic() < deadline:
        producer.produce(topic, f"v{sent}".encode())
        sent += 1
        producer.poll(0)
        time.sleep(0.02)
    assert producer.flush(30) == 0
    assert connections(reauth_proxy) == connected  # the producer never had to reconnect
    consumer = Consumer({**cfg, "group.id": f"{topic}-g", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < sent and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    consumer.close()
    assert values == [f"v{i}".encode() for i in range(sent)]
    assert reauth_proxy.metric("aclgate_upstream_reauthentications_total", {"result": "ok"}) >= 1
    assert reauth_proxy.metric("aclgate_errors_total", {"kind": "upstream_closed"}) == 0
