"""SSL listeners with real clients: mTLS principals (mapping rules, ACLs, audit), requested
client auth, refused certificates, and certificate reload under open connections."""

from __future__ import annotations

import shutil
import socket
import ssl

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509

from aclgate.certs import pki
from tests.listeners.util import (
    MAPPING_RULES,
    acl,
    confluent_errors,
    read_audit,
    unique,
    wait_until,
    write_acls,
)

TLS_REFUSED = (
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TRANSPORT,
    KafkaError._SSL,
    KafkaError._AUTHENTICATION,
)


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)


def produce(cfg: dict, topic: str, value: bytes = b"v") -> KafkaError | None:
    """Produce one record; the delivery error (None on success)."""
    results: list = []
    producer = Producer({**cfg, "message.timeout.ms": 10000})
    producer.produce(topic, value, on_delivery=lambda err, msg: results.append(err))
    producer.flush(15)
    assert results, "no delivery report"
    return results[0]


def test_mtls_principal_mapped_by_rule_in_acls_and_audit(tansu, proxy_factory, certs, tmp_path):
    topic = unique("mtls")
    create_topic(tansu.bootstrap, topic)
    audit = tmp_path / "audit.jsonl"
    proxy = proxy_factory(
        tansu.bootstrap,
        **certs.listener("required", ssl_principal_mapping_rules=MAPPING_RULES),
        allow_everyone_if_no_acl_found=False,
        acl_file=write_acls(
            tmp_path / "acls.json",
            acl("User:alice", "WRITE", topic),
            acl("User:alice", "DESCRIBE", topic),
        ),
        audit_file=audit,
    )
    # CN=Alice,OU=eng,O=example -> RULE ... /L -> User:alice: allowed by the ACL
    assert produce(certs.confluent(proxy.bootstrap, "alice"), topic) is None
    # CN=bob,OU=eng,O=example -> User:bob: no ACL, denied
    err = produce(certs.confluent(proxy.bootstrap, "bob"), topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    events = [e for e in read_audit(proxy, audit) if e["resource_name"] == topic]
    allowed = {(e["principal"], e["operation"]) for e in events if e["decision"] == "ALLOWED"}
    denied = {(e["principal"], e["operation"]) for e in events if e["decision"] == "DENIED"}
    assert ("User:alice", "WRITE") in allowed and ("User:alice", "DESCRIBE") in allowed
    assert ("User:bob", "DESCRIBE") in denied
    assert {e["principal"] for e in events} == {"User:alice", "User:bob"}
    assert all(e["host"] == "127.0.0.1" for e in events)


def test_requested_client_auth_without_certificate_is_anonymous(
    tansu, proxy_factory, certs, tmp_path
):
    topic = unique("anon")
    create_topic(tansu.bootstrap, topic)
    audit = tmp_path / "audit.jsonl"
    proxy = proxy_factory(
        tansu.bootstrap,
        **certs.listener("requested", ssl_principal_mapping_rules=MAPPING_RULES),
        allow_everyone_if_no_acl_found=False,
        acl_file=write_acls(
            tmp_path / "acls.json",
            acl("User:ANONYMOUS", "WRITE", topic),
            acl("User:ANONYMOUS", "DESCRIBE", topic),
        ),
        audit_file=audit,
    )
    assert produce(certs.confluent(proxy.bootstrap), topic) is None  # no certificate
    # with a certificate on the same listener the principal is the mapped subject: denied
    err = produce(certs.confluent(proxy.bootstrap, "alice"), topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    events = [e for e in read_audit(proxy, audit) if e["resource_name"] == topic]
    assert {(e["principal"], e["decision"]) for e in events if e["operation"] == "WRITE"} == {
        ("User:ANONYMOUS", "ALLOWED")
    }
    assert ("User:alice", "DENIED") in {(e["principal"], e["decision"]) for e in events}


@pytest.mark.parametrize("client", ["expired", "untrusted", "none"])
def test_refused_client_certificates_never_reach_the_cluster(
    scripted, proxy_factory, certs, client
):
    proxy = proxy_factory(scripted.bootstrap, **certs.listener("required"))
    node = scripted.nodes[0]
    before = len(node.requests)
    cfg = certs.confluent(
        proxy.bootstrap,
        None if client == "none" else ("alice" if client == "untrusted" else "expired"),
        untrusted=client == "untrusted",
    )
    errors = confluent_errors(cfg)
    # asyncio/uvloop TLS servers close without the fatal TLS alert Kafka's Java engine would
    # send (CPython gh-98078), so librdkafka reports a closed connection, not the reason
    assert errors and errors[0].code() in TLS_REFUSED, errors
    with pytest.raises(KafkaException):
        AdminClient(cfg).list_topics(timeout=2)
    assert len(node.requests) == before
    assert proxy.run(lambda: len(proxy.server.connections)) == 0


def served_certificate(port: int, cafile) -> x509.Certificate:
    """The certificate a fresh TLS connection to the proxy is given."""
    ctx = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


def test_certificate_reload_keeps_open_connections(tansu, proxy_factory, certs, tmp_path):
    topic = unique("reload")
    create_topic(tansu.bootstrap, topic)
    ca_dir = tmp_path / "ca"
    shutil.copytree(certs.dir, ca_dir)
    proxy = proxy_factory(
        tansu.bootstrap,
        listener_security_protocol="SSL",
        ssl_certfile=ca_dir / "server.crt",
        ssl_keyfile=ca_dir / "server.key",
    )
    first = served_certificate(proxy.port, certs.ca)
    producer = Producer({**certs.confluent(proxy.bootstrap), "linger.ms": 0})
    consumer = Consumer(
        {
            **certs.confluent(proxy.bootstrap),
            "group.id": unique("g"),
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, 0)])
    producer.produce(topic, b"before")
    assert producer.flush(10) == 0
    assert consumer.consume(1, 10)[0].value() == b"before"
    connections = proxy.run(lambda: set(proxy.server.connections))

    pki.issue_server(ca_dir, dns=["localhost", "reloaded.test"], ips=["127.0.0.1"], force=True)
    new = x509.load_pem_x509_certificate((ca_dir / "server.crt").read_bytes())
    assert new.serial_number != first.serial_number
    seen = wait_until(
        lambda: served_certificate(proxy.port, certs.ca).serial_number == new.serial_number,
        timeout=10,
    )
    assert seen
    # the connections opened before the reload are the same ones and still work
    producer.produce(topic, b"after")
    assert producer.flush(10) == 0
    assert consumer.consume(1, 10)[0].value() == b"after"
    assert connections <= proxy.run(lambda: set(proxy.server.connections))
    consumer.close()
    # and a new client works with the new certificate
    assert produce(certs.confluent(proxy.bootstrap), topic, b"new") is None
    assert proxy.run(lambda: proxy.server.security.tls.reloads) == 1


def test_certificate_no_mapping_rule_matches_is_refused(scripted, proxy_factory, certs):
    """Rules without DEFAULT that match no subject: Kafka fails the connection; so does the
    proxy, before anything reaches the cluster."""
    proxy = proxy_factory(
        scripted.bootstrap,
        **certs.listener("required", ssl_principal_mapping_rules="RULE:^CN=([^,]+),OU=ops,.*$/$1/"),
    )
    before = len(scripted.nodes[0].requests)
    errors = confluent_errors(certs.confluent(proxy.bootstrap, "alice"))
    assert errors and errors[0].code() in TLS_REFUSED, errors
    assert scripted.nodes[0].requests[before:] == []
    assert proxy.metric("aclgate_errors_total", {"kind": "tls_principal"}) >= 1
