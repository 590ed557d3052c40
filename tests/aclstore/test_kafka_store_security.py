"""The `kafka` ACL store logs in with the proxy's own upstream identity (proxy/aclstore/kafka/client.py):
SASL_SSL with SCRAM against a real Apache Kafka, and the settings each upstream option maps to."""

from __future__ import annotations

import socket

import pytest

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclBinding, AclOperation, ResourceType
from aclgate.proxy.aclstore.backends import open_acl_backend, protected_topics
from aclgate.proxy.aclstore.kafka.client import client_config, store_settings
from aclgate.proxy.aclstore.kafka.store import KafkaAclBackend
from aclgate.proxy.config import ConfigError
from aclgate.proxy.process.workers import worker_config
from tests.fixtures.proxy import make_config

ORDERS = AclBinding.from_dict(
    {
        "resource_type": "TOPIC",
        "resource_name": "orders",
        "pattern_type": "LITERAL",
        "principal": "User:alice",
        "host": "*",
        "operation": "READ",
        "permission_type": "ALLOW",
    }
)


def test_the_upstream_identity_maps_to_librdkafka_settings(tmp_path):
    password = tmp_path / "pw"
    password.write_text("s3cret\nignored\n")
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    config = make_config(
        "kafka-1:9092,kafka-2:9092",
        upstream_security_protocol="SASL_SSL",
        upstream_sasl_mechanism="SCRAM-SHA-256",
        upstream_sasl_username="svc-aclgate",
        upstream_sasl_password_file=password,
        upstream_ssl_cafile=ca,
        upstream_ssl_check_hostname=False,
        acl_store="kafka",
    )
    assert client_config(config) == {
        "security.protocol": "sasl_ssl",
        "client.id": "aclgate-acl-store",
        "ssl.ca.location": str(ca),
        "ssl.endpoint.identification.algorithm": "none",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "svc-aclgate",
        "sasl.password": "s3cret",
    }
    settings = store_settings(config)
    assert (settings.bootstrap, settings.topic, settings.replication_factor) == (
        "kafka-1:9092,kafka-2:9092",
        "__aclgate_acls",
        None,
    )
    assert protected_topics(config) == frozenset({"__aclgate_acls"})
    other = make_config(
        "kafka-1:9092",
        acl_store="kafka",
        acl_bootstrap="acls-1:9092",
        acl_topic="fleet-acls",
        acl_topic_replication_factor=2,
        acl_topic_skip_offset=[7],
    )
    settings = store_settings(other)
    assert (settings.bootstrap, settings.topic, settings.replication_factor) == (
        "acls-1:9092",
        "fleet-acls",
        2,
    )
    assert settings.skip_offsets == frozenset({7})
    assert client_config(other) == {
        "security.protocol": "plaintext",
        "client.id": "aclgate-acl-store",
    }
    assert isinstance(open_acl_backend(other, Authorizer()), KafkaAclBackend)
    assert protected_topics(make_config("kafka-1:9092")) == frozenset()


def test_each_instance_and_worker_writes_with_a_transactional_id_that_survives_a_restart():
    """Issue 20: the id was random per process, so a restart could not fence the change its
    killed predecessor left open. Now: host and --listen port, or --acl-transactional-id; a
    worker of its own each; random only where a restart would listen elsewhere (port 0)."""
    config = make_config("kafka-1:9092", acl_store="kafka", listen=("0.0.0.0", 9092))
    tid = f"aclgate-acls-{socket.gethostname()}-9092"
    assert store_settings(config).transactional_id == tid
    workers = {store_settings(worker_config(config, i)).transactional_id for i in range(3)}
    assert workers == {f"{tid}-worker-{i}" for i in range(3)}
    mine = make_config("kafka-1:9092", acl_store="kafka", acl_transactional_id="acls-eu-1")
    assert store_settings(mine).transactional_id == "acls-eu-1"
    assert store_settings(worker_config(mine, 1)).transactional_id == "acls-eu-1-worker-1"
    ephemeral = make_config("kafka-1:9092", acl_store="kafka", listen=("127.0.0.1", 0))
    assert store_settings(ephemeral).transactional_id is None


def test_an_unreadable_password_file_is_a_configuration_error(tmp_path):
    password = tmp_path / "pw"
    password.write_text("\n")
    config = make_config(
        "kafka-1:9092",
        upstream_security_protocol="SASL_PLAINTEXT",
        upstream_sasl_username="svc",
        upstream_sasl_password_file=password,
    )
    with pytest.raises(ConfigError, match="empty first line"):
        client_config(config)


@pytest.mark.asyncio
async def test_the_store_works_over_sasl_ssl_as_the_proxys_own_user(kafka_secure, tmp_path):
    lst = kafka_secure.listener("SASL_SSL")
    password = tmp_path / "pw"
    user, secret = "admin", lst.users["admin"]
    password.write_text(secret + "\n")
    config = make_config(
        lst.bootstrap,
        upstream_security_protocol="SASL_SSL",
        upstream_sasl_mechanism="SCRAM-SHA-512",
        upstream_sasl_username=user,
        upstream_sasl_password_file=password,
        upstream_ssl_cafile=lst.ca_file,
        acl_store="kafka",
        acl_topic=f"acls-sasl-{tmp_path.name}",
    )
    authorizer = Authorizer()
    backend = open_acl_backend(config, authorizer)
    assert isinstance(backend, KafkaAclBackend)
    await backend.start()
    try:
        await backend.change([ORDERS], [])
        decision = authorizer.authorize(
            "User:alice", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "orders"
        )
        assert decision.allowed
        assert backend.status().error is None
    finally:
        await backend.stop()


@pytest.mark.asyncio
async def test_the_documented_permissions_are_enough(kafka_authz, kafka_acls, tmp_path, caplog):
    """docs/authz.md's table, granted on an authorizing Kafka to a user with nothing else (no
    group permission): the store creates its topic, replays it and commits changes."""
    topic = f"acls-perm-{tmp_path.name}"
    for op in ("DESCRIBE", "DESCRIBE_CONFIGS", "READ", "WRITE", "CREATE"):
        kafka_acls.add("alice", op, "TOPIC", topic)
    for op in ("WRITE", "DESCRIBE"):
        kafka_acls.add("alice", op, "TRANSACTIONAL_ID", "aclgate-acls-", pattern="PREFIXED")
    lst = kafka_authz.listener("SASL_PLAINTEXT")
    password = tmp_path / "pw"
    password.write_text(lst.users["alice"] + "\n")
    config = make_config(
        lst.bootstrap,
        upstream_security_protocol="SASL_PLAINTEXT",
        upstream_sasl_mechanism="PLAIN",
        upstream_sasl_username="alice",
        upstream_sasl_password_file=password,
        acl_store="kafka",
        acl_topic=topic,
    )
    authorizer = Authorizer()
    backend = open_acl_backend(config, authorizer)
    assert isinstance(backend, KafkaAclBackend)
    caplog.set_level("INFO", logger="aclgate.aclstore")
    await backend.start()
    try:
        await backend.change([ORDERS], [])
        assert authorizer.acls() == [ORDERS]
        # librdkafka's coordinator lookup for the reader's (unused) group is refused: noted
        # once, not warned about
        assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
        restarted = KafkaAclBackend(backend.settings, Authorizer())
        await restarted.start()
        assert restarted.authorizer.acls() == [ORDERS]
        await restarted.stop()
        assert backend.status().error is None
    finally:
        await backend.stop()
