"""Groups from LDAP end to end: `aclgate serve` (a child process) in front of tansu, SASL
SCRAM users from a users file, a real slapd, and an ACL file that lets only Group:payments
read a topic. confluent-kafka consumers: an LDAP member reads, a non-member is refused
TOPIC_AUTHORIZATION_FAILED; slapd stopped, the member still reads within --ldap-max-stale,
and after it is refused (its open connection too), while /readyz and /metrics say that the
directory is down. Also an mTLS listener (in process): the mapped certificate user's groups."""

from __future__ import annotations

import re
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from aclgate.proxy.security.usersfile import add_user
from tests.fixtures.slapd import SERVICE_DN, SERVICE_PASSWORD, SUFFIX
from tests.fixtures.wait import wait_until
from tests.listeners.conftest import Pki
from tests.listeners.util import MAPPING_RULES, acl, password, unique, write_acls

TTL, MAX_STALE = 1.0, 8.0


def _acls(topic: str) -> list[dict]:
    """READ on `topic` for Group:payments only; everyone may see it (so a Fetch of it is
    answered TOPIC_AUTHORIZATION_FAILED) and use any consumer group (librdkafka looks its
    group's coordinator up)."""
    return [
        acl("Group:payments", "READ", topic),
        acl("User:*", "DESCRIBE", topic),
        acl("User:*", "READ", "*", rtype="GROUP"),
    ]


def _topic_with_records(bootstrap: str, topic: str, count: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, f"record-{i}".encode())
    assert producer.flush(15) == 0


def _consumer(bootstrap: str, user: str, topic: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password(user),
            "group.id": unique("g"),  # assigned, never committed
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 500,
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    return consumer


def _read(consumer: Consumer, timeout: float = 15) -> bytes | int:
    """The next record's value, or the code of the first error the consumer reports."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error() is not None:
            if message.error().code() == KafkaError._PARTITION_EOF:
                continue
            return message.error().code()
        return message.value()
    raise AssertionError("neither a record nor an error")


def _read_once(bootstrap: str, user: str, topic: str) -> bytes | int:
    consumer = _consumer(bootstrap, user, topic)
    try:
        return _read(consumer)
    finally:
        consumer.close()


def test_ldap_groups_through_aclgate_serve(tansu, slapd_factory, proxy_process, tmp_path: Path):
    slapd = slapd_factory()
    topic = unique("payments")
    _topic_with_records(tansu.bootstrap, topic, 2)
    users = tmp_path / "users.json"
    for user in ("alice", "bob"):
        add_user(users, user, password(user), ("SCRAM-SHA-512",))
    acls = write_acls(tmp_path / "acls.json", *_acls(topic))
    bind_password = tmp_path / "bind.pw"
    bind_password.write_text(SERVICE_PASSWORD + "\n")
    proxy = proxy_process(
        "--upstream", tansu.bootstrap, "--listen", "127.0.0.1:0",
        "--metrics-listen", "127.0.0.1:0",
        "--listener-security-protocol", "SASL_PLAINTEXT", "--sasl-mechanisms", "SCRAM-SHA-512",
        "--users-file", str(users), "--acl-file", str(acls),
        "--ldap-url", slapd.url, "--ldap-bind-dn", SERVICE_DN,
        "--ldap-bind-password-file", str(bind_password),
        "--ldap-user-search-base", f"ou=people,{SUFFIX}",
        "--ldap-group-search-base", f"ou=groups,{SUFFIX}",
        "--ldap-cache-ttl", str(TTL), "--ldap-max-stale", str(MAX_STALE), "--ldap-timeout", "1",
    )  # fmt: skip

    # a member of payments reads; bob, in no such group, is refused
    member = _consumer(proxy.bootstrap, "alice", topic)
    assert _read(member) == b"record-0"
    assert _read_once(proxy.bootstrap, "bob", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert proxy.metric("aclgate_ldap_up") == 1
    assert proxy.metric("aclgate_ldap_lookups_total", {"outcome": "found"}) >= 2
    status, ready = proxy.readyz()
    assert status == 200 and ready["ldap"]["up"] is True, ready
    _, text = proxy.http("/metrics")
    exported = set(re.findall(r"^# TYPE (aclgate_ldap_[a-z_]+) ", text, re.M))
    families = {name for name in exported if not name.endswith("_created")}
    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    assert families == set(re.findall(r"^\| `(aclgate_ldap_[a-z_]+)` \|", doc, re.M))

    # the directory goes away: the last known groups hold until they are MAX_STALE old
    slapd.stop()
    stopped = time.monotonic()
    wait_until(lambda: proxy.metric("aclgate_ldap_up") == 0, timeout=10, what="ldap down")
    assert _read_once(proxy.bootstrap, "alice", topic) == b"record-0"
    assert _read(member) == b"record-1"  # the open connection too
    assert time.monotonic() - stopped < MAX_STALE, "too slow to test within max-stale"
    status, ready = proxy.readyz()
    assert status == 200 and ready["ldap"]["up"] is False, ready

    # past max-stale: no groups from the directory (fail closed), for new and open sessions
    wait_until(
        lambda: proxy.readyz()[0] == 503, timeout=MAX_STALE + 10, what="/readyz 503 past max-stale"
    )
    status, ready = proxy.readyz()
    assert "LDAP directory has not answered" in ready["ldap"]["not_ready"], ready
    assert proxy.metric("aclgate_ldap_stale_seconds") > MAX_STALE
    assert proxy.metric("aclgate_ldap_lookups_total", {"outcome": "failed"}) >= 1
    assert _read_once(proxy.bootstrap, "alice", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    Producer({"bootstrap.servers": tansu.bootstrap}).produce(topic, b"record-2")
    assert _read(member) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    member.close()
    assert "LDAP directory not answering" in proxy.log


def test_the_mapped_certificate_user_gets_its_ldap_groups(
    tansu, slapd, proxy_factory, tmp_path: Path
):
    certs = Pki(tmp_path / "pki")
    topic = unique("payments")
    _topic_with_records(tansu.bootstrap, topic)
    bind_password = tmp_path / "bind.pw"
    bind_password.write_text(SERVICE_PASSWORD + "\n")
    proxy = proxy_factory(
        tansu.bootstrap,
        allow_everyone_if_no_acl_found=False,
        acl_file=write_acls(tmp_path / "acls.json", *_acls(topic)),
        ssl_principal_mapping_rules=MAPPING_RULES,
        **certs.listener("required"),
        ldap_url=slapd.url,
        ldap_bind_dn=SERVICE_DN,
        ldap_bind_password_file=bind_password,
        ldap_user_dn_template=f"uid={{user}},ou=people,{SUFFIX}",
        ldap_group_search_base=f"ou=groups,{SUFFIX}",
    )

    def read(client: str) -> bytes | int:
        consumer = Consumer(
            {
                **certs.confluent(proxy.bootstrap, client),
                "group.id": unique("g"),
                "enable.auto.commit": False,
                "log_level": 0,
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        try:
            return _read(consumer)
        finally:
            consumer.close()

    assert read("alice") == b"record-0"  # CN=Alice,OU=eng -> User:alice, in payments
    assert read("bob") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    groups = proxy.server.ldap_groups
    assert groups is not None and proxy.run(lambda: groups.cache.get("alice", 0)[1]) == {"payments"}
