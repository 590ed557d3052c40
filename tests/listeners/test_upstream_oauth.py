"""The proxy's own login to a cluster that only accepts OAUTHBEARER, and upstream credentials
and certificates that change while it runs.

The OAuth cluster is aclgate itself (an OAUTHBEARER listener verifying tokens with the test
IdP's JWKS, in front of tansu, its ACLs open to the proxy's client id only), fronted by an
aclgate that logs in with the client credentials grant against the same IdP: a real
end-to-end OAuth login, without configuring Apache Kafka's OAuth listener.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from aclgate.protocol.identity.sasl.client import OAuthBearerSaslClient
from aclgate.protocol.identity.sasl.jwt import Jwks, JwtValidator
from aclgate.protocol.identity.sasl.oauthbearer import OAuthBearerSaslServer
from aclgate.proxy.httpclient import https_context
from aclgate.proxy.security.oauthtoken import ClientCredentialsToken, SecretFile, TokenEndpointError
from tests.fixtures.idp import IdentityProvider
from tests.fixtures.rawclient import RawClient
from tests.listeners.test_jwks_endpoint import oauth_listener
from tests.listeners.test_upstream_sasl import accept_plain
from tests.listeners.util import acl, metadata_request, unique, wait_until, write_acls

CLIENT_ID = "aclgate-svc"


@pytest.fixture
def idp(tmp_path):
    provider = IdentityProvider(tmp_path)
    provider.clients[CLIENT_ID] = "first-secret"
    yield provider
    provider.close()


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "client-secret"
    path.write_text("first-secret\n")
    return path


def upstream_oauth(idp: IdentityProvider, secret_file, **extra) -> dict:
    return {
        "upstream_security_protocol": "SASL_PLAINTEXT",
        "upstream_sasl_mechanism": "OAUTHBEARER",
        "upstream_sasl_oauthbearer_token_endpoint_url": idp.token_url,
        "upstream_sasl_oauthbearer_client_id": CLIENT_ID,
        "upstream_sasl_oauthbearer_client_secret_file": secret_file,
        "upstream_sasl_oauthbearer_ssl_cafile": idp.ca,
        **extra,
    }


def test_proxy_logs_in_to_an_oauth_cluster(tansu, proxy_factory, idp, secret_file, tmp_path):
    """confluent-kafka -> aclgate (PLAINTEXT) -> OAUTHBEARER login -> aclgate (OAuth only,
    ACLs for User:aclgate-svc only) -> tansu: produce and consume; one token for every
    upstream connection."""
    topic = unique("oauth")
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    acls = write_acls(
        tmp_path / "acls.json",
        acl(f"User:{CLIENT_ID}", "ALL", topic),
        acl(f"User:{CLIENT_ID}", "ALL", "*", rtype="GROUP"),
    )
    cluster = proxy_factory(
        tansu.bootstrap, **oauth_listener(idp), allow_everyone_if_no_acl_found=False, acl_file=acls
    )
    front = proxy_factory(
        cluster.bootstrap,
        **upstream_oauth(idp, secret_file, upstream_sasl_oauthbearer_scope="kafka"),
    )
    cfg = {"bootstrap.servers": front.bootstrap}
    producer = Producer({**cfg, "acks": "all"})
    reports: list = []
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: reports.append(e))
    assert producer.flush(15) == 0 and reports == [None] * 5
    consumer = Consumer({**cfg, "group.id": unique("g"), "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(values) < 5 and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(5, 0.5) if m.error() is None]
    consumer.close()
    assert sorted(values) == [f"v{i}".encode() for i in range(5)]
    assert idp.count("token") == 1  # cached: the control connection and every client's
    assert idp.token_requests[0] == {"grant_type": ["client_credentials"], "scope": ["kafka"]}
    assert cluster.metric("aclgate_connections_total", {"listener": "broker"}) >= 2

    # the cluster's ACLs are for the proxy's client id: a principal that is not it is denied
    idp.clients["intruder"] = "first-secret"
    other = proxy_factory(
        cluster.bootstrap,
        **upstream_oauth(idp, secret_file, upstream_sasl_oauthbearer_client_id="intruder"),
    )
    with RawClient(other.bootstrap) as raw:
        answer = raw.request(metadata_request(topic))
    assert answer.topics[0].error_code == ErrorCode.topic_authorization_failed


def test_token_is_renewed_after_the_refresh_window(tansu, proxy_factory, idp, secret_file):
    """Tokens living 3 s: renewed at 80% of their life by the next upstream login, so new
    client connections keep working past the first token's expiry."""
    idp.token_lifetime = 3
    cluster = proxy_factory(tansu.bootstrap, **oauth_listener(idp))
    front = proxy_factory(cluster.bootstrap, **upstream_oauth(idp, secret_file))
    first = idp.count("token")
    assert first == 1
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        with RawClient(front.bootstrap) as raw:  # a new upstream connection each time
            assert raw.request(metadata_request()).brokers
        time.sleep(0.2)
    assert 2 <= idp.count("token") <= 4  # one per 2.4 s at most, never one per connection


def run(coro):
    return asyncio.run(coro)


