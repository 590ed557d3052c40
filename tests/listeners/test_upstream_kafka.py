"""Upstream security against Apache Kafka (kafka_secure): the proxy logs in to the cluster with
its own SCRAM credentials over SASL_SSL (or uses TLS only) while clients log in to the proxy
with theirs, from the proxy's own users file (different passwords from the cluster's)."""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from aclgate.proxy.security.usersfile import add_user
from tests.fixtures.rawclient import RawClient, request_entity
from tests.listeners.util import (
    acl,
    confluent_errors,
    read_audit,
    sasl_login,
    write_acls,
)

pytestmark = pytest.mark.kafka

N = 50


def proxy_password(user: str) -> str:
    return f"{user}-at-the-proxy"  # not the cluster's "<name>-secret"


@pytest.fixture(scope="module")
def proxy_users(tmp_path_factory):
    path = tmp_path_factory.mktemp("upstream-users") / "users.json"
    for user in ("alice", "bob"):
        add_user(path, user, proxy_password(user), ["SCRAM-SHA-512", "PLAIN"])
    return path


def upstream_settings(kafka, protocol: str, tmp_path, password: str = "admin-secret") -> dict:
    lst = kafka.listener(protocol)
    settings = {
        "upstream_security_protocol": protocol,
        "upstream_ssl_cafile": lst.ca_file,
    }
    if protocol.startswith("SASL"):
        secret = tmp_path / "upstream-password"
        secret.write_text(password + "\n")
        settings.update(
            upstream_sasl_mechanism="SCRAM-SHA-512",
            upstream_sasl_username="admin",
            upstream_sasl_password_file=secret,
        )
    return settings


def client(proxy, user: str, mechanism: str = "SCRAM-SHA-512", password: str | None = None):
    return {
        "bootstrap.servers": proxy.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password or proxy_password(user),
    }


def roundtrip(cfg: dict, topic: str) -> None:
    producer = Producer({**cfg, "linger.ms": 5})
    for i in range(N):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**cfg, "group.id": f"{topic}-g", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < N and time.monotonic() < deadline:
        for msg in consumer.consume(N, 0.5):
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(N))


@pytest.mark.parametrize("upstream", ["SASL_SSL", "SSL"])
def test_clients_and_proxy_authenticate_separately(
    kafka_secure, kafka_topic_name, proxy_factory, proxy_users, tmp_path, caplog, upstream
):
    caplog.set_level(logging.DEBUG)
    kafka_secure.create_topic(kafka_topic_name)
    audit = tmp_path / "audit.jsonl"
    proxy = proxy_factory(
        kafka_secure.listener(upstream).bootstrap,
        **upstream_settings(kafka_secure, upstream, tmp_path),
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms="SCRAM-SHA-512,PLAIN",
        users_file=proxy_users,
        allow_everyone_if_no_acl_found=False,
        acl_file=write_acls(
            tmp_path / "acls.json",
            acl("User:alice", "ALL", kafka_topic_name),
            acl("User:alice", "ALL", f"{kafka_topic_name}-g", rtype="GROUP"),
        ),
        audit_file=audit,
    )
    roundtrip(client(proxy, "alice"), kafka_topic_name)
    # every broker address the clients were given is the proxy's
    ports = proxy.run(lambda: set(proxy.server.directory.proxy_ports.values()))
    assert ports and kafka_secure.listener(upstream).port(1) not in ports
    # the cluster's password is not a password at the proxy
    errors = confluent_errors(client(proxy, "alice", password="alice-secret"))
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    # the audit names the client's principal, not the proxy's own user
    principals = {e["principal"] for e in read_audit(proxy, audit)}
    assert principals == {"User:alice"}
    proxy.stop()
    lines = [logging.Formatter().format(r) for r in caplog.records]
    assert not [line for line in lines if "admin-secret" in line]


def test_upstream_refusing_the_proxys_credentials(
    kafka_secure, proxy_factory, proxy_users, tmp_path, caplog
):
    """A wrong service password: clients authenticate, then are closed when their first
    request needs the upstream connection; the log says why, without the password."""
    proxy = proxy_factory(
        kafka_secure.listener("SASL_SSL").bootstrap,
        **upstream_settings(kafka_secure, "SASL_SSL", tmp_path, password="not-the-password"),
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms="SCRAM-SHA-512",
        users_file=proxy_users,
    )
    with RawClient(proxy.bootstrap, timeout=30) as raw:
        answer = sasl_login(raw, "SCRAM-SHA-512", "alice", proxy_password("alice"))
        assert answer.error_code == ErrorCode.none
        raw.send(request_entity(3, 1, topics=None))  # Metadata: opens the upstream connection
        assert raw.is_closed_by_peer(timeout=30)
    assert "cluster refused the proxy's credentials" in caplog.text
    assert "not-the-password" not in caplog.text
