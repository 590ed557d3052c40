"""Group principals from the three identity sources, end to end (docs/identity.md, "Groups"):
a real `aclgate serve` process in front of tansu, an ACL file that lets only `Group:payments`
read a topic and commit in its consumer group, and confluent-kafka consumers whose groups come
from an OAUTHBEARER token's claim (signed by the test IdP, keys from its JWKS URL), from the
users file (`aclgate users add --group`) and from the client certificate (OU and
subjectAltName URI through --ssl-group-mapping-rules). A consumer outside the group is denied,
and a DENY on `Group:contractors` stops a member of both. Then the users file changing while
the proxy runs: the next login and a re-authentication (KIP-368) on an open connection get
the new groups. Unit tests of each source: tests/identity/test_group_sources.py."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509
from kio.schema.errors import ErrorCode

from aclgate.certs import pki
from aclgate.proxy.cli import main
from aclgate.proxy.security.usersfile import add_user, set_groups
from tests.fixtures.idp import AUDIENCE, ISSUER, IdentityProvider
from tests.fixtures.rawclient import RawClient
from tests.listeners.conftest import sasl_listener
from tests.listeners.util import (
    acl,
    confluent_errors,
    metadata_request,
    password,
    sasl_login,
    sign_jwt,
    unique,
    write_acls,
)

RECORDS = [b"r1", b"r2", b"r3"]
#: how librdkafka reports a connection closed right after its TLS handshake
TLS_REFUSED = (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._SSL)
#: what the certificate groups are made of: each OU lower-cased, and the namespace of a SPIFFE
#: ID in the subjectAltName (a `/` in a rule's pattern is written `\/`, as in Kafka's rules)
SSL_GROUP_RULES = r"RULE:^spiffe:\/\/example\.org\/ns\/([^\/]+)\/.*$/$1/,RULE:^[^:]+$/$0/L"


@pytest.fixture
def idp(tmp_path):
    provider = IdentityProvider(tmp_path)
    yield provider
    provider.close()


@pytest.fixture
def topic(tansu) -> str:
    """A topic in tansu holding RECORDS, written directly (not through the proxy)."""
    name = unique("payments")
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": tansu.bootstrap})
    for value in RECORDS:
        producer.produce(name, value)
    assert producer.flush(15) == 0
    return name


#: what a consumer outside Group:payments is told first: the topic or the group refused
REFUSED = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)


def refused(result: tuple[list[bytes], int | None]) -> bool:
    values, code = result
    return values == [] and code in REFUSED


def group_policy(path: Path, topic: str, group: str) -> Path:
    """READ on the topic and the consumer group for Group:payments only; a DENY of READ on
    the topic for Group:contractors."""
    return write_acls(
        path,
        acl("Group:payments", "READ", topic),
        acl("Group:payments", "READ", group, rtype="GROUP"),
        acl("Group:contractors", "READ", topic, permission="DENY"),
    )


def read(cfg: dict, topic: str, group: str) -> tuple[list[bytes], int | None]:
    """Consume the topic from the start as a member of `group` (assigned, not subscribed: a
    group join costs seconds), then commit the position in the group: (values, the error
    code that stopped it, or None)."""
    consumer = Consumer({**cfg, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 20
        while len(values) < len(RECORDS) and time.monotonic() < deadline:
            for msg in consumer.consume(10, 0.5):
                if msg.error() is not None:
                    return values, msg.error().code()
                values.append(msg.value())
        if values:
            try:  # OffsetCommit: READ on the consumer group
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                return values, exc.args[0].code()
        return values, None
    finally:
        consumer.close()


def decisions(proc, audit: Path, topic: str) -> dict[str, set]:
    """principal -> {(operation, decision, groups)} of the decisions on `topic`, from the
    audit file the stopped proxy flushed."""
    proc.stop()
    out: dict[str, set] = {}
    for line in audit.read_text().splitlines():
        event = json.loads(line)
        if event["resource_name"] == topic:
            out.setdefault(event["principal"], set()).add(
                (event["operation"], event["decision"], tuple(event["groups"]))
            )
    return out


def users_cli(*args: str, monkeypatch) -> None:
    """`aclgate users ...` as typed, the password on standard input."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(password(args[1]) + "\n"))
    assert main(["users", *args]) == 0


