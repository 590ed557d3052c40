"""The sans-IO SASL server interface and Kafka's error and re-authentication rules.

The listener code owns the SaslHandshake / SaslAuthenticate framing; a `SaslServer` only turns
client tokens into server tokens. Errors follow Kafka's split: a `SaslAuthenticationError`'s
message is sent to the client as is, any other `SaslException` is replaced by a generic message
so that nothing (such as whether a user exists) leaks to an unauthenticated client.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = [
    "SaslAuthenticationError",
    "SaslException",
    "SaslServer",
    "reauthentication_mechanism_error",
    "reauthentication_principal_error",
    "session_lifetime_ms",
]


class SaslException(Exception):
    """Authentication failed; the detail is for logs only (javax.security.sasl.SaslException)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def error_message(self, mechanism: str, reauthenticating: bool = False) -> str:
        """The SaslAuthenticate `error_message` Kafka sends for this failure."""
        what = "re-authentication" if reauthenticating else "authentication"
        return f"Authentication failed during {what} due to invalid credentials with SASL mechanism {mechanism}"


class SaslAuthenticationError(SaslException):
    """Authentication failed with a message meant for the client (Kafka's
    SaslAuthenticationException): it is sent verbatim with SASL_AUTHENTICATION_FAILED (58)."""

    def error_message(self, mechanism: str, reauthenticating: bool = False) -> str:
        return self.message


class SaslServer(ABC):
    """One authentication exchange on one connection (create a new one per handshake).

    Call `evaluate` with each client token (SaslAuthenticate `auth_bytes`) and send back what it
    returns; after it returns with `complete` true, `authorization_id` is the principal name
    (`User:<authorization_id>`). Any `SaslException` ends the exchange: send its
    `error_message(mechanism)`, wait a little, close the connection.
    """

    mechanism: str
    _complete: bool = False
    _authorization_id: str | None = None

    @property
    def complete(self) -> bool:
        """Whether the exchange finished successfully."""
        return self._complete

    @property
    def authorization_id(self) -> str:
        """The authenticated name; raises RuntimeError before completion."""
        if not self._complete or self._authorization_id is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._authorization_id

    @abstractmethod
    def evaluate(self, token: bytes) -> bytes:
        """Process one client token and return the server's reply (possibly empty)."""

    def credential_expiration_ms(self) -> int | None:
        """When the credential stops being valid (epoch ms), if it expires (KIP-368)."""
        return None

    def group_names(self) -> tuple[str, ...]:
        """The groups the authentication itself establishes (a token's claim, the users
        file's entry), as names; none by default. Asked once the exchange is complete."""
        return ()


def session_lifetime_ms(
    credential_expiration_ms: int | None, max_reauth_ms: int | None, now_ms: int
) -> int:
    """SaslAuthenticate's `session_lifetime_ms`, as Kafka's SaslServerAuthenticator computes it.

    `max_reauth_ms` is `connections.max.reauth.ms` (None or 0: not set). 0 means the session
    never needs re-authentication; otherwise the client re-authenticates before it ends and the
    connection is closed if it has not.
    """
    max_set = max_reauth_ms is not None and max_reauth_ms > 0
    if credential_expiration_ms is None and not max_set:
        return 0
    if credential_expiration_ms is None:
        assert max_reauth_ms is not None
        return max(0, max_reauth_ms)
    if not max_set:
        return max(0, credential_expiration_ms - now_ms)
    assert max_reauth_ms is not None
    return max(0, min(credential_expiration_ms - now_ms, max_reauth_ms))


def reauthentication_principal_error(previous: str, new: str) -> SaslAuthenticationError | None:
    """Kafka refuses a re-authentication that changes the principal ("User:alice" form)."""
    if previous == new:
        return None
    p_type, _, p_name = previous.partition(":")
    n_type, _, n_name = new.partition(":")
    return SaslAuthenticationError(
        f"Cannot change principals during re-authentication from {p_type}.{p_name}: {n_type}.{n_name}"
    )


def reauthentication_mechanism_error(
    previous: str, requested: str
) -> SaslAuthenticationError | None:
    """Kafka refuses a re-authentication with a different mechanism."""
    if previous == requested:
        return None
    return SaslAuthenticationError(
        f"SASL mechanism '{requested}' requested by client is not supported for "
        f"re-authentication of mechanism '{previous}'"
    )
