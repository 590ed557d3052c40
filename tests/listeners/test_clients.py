"""Real clients through SSL and SASL listeners: each one produces and consumes in a group
under ACLs that allow only its own principal, and the audit names that principal.

confluent-kafka: SASL_SSL SCRAM-SHA-512, SASL_PLAINTEXT PLAIN, OAUTHBEARER (a JWT signed by a
test key, handed over by `oauth_cb`); its mTLS case is in test_tls.py.
kafka-python and aiokafka: SSL (mTLS), SASL PLAIN and SCRAM.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.listeners.conftest import Pki
from tests.listeners.util import (
    AUDIENCE,
    ISSUER,
    MAPPING_RULES,
    acl,
    password,
    read_audit,
    sign_jwt,
    unique,
    write_acls,
)

N = 20


@dataclass
class Listener:
    """How the proxy listens and how a client of it authenticates."""

    protocol: str  # SSL, SASL_PLAINTEXT, SASL_SSL
    mechanism: str | None = None  # SASL mechanism
    user: str = "alice"

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("SSL")

    def proxy_config(self, certs: Pki, users_file: Path, jwks_file: Path) -> dict:
        cfg: dict = {"listener_security_protocol": self.protocol}
        if self.tls:
            cfg.update(ssl_certfile=certs.server_cert, ssl_keyfile=certs.server_key)
        if self.protocol == "SSL":
            cfg.update(
                ssl_cafile=certs.ca,
                ssl_client_auth="required",
                ssl_principal_mapping_rules=MAPPING_RULES,
            )
        if self.mechanism == "OAUTHBEARER":
            cfg.update(
                sasl_mechanisms="OAUTHBEARER",
                sasl_oauthbearer_jwks_file=jwks_file,
                sasl_oauthbearer_expected_audience=[AUDIENCE],
                sasl_oauthbearer_expected_issuer=ISSUER,
            )
        elif self.mechanism:
            cfg.update(sasl_mechanisms=self.mechanism, users_file=users_file)
        return cfg

    # client configurations -----------------------------------------------------------

    def confluent(self, bootstrap: str, certs: Pki) -> dict:
        cfg = {"bootstrap.servers": bootstrap, "security.protocol": self.protocol}
        if self.tls:
            cfg["ssl.ca.location"] = str(certs.ca)
        if self.protocol == "SSL":
            cert, key = certs.client(self.user)
            cfg.update({"ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
        if self.mechanism == "OAUTHBEARER":
            user = self.user
            cfg.update(
                {
                    "sasl.mechanism": "OAUTHBEARER",
                    "oauth_cb": lambda _config: (sign_jwt(user), time.time() + 3600),
                }
            )
        elif self.mechanism:
            cfg.update(
                {
                    "sasl.mechanism": self.mechanism,
                    "sasl.username": self.user,
                    "sasl.password": password(self.user),
                }
            )
        return cfg

    def kafka_python(self, bootstrap: str, certs: Pki) -> dict:
        cfg = {"bootstrap_servers": bootstrap, "security_protocol": self.protocol}
        if self.tls:
            cfg["ssl_cafile"] = str(certs.ca)
        if self.protocol == "SSL":
            cert, key = certs.client(self.user)
            cfg.update(ssl_certfile=str(cert), ssl_keyfile=str(key))
        if self.mechanism:
            cfg.update(
                sasl_mechanism=self.mechanism,
                sasl_plain_username=self.user,
                sasl_plain_password=password(self.user),
            )
        return cfg

    def aiokafka(self, bootstrap: str, certs: Pki) -> dict:
        from aiokafka.helpers import create_ssl_context

        cfg = {"bootstrap_servers": bootstrap, "security_protocol": self.protocol}
        if self.tls:
            cert, key = certs.client(self.user) if self.protocol == "SSL" else (None, None)
            cfg["ssl_context"] = create_ssl_context(cafile=certs.ca, certfile=cert, keyfile=key)
        if self.mechanism:
            cfg.update(
                sasl_mechanism=self.mechanism,
                sasl_plain_username=self.user,
                sasl_plain_password=password(self.user),
            )
        return cfg


@pytest.fixture
def authorizing(tansu, proxy_factory, certs, users_file, jwks_file, tmp_path):
    """start(listener) -> (proxy, topic, group, audit file): only User:alice may use them."""

    def start(listener: Listener):
        topic, group = unique("t"), unique("g")
        admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
        for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            future.result(30)
        audit = tmp_path / "audit.jsonl"
        acls = write_acls(
            tmp_path / "acls.json",
            acl("User:alice", "ALL", topic),
            acl("User:alice", "ALL", group, rtype="GROUP"),
        )
        proxy = proxy_factory(
            tansu.bootstrap,
            **listener.proxy_config(certs, users_file, jwks_file),
            allow_everyone_if_no_acl_found=False,
            acl_file=acls,
            audit_file=audit,
        )
        return proxy, topic, group, audit

    return start


def assert_audited_as(proxy, audit: Path, topic: str, principal: str) -> None:
    events = [e for e in read_audit(proxy, audit) if e["resource_name"] == topic]
    assert events, "no audit event for the topic"
    assert {e["principal"] for e in events} == {principal}
    assert all(e["decision"] == "ALLOWED" for e in events), events


# ------------------------------------------------------------------------ confluent-kafka

CONFLUENT = [
    Listener("SASL_SSL", "SCRAM-SHA-512"),
    Listener("SASL_PLAINTEXT", "PLAIN"),
    Listener("SASL_SSL", "OAUTHBEARER"),
    Listener("SASL_PLAINTEXT", "OAUTHBEARER"),
]


@pytest.mark.parametrize("listener", CONFLUENT, ids=lambda li: f"{li.protocol}-{li.mechanism}")
def test_confluent_kafka(authorizing, certs, listener):
    proxy, topic, group, audit = authorizing(listener)
    cfg = listener.confluent(proxy.bootstrap, certs)
    producer = Producer({**cfg, "linger.ms": 5})
    for i in range(N):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(15) == 0
    # assign, not subscribe: a group join costs seconds; commits still need the group ACL
    consumer = Consumer({**cfg, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < N and time.monotonic() < deadline:
        for msg in consumer.consume(N, 0.5):
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    consumer.commit(asynchronous=False)
    assert consumer.committed([TopicPartition(topic, 0)], 10)[0].offset == N
    consumer.close()
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(N))
    assert_audited_as(proxy, audit, topic, "User:alice")

    # bob authenticates too, but the ACLs are alice's: the principal is what decides
    bob = Listener(listener.protocol, listener.mechanism, user="bob").confluent(
        proxy.bootstrap, certs
    )
    reports: list = []
    producer = Producer({**bob, "message.timeout.ms": 5000})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(10)
    assert reports and reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, reports
    denied = [
        e
        for e in read_audit(proxy, audit)
        if e["decision"] == "DENIED" and e["resource_name"] == topic
    ]
    assert denied and {e["principal"] for e in denied} == {"User:bob"}


# ---------------------------------------------------------------------------- kafka-python

PYTHON_CLIENTS = [
    Listener("SSL"),
    Listener("SASL_PLAINTEXT", "PLAIN"),
    Listener("SASL_SSL", "SCRAM-SHA-256"),
    Listener("SASL_PLAINTEXT", "SCRAM-SHA-512"),
]
IDS = [f"{li.protocol}-{li.mechanism or 'mTLS'}" for li in PYTHON_CLIENTS]


@pytest.mark.parametrize("listener", PYTHON_CLIENTS, ids=IDS)
def test_kafka_python(authorizing, certs, listener):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as Partition

    proxy, topic, group, audit = authorizing(listener)
    cfg = listener.kafka_python(proxy.bootstrap, certs)
    producer = KafkaProducer(**cfg, linger_ms=5)
    for i in range(N):
        producer.send(topic, f"v{i}".encode())
    producer.flush(15)
    producer.close()
    consumer = KafkaConsumer(**cfg, group_id=group, enable_auto_commit=False)
    consumer.assign([Partition(topic, 0)])
    consumer.seek_to_beginning()
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < N and time.monotonic() < deadline:
        for records in consumer.poll(500).values():
            values.extend(r.value for r in records)
    consumer.commit()
    assert consumer.committed(Partition(topic, 0)) == N
    consumer.close()
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(N))
    assert_audited_as(proxy, audit, topic, "User:alice")


# -------------------------------------------------------------------------------- aiokafka


@pytest.mark.asyncio
@pytest.mark.parametrize("listener", PYTHON_CLIENTS, ids=IDS)
async def test_aiokafka(authorizing, certs, listener):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as Partition

    proxy, topic, group, audit = await asyncio.to_thread(authorizing, listener)
    cfg = listener.aiokafka(proxy.bootstrap, certs)
    producer = AIOKafkaProducer(**cfg, linger_ms=5)
    await producer.start()
    try:
        for i in range(N):
            await producer.send(topic, f"v{i}".encode())
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(**cfg, group_id=group, enable_auto_commit=False)
    await consumer.start()
    consumer.assign([Partition(topic, 0)])
    await consumer.seek_to_beginning()
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(values) < N and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in records)
        await consumer.commit()
        assert await consumer.committed(Partition(topic, 0)) == N
    finally:
        await consumer.stop()
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(N))
    await asyncio.to_thread(assert_audited_as, proxy, audit, topic, "User:alice")