def test_groups_from_tokens_and_the_users_file(
    tansu, topic, idp, proxy_process, tmp_path, monkeypatch
):
    group = unique("payments-readers")
    users = str(tmp_path / "users.json")
    for name, mechanism, groups in (
        ("carol", "PLAIN", ["payments"]),
        ("dave", "SCRAM-SHA-512", []),
        ("erin", "SCRAM-SHA-512", ["payments", "contractors"]),
    ):
        flags = [f for g in groups for f in ("--group", g)]
        users_cli("add", name, "--users-file", users, "--mechanism", mechanism, "--password-stdin",
                  *flags, monkeypatch=monkeypatch)  # fmt: skip
    audit = tmp_path / "audit.jsonl"
    proc = proxy_process(
        *("--upstream", tansu.bootstrap, "--listen", "127.0.0.1:0"),
        *("--listener-security-protocol", "SASL_PLAINTEXT"),
        *("--sasl-mechanisms", "OAUTHBEARER,PLAIN,SCRAM-SHA-512", "--users-file", users),
        *("--sasl-oauthbearer-jwks-endpoint-url", idp.jwks_url),
        *("--sasl-oauthbearer-ssl-cafile", str(idp.ca)),
        *("--sasl-oauthbearer-expected-audience", AUDIENCE),
        *("--sasl-oauthbearer-expected-issuer", ISSUER),
        *("--sasl-oauthbearer-groups-claim-name", "realm_access.roles"),  # Keycloak's roles
        *("--acl-file", str(group_policy(tmp_path / "acls.json", topic, group))),
        *("--audit-file", str(audit), "--connection-failed-authentication-delay-ms", "10"),
    )

    def token(sub: str, **claims) -> dict:
        return {
            "bootstrap.servers": proc.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": lambda _: (idp.sign(sub, **claims), time.time() + 3600),
        }

    def user(name: str, mechanism: str) -> dict:
        return {
            "bootstrap.servers": proc.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": name,
            "sasl.password": password(name),
        }

    # the token says payments (nested claim): reads, and commits in the group
    roles = {"realm_access": {"roles": ["payments", "offline_access"]}}
    assert read(token("alice", **roles), topic, group) == (RECORDS, None)
    # a token without payments
    assert refused(read(token("bob", realm_access={"roles": ["offline_access"]}), topic, group))
    # the users file's payments group, over PLAIN
    assert read(user("carol", "PLAIN"), topic, group) == (RECORDS, None)
    # in no group
    assert refused(read(user("dave", "SCRAM-SHA-512"), topic, group))
    # payments and contractors: the DENY on the topic wins (the group is allowed)
    assert read(user("erin", "SCRAM-SHA-512"), topic, group) == (
        [],
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    )
    # a groups claim of the wrong type fails the login, saying which claim (fail closed)
    errors = confluent_errors(token("mallory", realm_access={"roles": {"payments": True}}))
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "the groups claim 'realm_access.roles' is an object" in str(errors[0])

    seen = decisions(proc, audit, topic)
    # the session's groups, all of them (offline_access is named by no ACL)
    alice = ("Group:offline_access", "Group:payments")
    assert ("READ", "ALLOWED", alice) in seen["User:alice"]
    assert {(d, g) for _, d, g in seen["User:alice"]} == {("ALLOWED", alice)}
    assert {(d, g) for _, d, g in seen["User:bob"]} == {("DENIED", ("Group:offline_access",))}
    assert ("READ", "ALLOWED", ("Group:payments",)) in seen["User:carol"]
    assert {(d, g) for _, d, g in seen["User:dave"]} == {("DENIED", ())}
    erin = ("Group:contractors", "Group:payments")
    assert ("READ", "DENIED", erin) in seen["User:erin"]
    assert ("READ", "ALLOWED", erin) not in seen["User:erin"]
    assert "User:mallory" not in seen


def test_groups_from_the_client_certificate(tansu, topic, proxy_process, tmp_path):
    group = unique("payments-readers")
    ca = tmp_path / "ca"
    pki.create_ca(ca)
    pki.issue_server(ca, dns=["localhost"], ips=["127.0.0.1"])
    # OUs Payments and eng -> payments, eng
    pki.issue_client(ca, "carol", "CN=carol,OU=Payments,OU=eng,O=example")
    # no OU; its SPIFFE ID's namespace is payments
    spiffe = x509.UniformResourceIdentifier("spiffe://example.org/ns/payments/sa/reader")
    pki.issue_client(ca, "reader", "CN=reader,O=example", san=[spiffe])
    # eng only
    pki.issue_client(ca, "dave", "CN=dave,OU=eng,O=example")
    audit = tmp_path / "audit.jsonl"
    proc = proxy_process(
        *("--upstream", tansu.bootstrap, "--listen", "127.0.0.1:0"),
        *("--listener-security-protocol", "SSL", "--ssl-client-auth", "required"),
        *("--ssl-certfile", str(ca / "server.crt"), "--ssl-keyfile", str(ca / "server.key")),
        *("--ssl-cafile", str(ca / "ca.crt")),
        *("--ssl-group-from", "OU", "--ssl-group-from", "SAN:URI"),
        *("--ssl-group-mapping-rules", SSL_GROUP_RULES),
        *("--acl-file", str(group_policy(tmp_path / "acls.json", topic, group))),
        *("--audit-file", str(audit)),
    )

    def client(name: str) -> dict:
        return {
            "bootstrap.servers": proc.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(ca / "ca.crt"),
            "ssl.certificate.location": str(ca / f"{name}.crt"),
            "ssl.key.location": str(ca / f"{name}.key"),
        }

    assert read(client("carol"), topic, group) == (RECORDS, None)
    assert read(client("reader"), topic, group) == (RECORDS, None)
    assert refused(read(client("dave"), topic, group))

    seen = decisions(proc, audit, topic)
    carol = ("Group:eng", "Group:payments")
    assert ("READ", "ALLOWED", carol) in seen["User:CN=carol,OU=Payments,OU=eng,O=example"]
    assert ("READ", "ALLOWED", ("Group:payments",)) in seen["User:CN=reader,O=example"]
    assert {(d, g) for _, d, g in seen["User:CN=dave,OU=eng,O=example"]} == {
        ("DENIED", ("Group:eng",))
    }


