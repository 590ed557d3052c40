"""OAUTHBEARER keys from the identity provider's JWKS URL (--sasl-oauthbearer-jwks-endpoint-url):
a local HTTPS IdP (tests/fixtures/idp.py) rotates its keys while aclgate runs, and clients
signed with the new key log in without a restart; a token with an unknown key id makes the
proxy fetch the keys again exactly once (rate limited), the login waiting meanwhile without
blocking anyone else; an IdP that is down leaves the last good keys in force."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from aclgate.proxy.config import ConfigError
from aclgate.proxy.listen.server import ProxyServer
from aclgate.proxy.security.jwks import JwksFetchError
from tests.fixtures.idp import AUDIENCE, ISSUER, IdentityProvider
from tests.fixtures.proxy import make_config
from tests.fixtures.rawclient import RawClient
from tests.listeners.util import confluent_errors, sasl_login, unique, wait_until

SUCCESS = {"result": "success", "trigger": "unknown_kid"}


@pytest.fixture
def idp(tmp_path):
    provider = IdentityProvider(tmp_path)
    yield provider
    provider.close()


def oauth_listener(idp: IdentityProvider, **extra) -> dict:
    return {
        "listener_security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanisms": "OAUTHBEARER",
        "sasl_oauthbearer_jwks_endpoint_url": idp.jwks_url,
        "sasl_oauthbearer_ssl_cafile": idp.ca,
        "sasl_oauthbearer_expected_audience": [AUDIENCE],
        "sasl_oauthbearer_expected_issuer": ISSUER,
        # one refresh for unknown key ids per minute: the whole test runs inside one window
        "sasl_oauthbearer_jwks_endpoint_retry_backoff_max_ms": 60_000,
        **extra,
    }


def login(proxy, token: str) -> int:
    """A raw SASL/OAUTHBEARER login; its error code (0: authenticated)."""
    with RawClient(proxy.bootstrap, timeout=15) as raw:
        return int(sasl_login(raw, "OAUTHBEARER", "", token).error_code)


def confluent(proxy, token_cb) -> dict:
    return {
        "bootstrap.servers": proxy.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": lambda _config: (token_cb(), time.time() + 3600),
    }


def produce_and_consume(cfg: dict, topic: str, value: bytes) -> None:
    producer = Producer({**cfg, "acks": "all"})
    delivered: list = []
    producer.produce(topic, value, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(15) == 0 and delivered == [None]
    # assign, not subscribe: a group join costs seconds
    consumer = Consumer({**cfg, "group.id": unique("g"), "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for msg in consumer.consume(10, 0.5):
                assert msg.error() is None, msg.error()
                if msg.value() == value:
                    return
        raise AssertionError(f"{value!r} not consumed from {topic}")
    finally:
        consumer.close()


def test_clients_with_rotated_keys_keep_working_without_restart(tansu, proxy_factory, idp):
    """confluent-kafka through aclgate while the IdP rotates from k1 to k2 and retires k1:
    the first client with a k2 token triggers one JWKS fetch, waits for it, and produces and
    consumes; aclgate was never restarted."""
    topic = unique("rotate")
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    proxy = proxy_factory(tansu.bootstrap, **oauth_listener(idp))
    assert idp.count("jwks") == 1  # fetched at start
    assert proxy.metric("aclgate_jwks_keys") == 1

    produce_and_consume(confluent(proxy, lambda: idp.sign("alice")), topic, b"signed by k1")

    idp.rotate("k2")
    idp.retire("k1")
    produce_and_consume(confluent(proxy, lambda: idp.sign("alice")), topic, b"signed by k2")
    assert idp.count("jwks") == 2  # exactly one fetch for the new key id
    assert proxy.metric("aclgate_jwks_refreshes_total", SUCCESS) == 1
    assert proxy.metric("aclgate_jwks_keys") == 1

    # k1 is retired at the IdP, so the proxy no longer accepts it either (no more fetches)
    errors = confluent_errors(confluent(proxy, lambda: idp.sign("alice", kid="k1")))
    assert errors and "invalid_token" in str(errors[0])
    assert idp.count("jwks") == 2


def test_unknown_key_ids_trigger_one_rate_limited_fetch(tansu, proxy_factory, idp):
    """Ten logins with made-up key ids: one fetch (the first waits for it), every login
    refused; a real new key within the same minute is not fetched again either."""
    proxy = proxy_factory(tansu.bootstrap, **oauth_listener(idp))
    assert login(proxy, idp.sign("alice")) == 0
    for i in range(10):
        idp.keys[f"fake{i}"] = idp.keys["k1"]  # signed by a real key, named by no JWKS
        assert login(proxy, idp.sign("mallory", kid=f"fake{i}")) == 58  # SASL_AUTHENTICATION_FAILED
    assert idp.count("jwks") == 2
    assert proxy.metric("aclgate_jwks_refreshes_total", SUCCESS) == 1
    idp.rotate("k2")  # inside the rate-limit window: refused until the scheduled refresh
    assert login(proxy, idp.sign("alice", kid="k2")) == 58
    assert idp.count("jwks") == 2


def test_a_login_waiting_for_the_jwks_blocks_nobody(tansu, proxy_factory, idp):
    """The IdP takes 2 s to answer: the login with the new key id waits for it (and then
    succeeds), while a login with a known key is answered at once meanwhile."""
    proxy = proxy_factory(tansu.bootstrap, **oauth_listener(idp))
    idp.rotate("k2")
    idp.jwks_delay = 2.0
    waiting: dict[str, float] = {}

    def slow_login() -> None:
        started = time.monotonic()
        waiting["code"] = login(proxy, idp.sign("bob", kid="k2"))
        waiting["took"] = time.monotonic() - started

    thread = threading.Thread(target=slow_login)
    thread.start()
    wait_until(lambda: idp.count("jwks") == 2, timeout=5)  # the refresh is under way
    started = time.monotonic()
    assert login(proxy, idp.sign("alice", kid="k1")) == 0
    fast = time.monotonic() - started
    assert "code" not in waiting, "the waiting login was decided before the JWKS came"
    thread.join(10)
    assert waiting["code"] == 0 and waiting["took"] >= 1.9, waiting
    assert fast < 1.0, f"a login with a known key took {fast:.2f} s during the fetch"


def test_idp_down_keeps_the_last_keys(tansu, proxy_factory, idp, caplog):
    """Scheduled refreshes fail (HTTP 503): logged, counted, retried; logins with the keys
    fetched before keep working; a token with an unknown key id waits for one failed fetch
    and is refused; when the IdP is back the keys are fetched again."""
    caplog.set_level(logging.WARNING, logger="aclgate.jwks")
    proxy = proxy_factory(
        tansu.bootstrap,
        **oauth_listener(
            idp,
            sasl_oauthbearer_jwks_endpoint_refresh_ms=200,
            sasl_oauthbearer_jwks_endpoint_retry_backoff_ms=50,
        ),
    )
    idp.jwks_status = 503
    failures = {"result": "failure", "trigger": "scheduled"}
    wait_until(lambda: proxy.metric("aclgate_jwks_refreshes_total", failures) >= 1, timeout=5)
    wait_until(
        lambda: proxy.metric("aclgate_jwks_refreshes_total", {**failures, "trigger": "retry"}) >= 1,
        timeout=5,
    )
    assert login(proxy, idp.sign("alice")) == 0  # k1 still in force
    assert proxy.metric("aclgate_jwks_keys") == 1
    assert any("keeping the 1 key(s)" in r.getMessage() for r in caplog.records)

    idp.rotate("k2")

    def failed_fetches() -> float:
        return sum(
            proxy.metric("aclgate_jwks_refreshes_total", {"result": "failure", "trigger": t})
            for t in ("start", "scheduled", "retry", "unknown_kid")
        )

    # the login waits for a fetch (its own, or a retry already under way: then it joins it),
    # which fails, and is refused with the keys there are
    before = failed_fetches()
    assert login(proxy, idp.sign("alice", kid="k2")) == 58
    assert failed_fetches() >= before + 1

    idp.jwks_status = 200
    wait_until(lambda: proxy.metric("aclgate_jwks_keys") == 2, timeout=10)
    assert login(proxy, idp.sign("alice", kid="k2")) == 0


def test_oidc_discovery(tansu, proxy_factory, idp):
    """--sasl-oauthbearer-oidc-discovery-url: the JWKS URL is the document's jwks_uri."""
    cfg = oauth_listener(idp, sasl_oauthbearer_oidc_discovery_url=idp.discovery_url)
    del cfg["sasl_oauthbearer_jwks_endpoint_url"]
    proxy = proxy_factory(tansu.bootstrap, **cfg)
    assert (idp.count("discovery"), idp.count("jwks")) == (1, 1)
    assert login(proxy, idp.sign("alice")) == 0


