"""OAUTHBEARER: JWT validation against a JWKS, and Kafka's error-challenge flow."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

from aclgate.protocol.identity.sasl import (
    Jwks,
    JwtValidationError,
    JwtValidator,
    SaslAuthenticationError,
    SaslException,
    create_server,
    session_lifetime_ms,
)
from aclgate.protocol.identity.sasl.oauthbearer import ClientInitialResponse

NOW = 1_800_000_000  # seconds
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwk(key, kid: str, **extra: str) -> dict[str, Any]:
    pub = key.public_key().public_numbers()
    if isinstance(key, rsa.RSAPrivateKey):
        n = pub.n.to_bytes((pub.n.bit_length() + 7) // 8, "big")
        return {
            "kty": "RSA",
            "kid": kid,
            "n": b64url(n),
            "e": b64url(pub.e.to_bytes(3, "big")),
            **extra,
        }
    return {
        "kty": "EC",
        "kid": kid,
        "crv": "P-256",
        "x": b64url(pub.x.to_bytes(32, "big")),
        "y": b64url(pub.y.to_bytes(32, "big")),
        **extra,
    }


JWKS_JSON = json.dumps(
    {
        "keys": [
            jwk(RSA_KEY, "rsa1", use="sig"),
            jwk(EC_KEY, "ec1", alg="ES256"),
            {"kty": "oct", "kid": "hmac", "k": b64url(b"secret")},  # skipped
        ]
    }
)


def sign(
    claims: dict[str, Any],
    *,
    alg: str = "RS256",
    kid: str | None = "rsa1",
    key=None,
    header: dict | None = None,
) -> str:
    head = {"alg": alg, "typ": "JWT", **({"kid": kid} if kid else {}), **(header or {})}
    signing_input = f"{b64url(json.dumps(head).encode())}.{b64url(json.dumps(claims).encode())}"
    data = signing_input.encode()
    if alg == "none":
        return signing_input + "."
    if alg.startswith("RS"):
        sig = (key or RSA_KEY).sign(data, padding.PKCS1v15(), hashes.SHA256())
    elif alg.startswith("PS"):
        sig = (key or RSA_KEY).sign(
            data, padding.PSS(padding.MGF1(hashes.SHA256()), 32), hashes.SHA256()
        )
    elif alg.startswith("ES"):
        r, s = decode_dss_signature((key or EC_KEY).sign(data, ec.ECDSA(hashes.SHA256())))
        sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    else:
        import hmac

        sig = hmac.new(b"secret", data, "sha256").digest()
    return f"{signing_input}.{b64url(sig)}"


def claims(**over: Any) -> dict[str, Any]:
    base = {
        "sub": "alice",
        "iat": NOW - 10,
        "exp": NOW + 3600,
        "iss": "https://idp",
        "aud": ["kafka"],
        "scope": "read",
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


@pytest.fixture
def validator() -> JwtValidator:
    return JwtValidator(
        Jwks.from_json(JWKS_JSON), expected_audiences=["kafka"], expected_issuer="https://idp"
    )


def message(token: str, authzid: str = "", ext: str = "") -> bytes:
    a = f"a={authzid}" if authzid else ""
    return f"n,{a},\x01auth=Bearer {token}{ext}\x01\x01".encode()


def server_for(validator: JwtValidator):
    return create_server("OAUTHBEARER", oauth_validator=validator, clock_ms=lambda: NOW * 1000)


@pytest.mark.parametrize(
    "token",
    [
        sign(claims()),
        sign(claims(), alg="ES256", kid="ec1"),
        sign(claims(), alg="PS256"),
        sign(claims(), alg="ES256", kid=None),  # no kid: the only EC key is chosen
        sign(claims(aud="kafka")),  # aud as a string
        sign(claims(nbf=NOW + 20)),  # within the 30 s clock skew
        sign(claims(exp=NOW - 20)),  # within the clock skew
    ],
)
def test_valid_tokens(validator, token) -> None:
    server = server_for(validator)
    assert server.evaluate(message(token)) == b""
    assert server.complete and server.authorization_id == "alice"
    assert (
        server.credential_expiration_ms()
        == json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==="))["exp"] * 1000
    )


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (sign(claims(exp=NOW - 31)), "no longer valid"),
        (sign(claims(nbf=NOW + 31)), "not yet valid"),
        (sign(claims(aud=["other"])), "Audience"),
        (sign(claims(aud=None)), "No Audience"),
        (sign(claims(iss="https://evil")), "Issuer"),
        (sign(claims(iss=None)), "Issuer"),
        (sign(claims(exp=None)), "No Expiration Time"),
        (sign(claims(iat=None)), "No Issued At"),
        (sign(claims(sub=None)), "sub value must be non-null"),
        (sign(claims(sub="  ")), "must not contain only whitespace"),
        (sign(claims(exp="tomorrow")), "Could not extract the 'exp' claim"),
        (sign(claims(), key=OTHER_RSA), "signature is invalid"),
        (sign(claims(), alg="none", kid=None), "signature section missing"),
        (sign(claims(), alg="none", kid=None) + "AAAA", "'none' is not an allowed algorithm"),
        (sign(claims(), alg="HS256", kid="hmac"), "algorithm 'HS256' is not allowed"),
        (sign(claims(), kid="unknown"), "unable to find a suitable verification key"),
        (sign(claims(), alg="ES256", kid="rsa1"), "unable to find a suitable verification key"),
        (sign(claims(), header={"crit": ["exp"]}), "critical"),
        (sign(claims(scope=["a", "a"])), "must not contain duplicates"),
        ("a.b", "expected three sections"),
        ("a..c", "payload section missing"),
        (sign(claims())[:-4] + "AAAA", "signature is invalid"),
    ],
)
def test_invalid_tokens(validator, token, reason) -> None:
    with pytest.raises(JwtValidationError, match=reason):
        validator.validate(token, NOW * 1000)
    # Over SASL, Kafka answers with the RFC 7628 error challenge, then fails on the client's ^A.
    server = server_for(validator)
    assert server.evaluate(message(token)) == b'{"status":"invalid_token"}'
    assert not server.complete
    assert server.last_validation_error and reason in server.last_validation_error
    with pytest.raises(SaslAuthenticationError) as e:
        server.evaluate(b"\x01")
    assert e.value.error_message("OAUTHBEARER") == '{"status":"invalid_token"}'


def test_tampered_payload(validator) -> None:
    head, _, sig = sign(claims()).split(".")
    forged = f"{head}.{b64url(json.dumps(claims(sub='admin')).encode())}.{sig}"
    with pytest.raises(JwtValidationError, match="signature is invalid"):
        validator.validate(forged, NOW * 1000)


def test_principal_claim_and_scope() -> None:
    v = JwtValidator(Jwks.from_json(JWKS_JSON), principal_claim="preferred_username")
    token = v.validate(sign(claims(preferred_username=" bob ", scope=["a", "b"])), NOW * 1000)
    assert token.principal_name == "bob"
    assert token.scope == frozenset({"a", "b"})
    assert token.lifetime_ms == (NOW + 3600) * 1000 and token.start_time_ms == (NOW - 10) * 1000


def test_clock_skew_is_configurable() -> None:
    v = JwtValidator(Jwks.from_json(JWKS_JSON), clock_skew_seconds=0)
    with pytest.raises(JwtValidationError, match="no longer valid"):
        v.validate(sign(claims(exp=NOW)), NOW * 1000)
    with pytest.raises(JwtValidationError, match="not yet valid"):
        v.validate(sign(claims(nbf=NOW + 1)), NOW * 1000)
    v.validate(sign(claims(exp=NOW + 1, nbf=NOW)), NOW * 1000)


def test_authzid_must_match(validator) -> None:
    server = server_for(validator)
    with pytest.raises(SaslAuthenticationError) as e:
        server.evaluate(message(sign(claims()), authzid="bob"))
    assert e.value.message == (
        "Authentication failed: Client requested an authorization id (bob) that is different "
        "from the token's principal name (alice)"
    )
    server = server_for(validator)
    server.evaluate(message(sign(claims()), authzid="alice", ext="\x01traceId=abc 123"))
    assert server.complete and server.extensions == {"traceId": "abc 123"}


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"n,,\x01auth=Bearer tok\x01", "Invalid OAUTHBEARER client first message"),
        (b"n,,\x01x=1\x01\x01", "'auth' not specified"),
        (b"n,,\x01auth=Bearer\x01\x01", "invalid 'auth' format"),
        (b"n,,\x01auth=Basic dXNlcg==\x01\x01", "Invalid scheme"),
        (b"y,,\x01auth=Bearer x\x01\x01", "Invalid OAUTHBEARER client first message"),
        (b"\x01", "Invalid OAUTHBEARER client first message"),
    ],
)
def test_client_initial_response_errors(validator, raw, text) -> None:
    with pytest.raises(SaslException, match=text) as e:
        server_for(validator).evaluate(raw)
    assert e.value.error_message("OAUTHBEARER") == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"
    )


def test_client_initial_response_parse() -> None:
    r = ClientInitialResponse.parse(b"n,a=alice,\x01auth=bearer abc.def.ghi==\x01k=v\x01\x01")
    assert (r.token, r.authorization_id, r.extensions) == ("abc.def.ghi==", "alice", {"k": "v"})


def test_kafka_python_oauth_client(validator) -> None:
    """kafka-python's OAUTHBEARER client, success and the error round trip."""

    class Provider(AbstractTokenProvider):
        def __init__(self, token: str) -> None:
            self._token = token

        def token(self) -> str:
            return self._token

        def extensions(self) -> dict[str, str]:
            return {"traceId": "t1"}

    mech = SaslMechanismOAuth(sasl_oauth_token_provider=Provider(sign(claims())))
    server = server_for(validator)
    mech.receive(server.evaluate(mech.auth_bytes()))
    assert mech.is_authenticated() and server.authorization_id == "alice"

    mech = SaslMechanismOAuth(sasl_oauth_token_provider=Provider(sign(claims(exp=NOW - 100))))
    server = server_for(validator)
    mech.receive(server.evaluate(mech.auth_bytes()))
    with pytest.raises(SaslAuthenticationError, match="invalid_token"):
        server.evaluate(mech.auth_bytes())


