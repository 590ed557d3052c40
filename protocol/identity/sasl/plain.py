"""SASL/PLAIN server (RFC 4616) with Kafka's PlainSaslServer checks and messages.

Passwords are checked against salted scrypt hashes; an unknown user is checked against a dummy
hash so that it takes as long as a wrong password.
"""

from __future__ import annotations

from aclgate.protocol.identity.sasl.base import SaslAuthenticationError, SaslException, SaslServer
from aclgate.protocol.identity.sasl.credentials import (
    PLAIN,
    CredentialLookup,
    PlainCredential,
    dummy_plain_credential,
)

__all__ = ["PlainSaslServer"]


class PlainSaslServer(SaslServer):
    """One PLAIN exchange: a single `authzid NUL authcid NUL passwd` token, empty reply."""

    mechanism = PLAIN

    def __init__(self, credentials: CredentialLookup) -> None:
        self._credentials = credentials
        self._done = False
        self._groups: tuple[str, ...] = ()

    def group_names(self) -> tuple[str, ...]:
        """The user's groups in the users file, as they were when the password was checked."""
        return self._groups if self._complete else ()

    def evaluate(self, token: bytes) -> bytes:
        if self._done:
            raise SaslException("Unexpected challenge in Sasl server state COMPLETE")
        self._done = True
        tokens = token.decode("utf-8", errors="replace").split("\x00", 3)
        if len(tokens) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(tokens), 4)}"
            )
        authzid, username, password = tokens
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        credential = self._credentials.credentials_for(username, PLAIN)
        if isinstance(credential, PlainCredential):
            ok = credential.verify(password)
        else:
            dummy_plain_credential().verify(password)
            ok = False
        if not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self._groups = self._credentials.groups_for(username)
        self._authorization_id = username
        self._complete = True
        return b""
