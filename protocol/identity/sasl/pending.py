"""A SASL mechanism that cannot decide yet, without blocking (sans-IO).

OAUTHBEARER meets a token whose `kid` is not in the key set it has: the IO layer can fetch
the key set again (proxy/security/jwks.py), but the mechanism may not wait for it. It raises
`SaslPending` instead; the SASL gate (protocol/identity/saslgate.py) parks the connection, reads no
more of its requests, asks the IO layer to wait for the fetch (protocol/effects.py
`AwaitKeySet`), and evaluates the same token again once it has ended.
"""

from __future__ import annotations

__all__ = ["SaslPending"]


class SaslPending(Exception):
    """Evaluate the same token again once the key set fetch under way has ended (the key
    source's `when_fetched`), whether it succeeded or not: the mechanism then decides with
    what it has. Deliberately not a SaslException, so it can never be taken for a failure."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
