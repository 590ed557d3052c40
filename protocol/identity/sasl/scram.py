"""SCRAM-SHA-256 / SCRAM-SHA-512 server (RFC 5802, RFC 7677) with Kafka's behaviour.

Message grammar, extensions (`tokenauth`), iteration limits and error messages follow Kafka's
ScramSaslServer and ScramMessages. Two checks are stricter than Kafka, both as RFC 5802
requires: the final nonce must equal the combined nonce (Kafka accepts any string ending in
it), and the channel binding must echo the gs2 header (`n,,`; channel binding is refused).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from aclgate.protocol.identity.sasl.base import SaslAuthenticationError, SaslException, SaslServer
from aclgate.protocol.identity.sasl.credentials import (
    SCRAM_MECHANISMS,
    SCRAM_MIN_ITERATIONS,
    CredentialLookup,
    ScramCredential,
)

__all__ = [
    "ClientFinalMessage",
    "ClientFirstMessage",
    "ScramSaslServer",
    "ServerFirstMessage",
    "sasl_name",
    "secure_random_string",
    "username_from_sasl_name",
]

# ScramMessages' grammar; Java's class intersections spelled out as ranges.
ALPHA = r"[A-Za-z]+"
VALUE_SAFE = r"[\x01-\x2b\x2d-\x3c\x3e-\x7f]+"  # [\x01-\x7F&&[^=,]]
VALUE = r"[\x01-\x2b\x2d-\x7f]+"  # [\x01-\x7F&&[^,]]
PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"  # [\x21-\x7E&&[^,]]
SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
BASE64_CHAR = r"[a-zA-Z0-9/+]"
BASE64 = rf"(?:{BASE64_CHAR}{{4}})*(?:{BASE64_CHAR}{{3}}=|{BASE64_CHAR}{{2}}==)?"
RESERVED = rf"(?:m={VALUE},)?"
EXTENSIONS = rf"(?:,{ALPHA}={VALUE})*"

_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{SASLNAME}))?,(?P<bare>{RESERVED}n=(?P<saslname>{SASLNAME}),"
    rf"r=(?P<nonce>{PRINTABLE})(?P<extensions>{EXTENSIONS}))"
)
_SERVER_FIRST = re.compile(
    rf"{RESERVED}r=(?P<nonce>{PRINTABLE}),s=(?P<salt>{BASE64}),i=(?P<iterations>[0-9]+){EXTENSIONS}"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{BASE64}),r=(?P<nonce>{PRINTABLE}){EXTENSIONS}),"
    rf"p=(?P<proof>{BASE64})"
)
_SERVER_FINAL = re.compile(
    rf"(?:e=(?P<error>{VALUE_SAFE}))|(?:v=(?P<signature>{BASE64})){EXTENSIONS}"
)

TOKEN_AUTH = "tokenauth"


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _parse_map(text: str, kv_sep: str, elem_sep: str) -> dict[str, str]:
    """Kafka's Utils.parseMap (last value wins for a repeated key)."""
    out: dict[str, str] = {}
    if text:
        for item in text.split(elem_sep):
            if item:
                key, _, value = item.partition(kv_sep)
                out[key] = value
    return out


def sasl_name(username: str) -> str:
    """RFC 5802 saslname encoding of a user name (`=` -> `=3D`, `,` -> `=2C`)."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username_from_sasl_name(name: str) -> str:
    """Decode a saslname; raises ValueError for a stray `=` (ScramFormatter.username)."""
    decoded = name.replace("=2C", ",")
    if "=" in decoded.replace("=3D", ""):
        raise ValueError(f"Invalid username: {name}")
    return decoded.replace("=3D", "=")


def secure_random_string() -> str:
    """A nonce like Kafka's: 130 random bits in base 36."""
    value = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, rem = divmod(value, 36)
        out = digits[rem] + out
        if value == 0:
            return out


@dataclass(frozen=True, slots=True)
class ClientFirstMessage:
    authorization_id: str
    sasl_name: str
    nonce: str
    extensions: dict[str, str]
    gs2_header: str
    bare: str  # client-first-message-bare as received, part of the AuthMessage

    @classmethod
    def parse(cls, data: bytes) -> ClientFirstMessage:
        message = _text(data)
        m = _CLIENT_FIRST.fullmatch(message)
        if m is None:
            raise SaslException(f"Invalid SCRAM client first message format: {message}")
        authzid = m.group("authzid") or ""
        ext = m.group("extensions")
        return cls(
            authorization_id=authzid,
            sasl_name=m.group("saslname"),
            nonce=m.group("nonce"),
            extensions=_parse_map(ext[1:], "=", ",") if ext.startswith(",") else {},
            gs2_header=message[: m.start("bare")],
            bare=m.group("bare"),
        )

    @property
    def token_authenticated(self) -> bool:
        return self.extensions.get(TOKEN_AUTH, "").lower() == "true"


@dataclass(frozen=True, slots=True)
class ServerFirstMessage:
    nonce: str  # client nonce + server nonce
    salt: bytes
    iterations: int

    def to_message(self) -> str:
        return f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i={self.iterations}"

    @classmethod
    def parse(cls, data: bytes) -> ServerFirstMessage:
        message = _text(data)
        m = _SERVER_FIRST.fullmatch(message)
        if m is None:
            raise SaslException(f"Invalid SCRAM server first message format: {message}")
        digits = m.group("iterations")
        if len(digits) > 10 or int(digits) > 2**31 - 1:
            raise SaslException("Invalid SCRAM server first message format: invalid iterations")
        iterations = int(digits)
        if iterations <= 0:
            raise SaslException(
                f"Invalid SCRAM server first message format: invalid iterations {iterations}"
            )
        return cls(m.group("nonce"), base64.b64decode(m.group("salt")), iterations)


