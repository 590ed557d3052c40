"""SASL edge cases answered as Apache Kafka answers them (issue 20), checked against Kafka.

Each sequence of raw frames runs against a real Kafka SASL_PLAINTEXT listener (`kafka_secure`)
and against an aclgate SASL_PLAINTEXT listener in front of the same cluster; what comes back
(per frame: the correlation id, the error codes, the error message, or the close) must be the
same. Kafka's broker source is not at hand, so this table IS the specification of aclgate's
SASL state errors (docs/identity.md, "Authentication abuse").
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aclgate.protocol.codec import decode_response, encode_request
from aclgate.protocol.identity import saslgate
from aclgate.protocol.identity.saslgate import UNEXPECTED_ANSWERED_BYTES
from aclgate.proxy.listen.server import ProxyServer
from tests.fixtures.kafka import _cluster
from tests.fixtures.proxy import RunningProxy, make_config
from tests.fixtures.rawclient import RawClient, module, request_entity
from tests.kafka.cluster import KafkaCluster
from tests.listeners.conftest import sasl_listener

API_VERSIONS, METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 3, 17, 36
_SIZE = struct.Struct(">i")
#: alice's PLAIN token (the kafka_secure users and the listener tests' users file agree)
PLAIN_TOKEN = b"\0alice\0alice-secret"
#: Kafka closes a refused exchange after connection.failed.authentication.delay.ms (100 ms by
#: default, on both sides): a reply that takes longer than this is no reply.
REPLY_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Send:
    """One frame: a Kafka request (`api_key`), or with api_key None a bare token (v0 flow)."""

    api_key: int | None
    version: int = 0
    fields: tuple[tuple[str, Any], ...] = ()
    token: bytes = b""

    def encode(self, correlation_id: int) -> bytes:
        if self.api_key is None:
            return _SIZE.pack(len(self.token)) + self.token
        body = request_entity(self.api_key, self.version, **dict(self.fields))
        return encode_request(correlation_id, body, "edges")


def handshake(version: int = 1, mechanism: str = "PLAIN") -> Send:
    return Send(SASL_HANDSHAKE, version, (("mechanism", mechanism),))


def authenticate(version: int = 2, token: bytes = PLAIN_TOKEN) -> Send:
    return Send(SASL_AUTHENTICATE, version, (("auth_bytes", token),))


def metadata(version: int = 12) -> Send:
    topic = module(METADATA, version).MetadataRequestTopic(name="edges", topic_id=None)
    fields = (
        ("topics", (topic,)),
        ("allow_auto_topic_creation", False),
        ("include_topic_authorized_operations", False),
    )
    return Send(METADATA, version, fields)


def api_versions(version: int = 3) -> Send:
    fields = (
        (("client_software_name", "edges"), ("client_software_version", "1"))
        if version >= 3
        else ()
    )
    return Send(API_VERSIONS, version, fields)


def observe(address: str, steps: tuple[Send, ...]) -> list[tuple[Any, ...]]:
    """Send `steps` one at a time, reading each one's answer; then whether the connection is
    still open (an ApiVersions v0 probe, answered or closed on: no waiting on a quiet line)."""
    seen: list[tuple[Any, ...]] = []
    with RawClient(address, timeout=REPLY_TIMEOUT_S) as raw:
        for cid, step in enumerate((*steps, api_versions(0)), start=100):
            raw.send_raw(step.encode(cid))
            try:
                frame = raw.recv_frame()
            except TimeoutError:
                seen.append(("silent",))
                break
            if frame is None:
                seen.append(("closed",))
                break
            seen.append(_describe(step, frame))
    return seen


#: answer fields that are the proxy's own by design (its brokers' addresses, the API ranges it
#: announces), compared on neither side
OWN_FIELDS = frozenset(
    {
        "brokers",
        "cluster_id",
        "controller_id",
        "api_keys",
        "supported_features",
        "finalized_features",
        "finalized_features_epoch",
        "zk_migration_ready",
    }
)


def _describe(step: Send, frame: bytes) -> tuple[Any, ...]:
    """The correlation id and every field of the answer but OWN_FIELDS (mechanisms sorted:
    Kafka lists them in a hash set's order)."""
    if step.api_key is None:
        return ("token",)
    body = decode_response(frame, step.api_key, step.version)
    fields = {f.name: getattr(body, f.name) for f in dataclasses.fields(body)}
    fields["mechanisms"] = sorted(fields.get("mechanisms") or ())
    kept = {name: value for name, value in fields.items() if name not in OWN_FIELDS}
    return (_SIZE.unpack_from(frame, 4)[0], type(body).__name__, kept)


LOGIN = (handshake(1), authenticate(2))
V0_LOGIN = (handshake(0), Send(None, token=PLAIN_TOKEN))

#: name -> the frames a client sends (issue 20's list)
SEQUENCES: dict[str, tuple[Send, ...]] = {
    "metadata_first": (metadata(12),),
    "authenticate_first": (authenticate(2),),
    "handshake_v1_then_metadata": (handshake(1), metadata(12)),
    "handshake_v1_then_api_versions": (handshake(1), api_versions(3)),
    "handshake_v1_then_handshake": (handshake(1), handshake(1)),
    "authenticate_after_success": (*LOGIN, authenticate(2)),
    "handshake_v1_after_success": (*LOGIN, handshake(1)),
    "handshake_v0_after_success": (*LOGIN, handshake(0)),
    "handshake_v0_then_kafka_request": (handshake(0), metadata(12)),
    "handshake_v0_then_handshake": (handshake(0), handshake(1)),
    "handshake_v0_then_bare_token": (*V0_LOGIN, api_versions(3)),
    "v0_login_then_handshake": (*V0_LOGIN, handshake(1), api_versions(3)),
    "unsupported_mechanism": (handshake(1, "GSSAPI"),),
    "wrong_password": (handshake(1), authenticate(2, b"\0alice\0wrong")),
    "api_versions_handshake_authenticate": (api_versions(3), *LOGIN, metadata(12)),
}


#: with a session lifetime (connections.max.reauth.ms on both sides): KIP-368
REAUTH_SEQUENCES: dict[str, tuple[Send, ...]] = {
    "reauthentication": (*LOGIN, *LOGIN, api_versions(3)),
    "reauthentication_then_metadata": (*LOGIN, handshake(1), metadata(12)),
    "reauthentication_then_handshake": (*LOGIN, handshake(1), handshake(1)),
    "reauthentication_then_api_versions": (*LOGIN, handshake(1), api_versions(3)),
    # at most once a second (from the latest re-authentication's start): the third
    # handshake is answered 34 and the connection goes on
    "reauthentication_twice_within_a_second": (*LOGIN, *LOGIN, *LOGIN, api_versions(3)),
    # v0 sessions have the lifetime too (the client cannot be told)
    "v0_login_then_reauthentication": (*V0_LOGIN, *LOGIN, api_versions(3)),
    "v0_login_then_v0_reauthentication": (*V0_LOGIN, *V0_LOGIN, api_versions(3)),
    "v0_reauthentication_then_handshake": (*LOGIN, *V0_LOGIN, *LOGIN, api_versions(3)),
    # Kafka re-authenticates with a SaslHandshake v0 and bare tokens too
    "reauthentication_v0": (*LOGIN, handshake(0), Send(None, token=PLAIN_TOKEN), metadata(12)),
    "reauthentication_v0_then_kafka_request": (*LOGIN, handshake(0), metadata(12)),
    "reauthentication_v0_as_another_user": (
        *LOGIN,
        handshake(0),
        Send(None, token=b"\0bob\0bob-secret"),
    ),
}
LIFETIME_MS = 60_000


def _proxy_for(cluster: KafkaCluster, users_file: Path, **extra: Any) -> RunningProxy:
    """aclgate with the cluster's SASL mechanisms, in front of its INTERNAL listener."""
    listener = sasl_listener(users_file, mechanisms=",".join(cluster.mechanisms), **extra)
    return RunningProxy(ProxyServer(make_config(cluster.internal.bootstrap, **listener)))


@pytest.fixture(scope="module")
def kafka_sasl_reauth(tmp_path_factory):
    """A Kafka whose SASL sessions have a lifetime (kafka_secure's have none)."""
    yield from _cluster(
        "kafka_sasl_reauth",
        tmp_path_factory,
        listeners=("SASL_PLAINTEXT",),
        mechanisms=("PLAIN",),
        broker_config={"connections.max.reauth.ms": LIFETIME_MS},
    )


@pytest.fixture(scope="module")
def pairs(request, users_file) -> Iterator[Callable[[bool], tuple[str, str]]]:
    """lifetime? -> (Kafka's SASL_PLAINTEXT listener, aclgate's in front of that Kafka);
    each cluster and proxy started on first use."""
    started: dict[bool, tuple[str, str]] = {}
    proxies: list[RunningProxy] = []

    def pair(lifetime: bool) -> tuple[str, str]:
        if lifetime not in started:
            name = "kafka_sasl_reauth" if lifetime else "kafka_secure"
            cluster = request.getfixturevalue(name)
            extra = {"connections_max_reauth_ms": LIFETIME_MS} if lifetime else {}
            proxies.append(_proxy_for(cluster, users_file, **extra))
            kafka = cluster.listener("SASL_PLAINTEXT").bootstrap
            started[lifetime] = (kafka, proxies[-1].bootstrap)
        return started[lifetime]

    yield pair
    for proxy in proxies:
        proxy.stop()


def _compare(address: tuple[str, str], steps: tuple[Send, ...]) -> None:
    kafka, aclgate = (observe(target, steps) for target in address)
    assert aclgate == kafka


@pytest.mark.kafka
@pytest.mark.parametrize("name", SEQUENCES)
def test_sasl_edge_case_answered_as_kafka(pairs, name):
    _compare(pairs(False), SEQUENCES[name])


@pytest.mark.kafka
@pytest.mark.parametrize("name", REAUTH_SEQUENCES)
def test_reauthentication_edge_case_answered_as_kafka(pairs, name):
    _compare(pairs(True), REAUTH_SEQUENCES[name])


# ------------------------------------------------------------ aclgate's own bound (no Kafka)


def _metadata_of(size: int) -> Send:
    """A Metadata v12 of about `size` bytes: one-letter topics, 19 bytes each."""
    topic = module(METADATA, 12).MetadataRequestTopic(name="a", topic_id=None)
    step = metadata(12)
    return dataclasses.replace(step, fields=(("topics", (topic,) * (size // 19)), *step.fields[1:]))


@pytest.mark.parametrize(
    ("size", "answered"), [(3800, True), (2 * UNEXPECTED_ANSWERED_BYTES, False)]
)
def test_a_large_request_during_the_exchange_is_not_decoded(
    scripted, proxy_factory, users_file, monkeypatch, size, answered
):
    """Kafka answers a request sent during the exchange with its error response, one entry
    per topic it names: for 512 KiB that cost the event loop 0.7 s, for a client that has not
    authenticated. Over UNEXPECTED_ANSWERED_BYTES the request is not even decoded: closed on,
    unanswered, counted as sasl_state; nothing reaches the cluster."""
    decoded: list[int] = []
    real = saslgate.decode_request
    monkeypatch.setattr(
        saslgate,
        "decode_request",
        lambda frame, header: decoded.append(len(frame)) or real(frame, header),
    )
    proxy = proxy_factory(scripted.bootstrap, **sasl_listener(users_file))
    before = len(scripted.nodes[0].requests)
    big = _metadata_of(size)
    seen = observe(proxy.bootstrap, (handshake(1), big))
    assert seen[-1] == ("closed",)
    assert (len(seen) == 3) is answered  # handshake answer, [Metadata error,] close
    assert len(decoded) == 1 + answered  # the handshake, [the Metadata]
    assert proxy.metric("aclgate_errors_total", {"kind": "sasl_state"}) == 1
    assert scripted.nodes[0].requests[before:] == []
