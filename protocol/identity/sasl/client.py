"""SASL clients for the proxy's own upstream login: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER.

Sans-IO: the upstream connection code sends `initial_response()` in the first SaslAuthenticate
request and feeds each server reply to `evaluate_challenge`, sending back what it returns until
`complete`. Server signatures are checked in constant time, so a man in the middle that does
not know the credential cannot fake a successful SCRAM login. OAUTHBEARER sends a token the
IO layer obtained (proxy/security/oauthtoken.py: a client-credentials grant), as Kafka's
OAuthBearerSaslClient does, including RFC 7628's error round (the server's JSON error, then a
lone ^A, then the failure).
"""

from __future__ import annotations

import base64
import hmac
from abc import ABC, abstractmethod

from aclgate.protocol.identity.sasl.base import SaslException
from aclgate.protocol.identity.sasl.credentials import (
    PLAIN,
    SCRAM_MECHANISMS,
    SCRAM_MIN_ITERATIONS,
    scram_keys,
    scram_salted_password,
)
from aclgate.protocol.identity.sasl.scram import (
    ServerFirstMessage,
    parse_server_final,
    sasl_name,
    secure_random_string,
)

__all__ = [
    "OAuthBearerSaslClient",
    "PlainSaslClient",
    "SaslClient",
    "ScramSaslClient",
    "create_client",
]

# Upper bound on server-chosen iterations, so a hostile upstream cannot make us spin.
SCRAM_CLIENT_MAX_ITERATIONS = 1_000_000


class SaslClient(ABC):
    mechanism: str

    @property
    @abstractmethod
    def complete(self) -> bool:
        """Whether the server's final message has been verified."""

    @abstractmethod
    def initial_response(self) -> bytes:
        """The first token to send."""

    @abstractmethod
    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        """Process a server token; return the next token, or None when nothing more is sent."""


class PlainSaslClient(SaslClient):
    mechanism = PLAIN

    def __init__(self, username: str, password: str, authorization_id: str = "") -> None:
        if not username or not password:
            raise ValueError("PLAIN needs a user name and a password")
        self._message = f"{authorization_id}\x00{username}\x00{password}".encode()
        self._complete = False

    @property
    def complete(self) -> bool:
        return self._complete

    def initial_response(self) -> bytes:
        return self._message

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._complete:
            raise SaslException("Unexpected challenge in Sasl client state COMPLETE")
        if challenge:
            raise SaslException("Expected empty challenge")
        self._complete = True
        return None