def test_jwks_errors() -> None:
    with pytest.raises(ValueError, match="not valid JSON"):
        Jwks.from_json("{")
    with pytest.raises(ValueError, match='"keys" array'):
        Jwks.from_json("{}")
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(ValueError, match="too small"):
        Jwks.from_json(json.dumps({"keys": [jwk(small, "s")]}))
    with pytest.raises(ValueError, match="unsupported EC curve"):
        Jwks.from_json(json.dumps({"keys": [{"kty": "EC", "crv": "P-192", "x": "AA", "y": "AA"}]}))
    assert len(Jwks.from_json(JWKS_JSON).keys) == 2


def test_two_candidate_keys_without_kid_is_refused() -> None:
    jwks = Jwks.from_json(json.dumps({"keys": [jwk(RSA_KEY, "a"), jwk(OTHER_RSA, "b")]}))
    with pytest.raises(JwtValidationError, match="2 candidates"):
        JwtValidator(jwks).validate(sign(claims(), kid=None), NOW * 1000)
    JwtValidator(jwks).validate(sign(claims(), kid="a"), NOW * 1000)


def test_session_lifetime() -> None:
    """Kafka's calcCompletionTimesAndReturnSessionLifetimeMs."""
    now = NOW * 1000
    assert session_lifetime_ms(None, None, now) == 0
    assert session_lifetime_ms(None, 0, now) == 0
    assert session_lifetime_ms(None, 60_000, now) == 60_000
    assert session_lifetime_ms(now + 5_000, None, now) == 5_000
    assert session_lifetime_ms(now + 5_000, 60_000, now) == 5_000
    assert session_lifetime_ms(now + 90_000, 60_000, now) == 60_000
    assert session_lifetime_ms(now - 1, 60_000, now) == 0


