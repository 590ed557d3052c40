"""What the TCP fuzzer found, each as a small deterministic test (tests/fuzz/test_tcp_fuzz.py
finds them again at random).

1. Refused SASL exchanges close the connection with no `aclgate_errors_total` kind: a
   SaslHandshake naming a mechanism the listener does not enable, a second SaslHandshake during
   an exchange, a SaslAuthenticate after the login without a new SaslHandshake. Kafka answers
   and closes (its failed-authentication-total counts them: UnsupportedSaslMechanismException
   and IllegalSaslStateException are AuthenticationExceptions); aclgate closes with only an
   INFO line, so a client fleet stuck on a wrong mechanism is invisible in the metrics.
2. Requests of an API key or version the cluster does not serve, and that the proxy therefore
   does not advertise, are forwarded all the same (the session accepts whatever the proxy
   parses). Kafka closes on a request it did not advertise; behind a broker that serves less
   than kio knows (tansu, an older Kafka) the broker gets requests it never offered.
"""

from __future__ import annotations

import pytest

from aclgate.protocol.codec import encode_request
from aclgate.protocol.versions import KIO_RANGES
from tests.fixtures.rawclient import RawClient, request_entity
from tests.fixtures.wait import wait_until

from .checks import parse, snapshot
from .conftest import MECHANISM
from .corpus import CLIENT_ID, blank
from .recorder import RecordingUpstream

UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE = 33, 34


def _errors(proxy) -> float:
    return sum(snapshot([proxy]).errors.values())


def _unsupported_mechanism(raw: RawClient) -> int:
    return raw.request(request_entity(17, 1, mechanism="GSSAPI")).error_code


def _second_handshake(raw: RawClient) -> int:
    assert raw.request(request_entity(17, 1, mechanism=MECHANISM)).error_code == 0
    return raw.request(request_entity(17, 1, mechanism=MECHANISM)).error_code


def _api_versions_during_exchange(raw: RawClient) -> int:
    """(A SaslAuthenticate after success is answered and the connection goes on, as in
    Kafka: tests/listeners/test_sasl_edges_kafka.py.)"""
    assert raw.request(request_entity(17, 1, mechanism=MECHANISM)).error_code == 0
    return raw.request(request_entity(18, 0)).error_code


@pytest.mark.parametrize(
    ("exchange", "code"),
    [
        (_unsupported_mechanism, UNSUPPORTED_SASL_MECHANISM),
        (_second_handshake, ILLEGAL_SASL_STATE),
        (_api_versions_during_exchange, ILLEGAL_SASL_STATE),
    ],
    ids=["unsupported-mechanism", "second-handshake", "api-versions-during-exchange"],
)
def test_refused_sasl_exchange_is_counted(proxy_factory, upstream, users_file, exchange, code):
    proxy = proxy_factory(
        upstream.bootstrap,
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms=MECHANISM,
        users_file=users_file,
        connection_failed_authentication_delay_ms=10,
    )
    before = _errors(proxy)
    with RawClient(proxy.bootstrap) as raw:
        assert exchange(raw) == code  # answered as Kafka answers
        assert raw.is_closed_by_peer(), "Kafka closes the connection after this answer"
    wait_until(lambda: snapshot([proxy]).active == 0, what="the connection closed")
    assert _errors(proxy) == before + 1, (
        "a refused SASL exchange closed the connection without an aclgate_errors_total kind"
    )


def test_what_the_cluster_does_not_serve_is_not_forwarded(proxy_factory):
    """A broker that serves ListOffsets up to v9 and no UpdateFeatures: the proxy advertises
    that, and closes (as Kafka does) on ListOffsets v11 and UpdateFeatures instead of
    forwarding them."""
    ranges = {k: v for k, v in KIO_RANGES.items() if k != 57}
    ranges[2] = (1, 9)
    with RecordingUpstream(ranges=ranges) as up:
        proxy = proxy_factory(up.bootstrap)
        with RawClient(proxy.bootstrap) as raw:
            versions = raw.request(
                request_entity(18, 3, client_software_name="t", client_software_version="1")
            )
        advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert advertised[2] == (1, 9) and 57 not in advertised, advertised
        wait_until(lambda: snapshot([proxy]).active == 0)
        up.take()
        before = snapshot([proxy]).errors["unsupported_api"]
        for key, version in ((2, 11), (57, 1)):
            with RawClient(proxy.bootstrap) as raw:
                raw.send_raw(encode_request(7, blank(key, version), CLIENT_ID))
                assert raw.is_closed_by_peer()
        wait_until(lambda: snapshot([proxy]).active == 0)
        forwarded = [(p.api_key, p.api_version) for p in (parse(f) for _, f in up.take()[0])]
        assert (2, 11) not in forwarded and (57, 1) not in forwarded, (
            f"forwarded requests the proxy did not advertise: {forwarded}"
        )
        assert snapshot([proxy]).errors["unsupported_api"] == before + 2
