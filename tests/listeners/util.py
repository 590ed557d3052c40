"""Helpers for the listener tests: PKI, users, JWT signing, ACL/audit files, client errors."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.fixtures.wait import wait_until  # noqa: F401 (the listener tests import it from here)

USERS = ("alice", "bob", "admin")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: mTLS: the subject's CN, lower-cased, when OU=eng; anything else keeps the full DN
MAPPING_RULES = "RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT"


def password(user: str) -> str:
    return f"{user}-secret"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------- ACLs and audit


def acl(principal: str, operation: str, name: str, *, rtype="TOPIC", host="*", permission="ALLOW"):
    return {
        "resource_type": rtype,
        "resource_name": name,
        "pattern_type": "LITERAL",
        "principal": principal,
        "host": host,
        "operation": operation,
        "permission_type": permission,
    }


def write_acls(path: Path, *entries: dict) -> Path:
    path.write_text(json.dumps({"version": 1, "acls": list(entries)}))
    return path


def read_audit(proxy, path: Path) -> list[dict]:
    """Every audit event so far (aggregated windows flushed first)."""
    audit = proxy.server.audit
    proxy.run(lambda: (audit.flush_aggregates(), audit.file.tick()))  # tick: to the OS
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------------------- JWT / JWKS

JWT_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ISSUER, AUDIENCE = "https://idp.test", "kafka"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwks_json(key=JWT_KEY, kid: str = "test-key") -> str:
    pub = key.public_key().public_numbers()
    n = pub.n.to_bytes((pub.n.bit_length() + 7) // 8, "big")
    return json.dumps(
        {
            "keys": [
                {
                    "kty": "RSA",
                    "kid": kid,
                    "use": "sig",
                    "n": b64url(n),
                    "e": b64url(b"\x01\x00\x01"),
                }
            ]
        }
    )


def sign_jwt(
    sub: str, *, lifetime: float = 3600, key=JWT_KEY, kid: str = "test-key", **claims: Any
) -> str:
    now = int(time.time())
    body = {"sub": sub, "iat": now, "exp": now + lifetime, "iss": ISSUER, "aud": [AUDIENCE]}
    body.update(claims)
    head = {"alg": "RS256", "typ": "JWT", "kid": kid}
    signing_input = f"{b64url(json.dumps(head).encode())}.{b64url(json.dumps(body).encode())}"
    sig = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{b64url(sig)}"


# ---------------------------------------------------------------------------- client helpers


def confluent_errors(cfg: dict, timeout: float = 10) -> list:
    """Ask for metadata until the client reports an error; returns the errors (KafkaError)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list = []
    admin = AdminClient({**cfg, "error_cb": errors.append})
    deadline = time.monotonic() + timeout
    while not errors and time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.3)
        except KafkaException:
            pass
        admin.poll(0)
    return errors


# ------------------------------------------------------------------------ raw SASL exchanges

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


def oauth_message(jwt: str) -> bytes:
    return f"n,,\x01auth=Bearer {jwt}\x01\x01".encode()


def sasl_client(mechanism: str, user: str, secret: str):
    """A sans-IO SASL client (PLAIN, SCRAM-*, or OAUTHBEARER with `secret` the JWT)."""
    if mechanism == "OAUTHBEARER":
        return _OAuthClient(secret)
    from aclgate.protocol.identity.sasl.client import create_client

    return create_client(mechanism, user, secret)


class _OAuthClient:
    complete = False

    def __init__(self, jwt: str):
        self.jwt = jwt

    def initial_response(self) -> bytes:
        return oauth_message(self.jwt)

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if challenge:  # an error challenge: RFC 7628 says answer with a lone ^A
            return b"\x01"
        self.complete = True
        return None


def sasl_login(
    raw, mechanism: str, user: str, secret: str, *, version: int = 2, waits: list | None = None
):
    """SaslHandshake v1 + SaslAuthenticate rounds on a RawClient. Returns the handshake
    response if it failed, else the last SaslAuthenticate response (error or success).
    `waits` gets the seconds from each SaslAuthenticate sent to its answer."""
    from tests.fixtures.rawclient import request_entity

    handshake = raw.request(request_entity(SASL_HANDSHAKE, 1, mechanism=mechanism))
    if handshake.error_code != 0:
        return handshake
    client = sasl_client(mechanism, user, secret)
    token = client.initial_response()
    while True:
        sent = time.monotonic()
        answer = raw.request(request_entity(SASL_AUTHENTICATE, version, auth_bytes=token))
        if waits is not None:
            waits.append(time.monotonic() - sent)
        if answer.error_code != 0:
            return answer
        token = client.evaluate_challenge(bytes(answer.auth_bytes))
        if token is None or client.complete:
            return answer


def metadata_request(*topics: str, version: int = 4):
    from tests.fixtures.rawclient import module, request_entity

    mod = module(3, version)
    return request_entity(
        3,
        version,
        topics=tuple(mod.MetadataRequestTopic(name=t) for t in topics),
        allow_auto_topic_creation=False,
    )