# --- against Kafka's own broker-side validator (jose4j) -----------------------------------------


def test_tokens_match_kafka_validator(oracle, tmp_path) -> None:
    """Accept/reject and the principal agree with Kafka's OAuthBearerValidatorCallbackHandler."""
    import time

    oracle.require_kafka()
    jwks_file = tmp_path / "jwks.json"
    jwks_file.write_text(JWKS_JSON)
    now = int(time.time())
    ours = JwtValidator(
        Jwks.from_json(JWKS_JSON), expected_audiences=["kafka"], expected_issuer="https://idp"
    )

    def real(**over: Any) -> dict[str, Any]:
        return claims(**{"iat": now - 10, "exp": now + 3600, **over})

    cases = [
        sign(real()),
        sign(real(), alg="ES256", kid="ec1"),
        sign(real(), alg="PS256"),
        sign(real(aud="kafka")),
        sign(real(exp=now - 120)),
        sign(real(exp=now - 10)),  # inside the 30 s skew
        sign(real(nbf=now + 120)),
        sign(real(nbf=now + 10)),
        sign(real(aud=["other"])),
        sign(real(aud=None)),
        sign(real(iss="https://evil")),
        sign(real(iat=None)),
        sign(real(exp=None)),
        sign(real(sub=None)),
        sign(real(), key=OTHER_RSA),
        sign(real(), alg="none", kid=None) + "AAAA",
        sign(real(), alg="HS256", kid="hmac"),
        sign(real(), kid="unknown"),
        sign(real(scope=["a", "b"])),
        sign(real(), kid=None),
    ]
    for token in cases:
        kafka = oracle.ask("jwt", str(jwks_file), "kafka", "https://idp", "30", "sub", token)
        try:
            t = ours.validate(token, int(time.time() * 1000))
            mine = f"{t.principal_name},{t.lifetime_ms}"
        except JwtValidationError:
            mine = "error:invalid_token"
        assert mine == kafka, token
