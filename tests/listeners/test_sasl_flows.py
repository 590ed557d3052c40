"""SASL flows on the wire: the legacy SaslHandshake v0 flow (bare tokens), and KIP-368
re-authentication (same principal keeps working, another principal is refused, a request
after the session expired closes the connection), also driven by real clients."""

from __future__ import annotations

import base64
import json
import struct
import time

import pytest
from kio.schema.errors import ErrorCode

from aclgate.protocol.identity.sasl.client import create_client
from tests.fixtures.rawclient import RawClient, request_entity
from tests.listeners.conftest import sasl_listener
from tests.listeners.util import (
    AUDIENCE,
    ISSUER,
    SASL_HANDSHAKE,
    metadata_request,
    password,
    sasl_login,
    sign_jwt,
    unique,
)

_SIZE = struct.Struct(">i")


def bare(token: bytes) -> bytes:
    return _SIZE.pack(len(token)) + token


def v0_login(raw: RawClient, mechanism: str, user: str, secret: str) -> bool:
    """SaslHandshake v0, then bare length-prefixed tokens; True if the exchange completed."""
    handshake = raw.request(request_entity(SASL_HANDSHAKE, 0, mechanism=mechanism))
    assert handshake.error_code == ErrorCode.none, handshake
    client = create_client(mechanism, user, secret)
    token = client.initial_response()
    while True:
        raw.send_raw(bare(token))
        frame = raw.recv_frame()
        if frame is None:
            return False
        token = client.evaluate_challenge(frame[4:])
        if client.complete:
            return True


def metadata_works(raw: RawClient, topic: str) -> bool:
    response = raw.request(metadata_request(topic))
    return [t.name for t in response.topics] == [topic]


@pytest.fixture
def sasl_proxy(scripted, proxy_factory, users_file):
    def start(**extra):
        return proxy_factory(
            scripted.bootstrap,
            **sasl_listener(users_file, mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", **extra),
        )

    return start


# --------------------------------------------------------------------- SaslHandshake v0


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_v0_handshake_with_bare_tokens(sasl_proxy, scripted, mechanism):
    proxy = sasl_proxy()
    topic = unique("v0")
    with RawClient(proxy.bootstrap) as raw:
        assert v0_login(raw, mechanism, "alice", password("alice"))
        assert metadata_works(raw, topic)
    # the Metadata request reached the cluster, on the connection opened after the login
    assert any(
        h.api_key == 3 and [t.name for t in r.topics or ()] == [topic]
        for h, r in scripted.nodes[0].requests
    )


def test_v0_handshake_wrong_password_closes_without_a_token(sasl_proxy, scripted):
    proxy = sasl_proxy(connection_failed_authentication_delay_ms=50)
    before = len(scripted.nodes[0].requests)
    with RawClient(proxy.bootstrap) as raw:
        assert not v0_login(raw, "PLAIN", "alice", "wrong")
    assert scripted.nodes[0].requests[before:] == []


@pytest.mark.parametrize("version", [0, 1])
def test_v0_handshake_cannot_reauthenticate(sasl_proxy, version):
    """Without a session lifetime a later SaslHandshake is answered ILLEGAL_SASL_STATE and
    the connection goes on, as Kafka's request handler answers it (Kafka re-authenticates
    only sessions that expire; with a lifetime, a v0 session re-authenticates too:
    tests/listeners/test_sasl_edges_kafka.py)."""
    proxy = sasl_proxy()
    with RawClient(proxy.bootstrap) as raw:
        assert v0_login(raw, "PLAIN", "alice", password("alice"))
        answer = raw.request(request_entity(SASL_HANDSHAKE, version, mechanism="PLAIN"))
        assert answer.error_code == ErrorCode.illegal_sasl_state and answer.mechanisms == ()
        assert metadata_works(raw, unique("t"))


# ---------------------------------------------------------------------- KIP-368 (raw)

LIFETIME_MS = 3000


def lifetime_ms(answer) -> int:
    return int(answer.session_lifetime.total_seconds() * 1000)


def test_reauthentication_with_the_same_principal_keeps_working(sasl_proxy):
    proxy = sasl_proxy(connections_max_reauth_ms=LIFETIME_MS)
    topic = unique("reauth")
    with RawClient(proxy.bootstrap) as raw:
        answer = sasl_login(raw, "SCRAM-SHA-512", "alice", password("alice"))
        assert answer.error_code == ErrorCode.none and lifetime_ms(answer) == LIFETIME_MS
        assert metadata_works(raw, topic)
        for _ in range(3):  # past the first lifetime several times over
            time.sleep(LIFETIME_MS / 1000 * 0.5)  # a wide margin for a loaded machine
            again = sasl_login(raw, "SCRAM-SHA-512", "alice", password("alice"))
            assert again.error_code == ErrorCode.none and lifetime_ms(again) == LIFETIME_MS
            assert metadata_works(raw, topic)


def test_reauthentication_as_another_user_is_refused(sasl_proxy):
    proxy = sasl_proxy(
        connections_max_reauth_ms=60_000, connection_failed_authentication_delay_ms=50
    )
    with RawClient(proxy.bootstrap) as raw:
        assert sasl_login(raw, "PLAIN", "alice", password("alice")).error_code == ErrorCode.none
        assert metadata_works(raw, unique("t"))
        answer = sasl_login(raw, "PLAIN", "bob", password("bob"))
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message == (
            "Cannot change principals during re-authentication from User.alice: User.bob"
        )
        assert raw.is_closed_by_peer()


def test_reauthentication_with_another_mechanism_is_refused(sasl_proxy):
    proxy = sasl_proxy(connections_max_reauth_ms=60_000)
    with RawClient(proxy.bootstrap) as raw:
        assert sasl_login(raw, "PLAIN", "alice", password("alice")).error_code == ErrorCode.none
        answer = raw.request(request_entity(SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512"))
        assert answer.error_code == ErrorCode.illegal_sasl_state
        assert raw.is_closed_by_peer()


def test_request_after_expiry_closes_the_connection(sasl_proxy):
    proxy = sasl_proxy(connections_max_reauth_ms=1000)
    with RawClient(proxy.bootstrap) as raw:
        answer = sasl_login(raw, "PLAIN", "alice", password("alice"))
        assert lifetime_ms(answer) == 1000
        assert metadata_works(raw, unique("t"))
        time.sleep(1.3)
        raw.send(metadata_request(unique("t")))
        assert raw.recv_frame() is None  # closed, no answer


# ---------------------------------------------------------------- KIP-368 (real clients)


def count_exchanges(proxy) -> list[str]:
    """Record each SASL exchange the proxy starts (mechanism names)."""
    security = proxy.server.security
    seen: list[str] = []
    original = security.new_sasl_server

    def counting(mechanism):
        seen.append(mechanism)
        return original(mechanism)

    proxy.server.sasl_config.new_server = counting
    return seen


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_real_clients_reauthenticate_and_keep_producing(tansu, proxy_factory, users_file, client):
    proxy = proxy_factory(
        tansu.bootstrap,
        **sasl_listener(users_file, mechanisms="SCRAM-SHA-512", connections_max_reauth_ms=2500),
    )
    exchanges = count_exchanges(proxy)
    topic = unique("reauth")
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    sent = 0
    if client == "confluent-kafka":
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "alice",
                "sasl.password": password("alice"),
            }
        )
        deadline = time.monotonic() + 5.5
        while time.monotonic() < deadline:
            producer.produce(topic, b"x")
            sent += 1
            assert producer.flush(10) == 0
            time.sleep(0.1)
        del producer
    else:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=proxy.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="alice",
            sasl_plain_password=password("alice"),
        )
        deadline = time.monotonic() + 5.5
        while time.monotonic() < deadline:
            producer.send(topic, b"x").get(10)
            sent += 1
            time.sleep(0.1)
        producer.close()
    connections = proxy.metric(
        "aclgate_connections_total", {"listener": "bootstrap"}
    ) + proxy.metric("aclgate_connections_total", {"listener": "broker"})
    # more exchanges than connections: the clients re-authenticated on open connections
    assert len(exchanges) > connections, (exchanges, connections)
    assert proxy.metric("aclgate_errors_total", {"kind": "sasl_state"}) == 0
    assert _end_offset(tansu.bootstrap, topic) == sent