def test_certificate_groups_past_the_bounds_refuse_the_connection(
    tansu, proxy_factory, certs, tmp_path
):
    """A rule that makes a name longer than 255 characters: the connection is closed, the
    session never exists (fail closed)."""
    twelve_times = "RULE:^(.*)$/" + "$1" * 12 + "/"  # 12 x 25 characters of the subject
    proxy = proxy_factory(
        tansu.bootstrap, **certs.listener("required", ssl_group_mapping_rules=twelve_times)
    )
    errors = confluent_errors(certs.confluent(proxy.bootstrap, "alice"))
    assert errors and errors[0].code() in TLS_REFUSED, errors
    assert proxy.run(lambda: len(proxy.server.connections)) == 0
    assert proxy.metric("aclgate_errors_total", {"kind": "tls_principal"}) >= 1


def test_users_file_changes_apply_to_logins_and_reauthentications(
    tansu, topic, proxy_factory, tmp_path
):
    """`aclgate users set-groups` while the proxy runs: the next login has the new groups, and
    so does an open connection once it re-authenticates (KIP-368); until then it keeps the
    groups it logged in with, as it keeps its principal."""
    users = tmp_path / "users.json"
    add_user(users, "dave", password("dave"), ["SCRAM-SHA-512"])
    proxy = proxy_factory(
        tansu.bootstrap,
        **sasl_listener(users, mechanisms="SCRAM-SHA-512", connections_max_reauth_ms=60_000),
        allow_everyone_if_no_acl_found=False,
        acl_file=write_acls(
            tmp_path / "acls.json",
            acl("Group:payments", "DESCRIBE", topic),
            acl("User:dave", "DESCRIBE", "elsewhere"),
        ),
    )

    def login(raw: RawClient) -> None:
        answer = sasl_login(raw, "SCRAM-SHA-512", "dave", password("dave"))
        assert answer.error_code == ErrorCode.none

    def visible(raw: RawClient) -> bool:
        # with a topic dave may always describe: the request forwarded is never empty (tansu
        # answers an empty topic list with every topic)
        answer = raw.request(metadata_request(topic, "elsewhere"))
        (described,) = [t for t in answer.topics if t.name == topic]
        assert described.error_code in (ErrorCode.none, ErrorCode.topic_authorization_failed)
        return described.error_code == ErrorCode.none

    with RawClient(proxy.bootstrap) as held:
        login(held)
        assert not visible(held)
        set_groups(users, "dave", ["payments"])
        assert not visible(held)  # the session keeps what it logged in with
        with RawClient(proxy.bootstrap) as fresh:  # a new login reads the changed file
            login(fresh)
            assert visible(fresh)
        login(held)  # re-authentication on the open connection
        assert visible(held)
        set_groups(users, "dave", [])
        time.sleep(1.05)  # Kafka re-authenticates a connection at most once a second
        login(held)
        assert not visible(held)


def test_a_reauthentication_takes_the_new_tokens_groups(
    tansu, topic, proxy_factory, jwks_file, tmp_path
):
    """KIP-368 with OAUTHBEARER: the groups are the latest token's, on the same connection."""
    proxy = proxy_factory(
        tansu.bootstrap,
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms="OAUTHBEARER",
        sasl_oauthbearer_jwks_file=jwks_file,
        sasl_oauthbearer_expected_audience=[AUDIENCE],
        sasl_oauthbearer_expected_issuer=ISSUER,
        sasl_oauthbearer_groups_claim_name="groups",
        allow_everyone_if_no_acl_found=False,
        acl_file=write_acls(
            tmp_path / "acls.json",
            acl("Group:payments", "DESCRIBE", topic),
            acl("User:alice", "DESCRIBE", "elsewhere"),
        ),
    )

    def login(raw: RawClient, *groups: str) -> None:
        answer = sasl_login(raw, "OAUTHBEARER", "", sign_jwt("alice", groups=list(groups)))
        assert answer.error_code == ErrorCode.none

    def visible(raw: RawClient) -> bool:
        answer = raw.request(metadata_request(topic, "elsewhere"))
        (described,) = [t for t in answer.topics if t.name == topic]
        return described.error_code == ErrorCode.none

    with RawClient(proxy.bootstrap) as raw:
        login(raw, "payments")
        assert visible(raw)
        login(raw, "audit")  # the first re-authentication may come at once
        assert not visible(raw)