class ScramSaslClient(SaslClient):
    """RFC 5802 client (gs2 header `n,,`: no channel binding, no authzid), like Kafka's."""

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        nonce: str | None = None,
        extensions: dict[str, str] | None = None,
    ) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
        self.mechanism = mechanism
        self._digest = SCRAM_MECHANISMS[mechanism]
        self._password = password
        self._nonce = nonce or secure_random_string()
        ext = "".join(f",{k}={v}" for k, v in (extensions or {}).items())
        self._first_bare = f"n={sasl_name(username)},r={self._nonce}{ext}"
        self._state = "SEND_CLIENT_FIRST_MESSAGE"
        self._server_signature: bytes | None = None

    @property
    def complete(self) -> bool:
        return self._state == "COMPLETE"

    def initial_response(self) -> bytes:
        if self._state != "SEND_CLIENT_FIRST_MESSAGE":
            raise SaslException(f"Unexpected initial response in Sasl client state {self._state}")
        self._state = "RECEIVE_SERVER_FIRST_MESSAGE"
        return ("n,," + self._first_bare).encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        try:
            if self._state == "RECEIVE_SERVER_FIRST_MESSAGE":
                return self._final_message(challenge)
            if self._state == "RECEIVE_SERVER_FINAL_MESSAGE":
                self._verify_server_final(challenge)
                return None
            raise SaslException(f"Unexpected challenge in Sasl client state {self._state}")
        except SaslException:
            self._state = "FAILED"
            raise

    def _final_message(self, challenge: bytes) -> bytes:
        server_first = ServerFirstMessage.parse(challenge)
        if not server_first.nonce.startswith(self._nonce) or server_first.nonce == self._nonce:
            raise SaslException("Invalid server nonce: does not start with client nonce")
        if server_first.iterations < SCRAM_MIN_ITERATIONS:
            raise SaslException(
                f"Requested iterations {server_first.iterations} is less than the minimum "
                f"{SCRAM_MIN_ITERATIONS} for {self.mechanism.replace('-', '_')}"
            )
        if server_first.iterations > SCRAM_CLIENT_MAX_ITERATIONS:
            raise SaslException(f"Requested iterations {server_first.iterations} is too large")
        salted = scram_salted_password(
            self.mechanism, self._password, server_first.salt, server_first.iterations
        )
        client_key, stored_key, server_key = scram_keys(self.mechanism, salted)
        without_proof = f"c=biws,r={server_first.nonce}"
        auth_message = f"{self._first_bare},{challenge.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self._digest).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = hmac.new(server_key, auth_message, self._digest).digest()
        self._state = "RECEIVE_SERVER_FINAL_MESSAGE"
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, challenge: bytes) -> None:
        error, signature = parse_server_final(challenge)
        if error is not None:
            raise SaslException(
                f"Sasl authentication using {self.mechanism.replace('-', '_')} failed with error: {error}"
            )
        assert signature is not None and self._server_signature is not None
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslException("Invalid server signature in server final message")
        self._state = "COMPLETE"


class OAuthBearerSaslClient(SaslClient):
    """RFC 7628 client: `n,,^Aauth=Bearer <token>^A[key=value^A...]^A`."""

    mechanism = "OAUTHBEARER"

    def __init__(self, token: str, extensions: dict[str, str] | None = None) -> None:
        if not token or any(c.isspace() or c == "\x01" for c in token):
            raise ValueError("OAUTHBEARER needs a token without whitespace")
        ext = "".join(f"{k}={v}\x01" for k, v in (extensions or {}).items())
        self._message = f"n,,\x01auth=Bearer {token}\x01{ext}\x01".encode()
        self._state = "SEND_CLIENT_FIRST_MESSAGE"
        self.error: str | None = None  # the server's JSON error, if it refused the token

    @property
    def complete(self) -> bool:
        return self._state == "COMPLETE"

    def initial_response(self) -> bytes:
        if self._state != "SEND_CLIENT_FIRST_MESSAGE":
            raise SaslException(f"Unexpected initial response in Sasl client state {self._state}")
        self._state = "RECEIVE_SERVER_FIRST_MESSAGE"
        return self._message

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._state == "RECEIVE_SERVER_FIRST_MESSAGE":
            if challenge:  # the token was refused: acknowledge with ^A, the failure follows
                self.error = challenge.decode("utf-8", errors="replace")
                self._state = "RECEIVE_SERVER_MESSAGE_AFTER_FAILURE"
                return b"\x01"
            self._state = "COMPLETE"
            return None
        if self._state == "RECEIVE_SERVER_MESSAGE_AFTER_FAILURE":
            self._state = "FAILED"
            raise SaslException(f"OAUTHBEARER token refused by the server: {self.error}")
        raise SaslException(f"Unexpected challenge in Sasl client state {self._state}")


def create_client(mechanism: str, username: str, password: str) -> SaslClient:
    """A client for `--upstream-sasl-mechanism` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    (OAUTHBEARER needs a token: OAuthBearerSaslClient)."""
    if mechanism == PLAIN:
        return PlainSaslClient(username, password)
    if mechanism in SCRAM_MECHANISMS:
        return ScramSaslClient(mechanism, username, password)
    raise ValueError(
        f"unsupported upstream SASL mechanism {mechanism!r}; "
        f"use one of PLAIN, {', '.join(SCRAM_MECHANISMS)}"
    )
