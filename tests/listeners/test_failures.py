"""Authentication failures: the client gets Kafka's error, the connection is closed after
Kafka's short delay, and nothing reaches the cluster (no upstream connection, no request)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError
from kio.schema.errors import ErrorCode

from tests.fixtures.rawclient import RawClient
from tests.listeners.conftest import sasl_listener
from tests.listeners.util import (
    AUDIENCE,
    ISSUER,
    confluent_errors,
    password,
    sasl_login,
    sign_jwt,
)

INVALID_CREDENTIALS = (
    "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
)
PLAIN_INVALID = "Authentication failed: Invalid username or password"

#: name -> (mechanism, user, secret, Kafka's SaslAuthenticate error message)
FAILURES = {
    "wrong-password-plain": ("PLAIN", "alice", "wrong", PLAIN_INVALID),
    "unknown-user-plain": ("PLAIN", "mallory", "x", PLAIN_INVALID),
    "wrong-password-scram": (
        "SCRAM-SHA-512",
        "alice",
        "wrong",
        INVALID_CREDENTIALS.format("SCRAM-SHA-512"),
    ),
    "unknown-user-scram": (
        "SCRAM-SHA-512",
        "mallory",
        "x",
        INVALID_CREDENTIALS.format("SCRAM-SHA-512"),
    ),
    "expired-token": (
        "OAUTHBEARER",
        "alice",
        sign_jwt("alice", lifetime=-600),
        '{"status":"invalid_token"}',
    ),
}
DELAY_MS = 300


class Watched:
    """A proxy in front of the scripted cluster, counting the upstream connections it opens
    for clients (the proxy's own control connection is not counted)."""

    def __init__(self, proxy, cluster):
        self.proxy = proxy
        self.node = cluster.nodes[0]
        self.opened: list[tuple[str, int]] = []
        connector = proxy.server.connector
        original = connector.open

        async def counting_open(host, port, factory):
            self.opened.append((host, port))
            return await original(host, port, factory)

        connector.open = counting_open
        self.requests_before = len(self.node.requests)

    def assert_nothing_reached_the_cluster(self) -> None:
        assert self.opened == []
        assert self.node.requests[self.requests_before :] == []


@pytest.fixture
def watched(scripted, proxy_factory, users_file, jwks_file):
    proxy = proxy_factory(
        scripted.bootstrap,
        **sasl_listener(
            users_file,
            mechanisms="SCRAM-SHA-512,PLAIN,OAUTHBEARER",
            sasl_oauthbearer_jwks_file=jwks_file,
            sasl_oauthbearer_expected_audience=[AUDIENCE],
            sasl_oauthbearer_expected_issuer=ISSUER,
            connection_failed_authentication_delay_ms=DELAY_MS,
        ),
    )
    return Watched(proxy, scripted)


@pytest.mark.parametrize("case", FAILURES)
def test_raw_failure_gets_kafkas_error_after_the_delay_then_a_close(watched, case):
    """As in Kafka, the answer itself waits connection.failed.authentication.delay.ms (not
    only the close): one guess per delay and connection, whatever the mechanism."""
    mechanism, user, secret, message = FAILURES[case]
    waits: list[float] = []
    with RawClient(watched.proxy.bootstrap) as raw:
        answer = sasl_login(raw, mechanism, user, secret, waits=waits)
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message == message
        assert waits[-1] >= DELAY_MS / 1000, waits
        assert all(w < DELAY_MS / 1000 for w in waits[:-1]), waits  # only the refusal waits
        assert raw.is_closed_by_peer(timeout=DELAY_MS / 1000)  # right after the answer
    watched.assert_nothing_reached_the_cluster()
    assert watched.proxy.metric("aclgate_errors_total", {"kind": "authentication_failed"}) == 1
    labels = {"listener": "bootstrap", "mechanism": mechanism}
    assert watched.proxy.metric("aclgate_authentication_failures_total", labels) == 1
    assert watched.proxy.metric("aclgate_authentication_successes_total", labels) == 0


def test_raw_wrong_mechanism_is_refused_with_the_enabled_list(watched):
    with RawClient(watched.proxy.bootstrap) as raw:
        answer = sasl_login(raw, "SCRAM-SHA-256", "alice", password("alice"))
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(answer.mechanisms) == {"SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"}
        assert raw.is_closed_by_peer(timeout=5)
    watched.assert_nothing_reached_the_cluster()


@pytest.mark.parametrize("case", [*FAILURES, "wrong-mechanism"])
def test_confluent_kafka_sees_an_authentication_error(watched, case):
    if case == "wrong-mechanism":
        mechanism, user, secret, message = (
            "SCRAM-SHA-256",
            "alice",
            password("alice"),
            "Unsupported SASL mechanism",
        )
    else:
        mechanism, user, secret, message = FAILURES[case]
    cfg = {
        "bootstrap.servers": watched.proxy.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
    }
    if mechanism == "OAUTHBEARER":
        cfg["oauth_cb"] = lambda _config: (secret, time.time() + 3600)
    else:
        cfg.update({"sasl.username": user, "sasl.password": secret})
    errors = confluent_errors(cfg)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert message in errors[0].str(), errors[0].str()
    watched.assert_nothing_reached_the_cluster()


KAFKA_CASES = {
    "wrong-password-plain": ("PLAIN", "alice", "wrong"),
    "unknown-user-plain": ("PLAIN", "mallory", "x"),
    "wrong-password-scram": ("SCRAM-SHA-512", "alice", "wrong"),
    "unknown-user-scram": ("SCRAM-SHA-256", "mallory", "x"),
    "wrong-mechanism": ("OAUTHBEARER", "alice", "x"),
}


def outcome(address: str, mechanism: str, user: str, secret: str) -> tuple:
    with RawClient(address, timeout=10) as raw:
        answer = sasl_login(raw, mechanism, user, secret)
        closed = raw.is_closed_by_peer(timeout=5)
    mechanisms = set(getattr(answer, "mechanisms", ()))
    return answer.error_code, getattr(answer, "error_message", None), mechanisms, closed


@pytest.mark.kafka
def test_same_answers_as_apache_kafka(kafka_secure, scripted, proxy_factory, tmp_path):
    """Each failure, sent byte for byte to Apache Kafka and to the proxy (the same users and
    passwords, the same mechanisms): the same error code, message and closed connection."""
    from aclgate.proxy.security.usersfile import add_user

    lst = kafka_secure.listener("SASL_PLAINTEXT")
    users = tmp_path / "users.json"
    for user, secret in lst.users.items():
        add_user(users, user, secret, lst.mechanisms)
    proxy = proxy_factory(
        scripted.bootstrap,
        **sasl_listener(users, mechanisms=",".join(lst.mechanisms)),
    )
    for case, (mechanism, user, secret) in KAFKA_CASES.items():
        kafka = outcome(lst.bootstrap, mechanism, user, secret)
        ours = outcome(proxy.bootstrap, mechanism, user, secret)
        assert ours == kafka, case
        assert kafka[0] != ErrorCode.none and kafka[3], case