def provider(idp, secret_file, clock) -> ClientCredentialsToken:
    return ClientCredentialsToken(
        idp.token_url,
        CLIENT_ID,
        SecretFile(secret_file),
        ssl_context=https_context(idp.ca),
        timeout=5,
        clock=clock,
    )


def test_token_cached_until_80_percent_then_renewed(idp, secret_file):
    idp.token_lifetime = 100
    offset = [0.0]
    tokens = provider(idp, secret_file, lambda: time.time() + offset[0])

    async def scenario() -> list[str]:
        got = [await tokens.token()]
        offset[0] = 78  # iat is whole seconds: 80 s after it is at least 79 s from now
        got.append(await tokens.token())
        offset[0] = 81
        got.append(await tokens.token())
        return got

    first, cached, renewed = run(scenario())
    assert first == cached != renewed
    assert idp.count("token") == 2


def test_rotated_client_secret_is_used_without_restart(idp, secret_file, caplog):
    """The IdP rotates the client secret and the file is updated: the next token fetch uses
    the new one. While the endpoint refuses, the current token serves until it expires, and
    the endpoint is not asked at every login (backoff)."""
    idp.token_lifetime = 100
    offset = [0.0]
    tokens = provider(idp, secret_file, lambda: time.time() + offset[0])
    caplog.set_level(logging.WARNING, logger="aclgate.oauth")

    async def scenario() -> None:
        first = await tokens.token()
        idp.clients[CLIENT_ID] = "second-secret"  # rotated at the IdP, not yet in the file
        offset[0] = 85
        assert await tokens.token() == first  # refused (401): the current token is valid
        assert await tokens.token() == first  # within the backoff: not asked again
        assert idp.count("token") == 2
        assert any("using the current token" in r.getMessage() for r in caplog.records)
        offset[0] = 150  # expired, and the endpoint still refuses the old secret
        await asyncio.sleep(0.15)  # past the backoff
        with pytest.raises(TokenEndpointError, match="HTTP 401: invalid_client"):
            await tokens.token()
        assert idp.count("token") == 3
        secret_file.write_text("second-secret\n")
        offset[0] = 85
        await asyncio.sleep(0.3)
        renewed = await tokens.token()
        assert renewed != first and idp.count("token") == 4

    run(scenario())


def test_oauthbearer_client_against_our_server(idp):
    """protocol/identity/sasl/client.py's OAUTHBEARER client with protocol/sasl's server: success, and
    RFC 7628's error round (JSON challenge, ^A, failure)."""
    validator = JwtValidator(Jwks.from_json(__import__("json").dumps(idp.jwks())))
    now_ms = int(time.time() * 1000)
    for token, ok in ((idp.sign("svc"), True), (idp.sign("svc", lifetime=-100), False)):
        client, server = (
            OAuthBearerSaslClient(token),
            OAuthBearerSaslServer(validator, lambda: now_ms),
        )
        reply = client.evaluate_challenge(server.evaluate(client.initial_response()))
        if ok:
            assert reply is None and client.complete and server.authorization_id == "svc"
        else:
            assert reply == b"\x01" and not client.complete
            with pytest.raises(Exception, match="invalid_token"):
                server.evaluate(reply)


# ------------------------------------------------------------ reloading upstream credentials


def test_upstream_password_file_reloads(scripted, proxy_factory, tmp_path):
    """PLAIN to the cluster: a new password in the file is sent by the next upstream login."""
    for node in scripted.nodes:
        node.script[17] = node.script[36] = accept_plain
    secret = tmp_path / "password"
    secret.write_text("old-password\n")
    proxy = proxy_factory(
        scripted.bootstrap,
        upstream_security_protocol="SASL_PLAINTEXT",
        upstream_sasl_mechanism="PLAIN",
        upstream_sasl_username="svc",
        upstream_sasl_password_file=secret,
    )
    node = scripted.nodes[0]
    with RawClient(proxy.bootstrap) as raw:
        raw.request(metadata_request(unique("t")))
    assert node.tokens[-1] == b"\x00svc\x00old-password"
    secret.write_text("the-new-password\n")
    with RawClient(proxy.bootstrap) as raw:
        raw.request(metadata_request(unique("t")))
    assert node.tokens[-1] == b"\x00svc\x00the-new-password"


def test_upstream_ca_file_reloads(tansu, proxy_factory, certs, tmp_path):
    """SSL to the cluster (an aclgate SSL listener): the CA file first holds a CA that did not
    sign the cluster's certificate, so upstream connections fail; once it holds the right
    one, the next client connection works, without a restart."""
    cluster = proxy_factory(tansu.bootstrap, **certs.listener())
    cafile = tmp_path / "upstream-ca.pem"
    cafile.write_bytes((certs.other / "ca.crt").read_bytes())
    front = proxy_factory(
        cluster.bootstrap, upstream_security_protocol="SSL", upstream_ssl_cafile=cafile
    )

    def works() -> bool:
        try:
            with RawClient(front.bootstrap) as raw:
                return bool(raw.request(metadata_request()).brokers)
        except (AssertionError, OSError):  # closed: the upstream TLS handshake failed
            return False

    assert not works()
    cafile.write_bytes(certs.ca.read_bytes())
    wait_until(works, timeout=10)
    assert front.server.connector.security.tls.reloads == 1
