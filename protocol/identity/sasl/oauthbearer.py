"""SASL/OAUTHBEARER server (RFC 7628) as Kafka's OAuthBearerSaslServer runs it.

The client sends `n,[a=authzid],^Aauth=Bearer <jwt>^A[key=value^A...]^A`. A token that fails
validation is answered with the RFC 7628 error challenge `{"status":"invalid_token"}`; the
client then sends a single ^A and the exchange fails with that JSON as the error message.

A token naming a key id that the key set lacks, when the key set comes from a JWKS URL, does
not fail at once: `evaluate` raises SaslPending while the proxy fetches the key set again,
and the SASL gate evaluates the same token again afterwards (once: the second time decides).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from aclgate.protocol.identity.sasl.base import SaslAuthenticationError, SaslException, SaslServer
from aclgate.protocol.identity.sasl.jwt import (
    GroupsClaimError,
    JwtValidationError,
    JwtValidator,
    OAuthBearerToken,
)
from aclgate.protocol.identity.sasl.pending import SaslPending

__all__ = ["OAUTHBEARER", "ClientInitialResponse", "OAuthBearerSaslServer"]

OAUTHBEARER = "OAUTHBEARER"
SEPARATOR = "\x01"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_KVPAIRS = rf"(?:{_KEY}={_VALUE}{SEPARATOR})*"
_AUTH = re.compile(r"(?P<scheme>\w+)[ ]+(?P<token>[-_~+/.a-zA-Z0-9]+(?:=*))", re.ASCII)
_INITIAL = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,{SEPARATOR}(?P<kvpairs>{_KVPAIRS}){SEPARATOR}"
)
_KEY_RE = re.compile(_KEY)
_VALUE_RE = re.compile(_VALUE)


@dataclass(frozen=True)
class ClientInitialResponse:
    """Kafka's OAuthBearerClientInitialResponse."""

    token: str
    authorization_id: str
    extensions: dict[str, str]

    @classmethod
    def parse(cls, data: bytes) -> ClientInitialResponse:
        message = data.decode("utf-8", errors="replace")
        m = _INITIAL.fullmatch(message)
        if m is None:
            raise SaslException("Invalid OAUTHBEARER client first message")
        properties: dict[str, str] = {}
        for item in m.group("kvpairs").split(SEPARATOR):
            if item:
                key, _, value = item.partition("=")
                properties[key] = value
        auth = properties.pop("auth", None)
        if auth is None:
            raise SaslException("Invalid OAUTHBEARER client first message: 'auth' not specified")
        for key, value in properties.items():
            if not _KEY_RE.fullmatch(key):
                raise SaslException(f"Extension name {key} is invalid")
            if not _VALUE_RE.fullmatch(value):
                raise SaslException(f"Extension value ({value}) for extension {key} is invalid")
        a = _AUTH.fullmatch(auth)
        if a is None:
            raise SaslException("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if a.group("scheme").lower() != "bearer":
            raise SaslException(
                f"Invalid scheme in OAUTHBEARER client first message: {a.group('scheme')}"
            )
        return cls(a.group("token"), m.group("authzid") or "", properties)


def invalid_token_challenge(status: str = "invalid_token") -> str:
    return f'{{"status":"{status}"}}'


class OAuthBearerSaslServer(SaslServer):
    """Validates the bearer token with a `JwtValidator`; `clock()` gives epoch milliseconds."""

    mechanism = OAUTHBEARER

    def __init__(self, validator: JwtValidator, clock: Callable[[], int]) -> None:
        self._validator = validator
        self._clock = clock
        self._error_message: str | None = None
        self.token: OAuthBearerToken | None = None
        self.extensions: dict[str, str] = {}
        self.last_validation_error: str | None = None  # for the server's log, never the client
        self._waited = False  # a key set refresh was waited for: the next evaluation decides

    def credential_expiration_ms(self) -> int | None:
        return self.token.lifetime_ms if self._complete and self.token else None

    def group_names(self) -> tuple[str, ...]:
        """The token's groups claim (sasl.oauthbearer.groups.claim.name), when configured."""
        return self.token.groups if self._complete and self.token else ()

    def evaluate(self, token: bytes) -> bytes:
        if self._complete:
            raise SaslException("Unexpected challenge in Sasl server state COMPLETE")
        if token == SEPARATOR.encode() and self._error_message is not None:
            raise SaslAuthenticationError(self._error_message)
        self._error_message = None
        response = ClientInitialResponse.parse(token)
        try:
            validated = self._validator.validate(
                response.token, self._clock(), may_wait=not self._waited
            )
        except SaslPending:
            self._waited = True
            raise
        except GroupsClaimError as e:
            # a validly signed token whose groups cannot be read: refused, and told why (the
            # claim is the client's own), not with the generic invalid_token
            self.last_validation_error = str(e)
            raise SaslAuthenticationError(f"Authentication failed: {e}") from None
        except JwtValidationError as e:
            self.last_validation_error = str(e)
            self._error_message = invalid_token_challenge()
            return self._error_message.encode()
        if response.authorization_id and response.authorization_id != validated.principal_name:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id "
                f"({response.authorization_id}) that is different from the token's principal "
                f"name ({validated.principal_name})"
            )
        self.token = validated
        self._authorization_id = validated.principal_name
        self.extensions = dict(response.extensions)
        self._complete = True
        return b""