def test_short_lived_oauth_tokens_are_refreshed_on_open_connections(
    tansu, proxy_factory, jwks_file
):
    """Without connections_max_reauth_ms the session ends when the token expires: the client
    is told so (session_lifetime_ms) and re-authenticates with a fresh token in time."""
    from confluent_kafka import Producer

    proxy = proxy_factory(
        tansu.bootstrap,
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms="OAUTHBEARER",
        sasl_oauthbearer_jwks_file=jwks_file,
        sasl_oauthbearer_expected_audience=[AUDIENCE],
        sasl_oauthbearer_expected_issuer=ISSUER,
        sasl_oauthbearer_clock_skew_seconds=0,
    )
    exchanges = count_exchanges(proxy)
    tokens: list[str] = []

    def oauth_cb(_config):
        tokens.append(sign_jwt("alice", lifetime=4))
        claims = json.loads(base64.urlsafe_b64decode(tokens[-1].split(".")[1] + "=="))
        return tokens[-1], claims["exp"]  # librdkafka refreshes at 80% of this

    producer = Producer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": oauth_cb,
        }
    )
    topic = unique("oauth")
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        producer.produce(topic, b"x")
        assert producer.flush(10) == 0
        time.sleep(0.1)
    assert len(tokens) >= 2  # refreshed
    connections = proxy.metric("aclgate_connections_total", {"listener": "bootstrap"})
    connections += proxy.metric("aclgate_connections_total", {"listener": "broker"})
    assert len(exchanges) > connections
    assert proxy.metric("aclgate_errors_total", {"kind": "sasl_state"}) == 0


def _end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1]
    finally:
        c.close()


def test_users_file_changes_apply_to_the_next_login(scripted, proxy_factory, tmp_path):
    """`aclgate users add/remove` while the proxy runs: the next login sees the change; an
    established session is not cut (as in Kafka, until it re-authenticates)."""
    from aclgate.proxy.security.usersfile import add_user, remove_user

    users = tmp_path / "users.json"
    add_user(users, "alice", password("alice"), ["SCRAM-SHA-512"])
    proxy = proxy_factory(scripted.bootstrap, **sasl_listener(users, mechanisms="SCRAM-SHA-512"))

    def login(user: str) -> ErrorCode:
        with RawClient(proxy.bootstrap) as raw:
            return sasl_login(raw, "SCRAM-SHA-512", user, password(user)).error_code

    assert login("dave") == ErrorCode.sasl_authentication_failed
    add_user(users, "dave", password("dave"), ["SCRAM-SHA-512"])
    assert login("dave") == ErrorCode.none
    with RawClient(proxy.bootstrap) as held:
        assert sasl_login(held, "SCRAM-SHA-512", "dave", password("dave")).error_code == 0
        remove_user(users, "dave")
        assert login("dave") == ErrorCode.sasl_authentication_failed
        assert metadata_works(held, unique("t"))
