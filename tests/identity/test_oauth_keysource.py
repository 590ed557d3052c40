"""OAUTHBEARER with keys that change while the proxy runs (sans-IO side): a token naming an
unknown key id asks the KeySource for a refresh and waits (SaslPending) instead of failing,
once; the next evaluation decides."""

from __future__ import annotations

import json

import pytest

from aclgate.protocol.identity.sasl import (
    JwtValidationError,
    SaslAuthenticationError,
    create_server,
)
from aclgate.protocol.identity.sasl.jwt import MAX_REFRESH_KID_LENGTH, Jwks, JwtValidator
from aclgate.protocol.identity.sasl.pending import SaslPending
from tests.identity.test_sasl_oauthbearer import (
    NOW,
    OTHER_RSA,
    RSA_KEY,
    claims,
    jwk,
    message,
    sign,
)


class FakeSource:
    """A KeySource whose refresh is run by the test."""

    def __init__(self, *keys: dict) -> None:
        self.jwks = Jwks.from_json(json.dumps({"keys": list(keys)}))
        self.asked: list[str] = []
        self.callbacks: list = []
        self.refuse = False

    def current(self) -> Jwks:
        return self.jwks

    def refresh_for(self, kid: str) -> SaslPending | None:
        self.asked.append(kid)
        if self.refuse:
            return None
        return SaslPending(f"refresh for {kid}")

    def when_fetched(self, callback) -> None:
        self.callbacks.append(callback)

    def publish(self, *keys: dict) -> None:
        self.jwks = Jwks.from_json(json.dumps({"keys": list(keys)}))
        for callback in self.callbacks:
            callback()


def test_unknown_kid_waits_for_the_refresh_then_validates() -> None:
    source = FakeSource(jwk(RSA_KEY, "old"))
    validator = JwtValidator(source)
    token = sign(claims(), kid="new", key=OTHER_RSA)
    with pytest.raises(SaslPending) as pending:
        validator.validate(token, NOW * 1000, may_wait=True)
    assert source.asked == ["new"]
    woken: list[bool] = []
    assert pending.value.reason == "refresh for new"
    source.when_fetched(lambda: woken.append(True))
    source.publish(jwk(RSA_KEY, "old"), jwk(OTHER_RSA, "new"))
    assert woken == [True]
    assert validator.validate(token, NOW * 1000).principal_name == "alice"


@pytest.mark.parametrize(
    ("token", "may_wait", "why"),
    [
        (sign(claims(), kid="new"), False, "not allowed to wait"),
        (sign(claims(), kid="x" * (MAX_REFRESH_KID_LENGTH + 1)), True, "key id too long"),
        (sign(claims(), kid=None, alg="ES256"), True, "no key id"),
        (sign(claims(), kid="old", alg="PS256"), True, "the key id is known"),
        (sign(claims(), kid="new", alg="HS256"), True, "algorithm refused first"),
    ],
)
def test_no_refresh_is_asked_for(token, may_wait, why) -> None:
    source = FakeSource(jwk(RSA_KEY, "old", alg="RS256"))
    with pytest.raises(JwtValidationError):
        JwtValidator(source).validate(token, NOW * 1000, may_wait=may_wait)
    assert source.asked == [], why


def test_refused_refresh_fails_at_once() -> None:
    source = FakeSource(jwk(RSA_KEY, "old"))
    source.refuse = True  # rate limited
    with pytest.raises(JwtValidationError, match="unable to find a suitable verification key"):
        JwtValidator(source).validate(sign(claims(), kid="new"), NOW * 1000, may_wait=True)
    assert source.asked == ["new"]


def test_sasl_server_waits_once_then_decides() -> None:
    """The SASL gate evaluates the same token again after the wait: that evaluation decides,
    even if the key is still unknown (no second wait, no loop)."""
    source = FakeSource(jwk(RSA_KEY, "old"))
    server = create_server(
        "OAUTHBEARER", oauth_validator=JwtValidator(source), clock_ms=lambda: NOW * 1000
    )
    first = message(sign(claims(), kid="new", key=OTHER_RSA))
    with pytest.raises(SaslPending):
        server.evaluate(first)
    source.publish(jwk(RSA_KEY, "old"))  # the IdP does not have it either
    assert server.evaluate(first) == b'{"status":"invalid_token"}'
    assert source.asked == ["new"]
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(b"\x01")


def test_sasl_server_accepts_after_the_wait() -> None:
    source = FakeSource(jwk(RSA_KEY, "old"))
    server = create_server(
        "OAUTHBEARER", oauth_validator=JwtValidator(source), clock_ms=lambda: NOW * 1000
    )
    first = message(sign(claims(), kid="new", key=OTHER_RSA))
    with pytest.raises(SaslPending):
        server.evaluate(first)
    source.publish(jwk(OTHER_RSA, "new"))
    assert server.evaluate(first) == b"" and server.authorization_id == "alice"


def test_private_members_of_a_jwk_are_ignored() -> None:
    """A JWKS that (wrongly) publishes private key members still yields public keys only."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    d = RSA_KEY.private_numbers().d
    key = {**jwk(RSA_KEY, "k"), "d": "AQAB" if d else ""}
    parsed = Jwks.from_json(json.dumps({"keys": [key]})).keys[0]
    assert isinstance(parsed.key, rsa.RSAPublicKey)