def test_no_keys_at_start_no_start(tansu, idp):
    """Like Kafka's broker, aclgate does not start without the keys: retried for
    retry_backoff_max, then JwksFetchError (an OSError: `aclgate serve` says "cannot start")."""
    idp.jwks_status = 500
    server = ProxyServer(
        make_config(
            tansu.bootstrap,
            **oauth_listener(idp, sasl_oauthbearer_jwks_endpoint_retry_backoff_max_ms=500),
        )
    )

    async def start() -> None:
        try:
            await server.start()
        finally:
            await server.close()

    started = time.monotonic()
    with pytest.raises(JwksFetchError, match="HTTP 500"):
        asyncio.run(start())
    assert time.monotonic() - started < 5
    assert idp.count("jwks") >= 3  # retried with backoff (100, 200 ms...)
    assert isinstance(JwksFetchError("x"), OSError)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"sasl_oauthbearer_jwks_endpoint_url": "http://idp/jwks"}, "https://"),
        ({"sasl_oauthbearer_jwks_file": "/dev/null"}, "needs one of"),
        ({"sasl_oauthbearer_jwks_endpoint_url": None}, "needs one of"),
        ({"sasl_oauthbearer_jwks_endpoint_refresh_ms": 0}, "must be positive"),
    ],
)
def test_config_errors(idp, extra, message):
    with pytest.raises(ConfigError, match=message):
        make_config("127.0.0.1:9", **{**oauth_listener(idp), **extra})
