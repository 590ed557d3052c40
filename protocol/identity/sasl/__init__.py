"""Sans-IO SASL: servers for PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER, clients for upstream.

`create_server(mechanism, ...)` is what a listener calls after a SaslHandshake names an enabled
mechanism; see base.SaslServer for the exchange and error contract.
"""

from __future__ import annotations

from collections.abc import Callable

from aclgate.protocol.identity.sasl.base import (
    SaslAuthenticationError,
    SaslException,
    SaslServer,
    reauthentication_mechanism_error,
    reauthentication_principal_error,
    session_lifetime_ms,
)
from aclgate.protocol.identity.sasl.credentials import PLAIN, SCRAM_MECHANISMS, CredentialLookup
from aclgate.protocol.identity.sasl.jwt import (
    Jwks,
    JwtValidationError,
    JwtValidator,
    OAuthBearerToken,
)
from aclgate.protocol.identity.sasl.oauthbearer import OAUTHBEARER, OAuthBearerSaslServer
from aclgate.protocol.identity.sasl.plain import PlainSaslServer
from aclgate.protocol.identity.sasl.scram import ScramSaslServer

__all__ = [
    "OAUTHBEARER",
    "PLAIN",
    "SUPPORTED_MECHANISMS",
    "Jwks",
    "JwtValidationError",
    "JwtValidator",
    "OAuthBearerToken",
    "SaslAuthenticationError",
    "SaslException",
    "SaslServer",
    "create_server",
    "reauthentication_mechanism_error",
    "reauthentication_principal_error",
    "session_lifetime_ms",
]

SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS, OAUTHBEARER)


def create_server(
    mechanism: str,
    *,
    credentials: CredentialLookup | None = None,
    oauth_validator: JwtValidator | None = None,
    clock_ms: Callable[[], int] | None = None,
) -> SaslServer:
    """A fresh server for one exchange. PLAIN and SCRAM need `credentials`; OAUTHBEARER needs
    `oauth_validator` and `clock_ms` (epoch milliseconds, for `exp`/`nbf`)."""
    if mechanism == PLAIN or mechanism in SCRAM_MECHANISMS:
        if credentials is None:
            raise ValueError(f"{mechanism} needs a credential store (users file)")
        if mechanism == PLAIN:
            return PlainSaslServer(credentials)
        return ScramSaslServer(mechanism, credentials)
    if mechanism == OAUTHBEARER:
        if oauth_validator is None or clock_ms is None:
            raise ValueError("OAUTHBEARER needs a JWT validator and a clock")
        return OAuthBearerSaslServer(oauth_validator, clock_ms)
    raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