@dataclass(frozen=True, slots=True)
class ClientFinalMessage:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str  # client-final-message-without-proof as received

    @classmethod
    def parse(cls, data: bytes) -> ClientFinalMessage:
        message = _text(data)
        m = _CLIENT_FINAL.fullmatch(message)
        if m is None:
            raise SaslException(f"Invalid SCRAM client final message format: {message}")
        return cls(
            base64.b64decode(m.group("channel")),
            m.group("nonce"),
            base64.b64decode(m.group("proof")),
            m.group("without_proof"),
        )


def parse_server_final(data: bytes) -> tuple[str | None, bytes | None]:
    """(error, signature) of a server-final-message; exactly one is set."""
    message = _text(data)
    m = _SERVER_FINAL.fullmatch(message)
    if m is None:
        raise SaslException(f"Invalid SCRAM server final message format: {message}")
    if m.group("error") is not None:
        return m.group("error"), None
    try:
        return None, base64.b64decode(m.group("signature") or "", validate=True)
    except binascii.Error:
        raise SaslException(f"Invalid SCRAM server final message format: {message}") from None


def _enum_name(mechanism: str) -> str:
    return mechanism.replace("-", "_")  # Java prints the enum constant, e.g. SCRAM_SHA_512


class ScramSaslServer(SaslServer):
    """Server side of one SCRAM exchange: client-first -> server-first, client-final ->
    server-final."""

    def __init__(
        self,
        mechanism: str,
        credentials: CredentialLookup,
        *,
        nonce_factory: Callable[[], str] = secure_random_string,
    ) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
        self.mechanism = mechanism
        self._digest = SCRAM_MECHANISMS[mechanism]
        self._credentials = credentials
        self._nonce_factory = nonce_factory
        self._state = "RECEIVE_CLIENT_FIRST_MESSAGE"
        self._client_first: ClientFirstMessage | None = None
        self._server_first: ServerFirstMessage | None = None
        self._credential: ScramCredential | None = None
        self._groups: tuple[str, ...] = ()
        self.extensions: dict[str, str] = {}

    def group_names(self) -> tuple[str, ...]:
        """The user's groups in the users file, read with the credential (client-first)."""
        return self._groups if self._complete else ()

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state == "RECEIVE_CLIENT_FIRST_MESSAGE":
                return self._first(token)
            if self._state == "RECEIVE_CLIENT_FINAL_MESSAGE":
                return self._final(token)
            raise SaslException(f"Unexpected challenge in Sasl server state {self._state}")
        except SaslException:
            self._clear()
            self._state = "FAILED"
            raise

    def _first(self, token: bytes) -> bytes:
        first = ClientFirstMessage.parse(token)
        self._client_first = first
        self.extensions = {k: v for k, v in first.extensions.items() if k == TOKEN_AUTH}
        try:
            username = username_from_sasl_name(first.sasl_name)
        except ValueError:
            raise SaslException(
                "Authentication failed: Credentials could not be obtained"
            ) from None
        if first.token_authenticated:
            # Delegation tokens live in a Kafka cluster; the proxy has none to check against.
            raise SaslException(f"Token Authentication failed: Invalid tokenId : {username}")
        credential = self._credentials.credentials_for(username, self.mechanism)
        if not isinstance(credential, ScramCredential) or credential.mechanism != self.mechanism:
            raise SaslException("Authentication failed: Invalid user credentials")
        if first.authorization_id and first.authorization_id != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        if credential.iterations < SCRAM_MIN_ITERATIONS:
            raise SaslException(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{SCRAM_MIN_ITERATIONS} for {_enum_name(self.mechanism)}"
            )
        self._credential = credential
        self._groups = self._credentials.groups_for(username)
        self._authorization_id = username
        self._server_first = ServerFirstMessage(
            first.nonce + self._nonce_factory(), credential.salt, credential.iterations
        )
        self._state = "RECEIVE_CLIENT_FINAL_MESSAGE"
        return self._server_first.to_message().encode()

    def _final(self, token: bytes) -> bytes:
        first, server_first, credential = self._client_first, self._server_first, self._credential
        assert first is not None and server_first is not None and credential is not None
        final = ClientFinalMessage.parse(token)
        if not hmac.compare_digest(final.nonce.encode(), server_first.nonce.encode()):
            raise SaslException("Invalid client nonce in the final client message.")
        if final.channel_binding != first.gs2_header.encode():
            raise SaslException("Invalid channel binding in the final client message.")
        auth_message = ",".join(
            (first.bare, server_first.to_message(), final.without_proof)
        ).encode()
        client_signature = hmac.new(credential.stored_key, auth_message, self._digest).digest()
        if len(final.proof) != len(client_signature):
            raise SaslException("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(client_signature, final.proof, strict=True))
        computed_stored_key = hashlib.new(self._digest, client_key).digest()
        if not hmac.compare_digest(computed_stored_key, credential.stored_key):
            raise SaslException("Invalid client credentials")
        server_signature = hmac.new(credential.server_key, auth_message, self._digest).digest()
        self._clear()
        self._state = "COMPLETE"
        self._complete = True
        return b"v=" + base64.b64encode(server_signature)

    def _clear(self) -> None:
        self._credential = None
        self._client_first = None
        self._server_first = None
