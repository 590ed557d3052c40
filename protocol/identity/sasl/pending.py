"""A SASL mechanism that cannot decide yet, without blocking (sans-IO).

OAUTHBEARER meets a token whose `kid` is not in the key set it has: the IO layer can fetch
the key set again (proxy/jwks.py), but the mechanism may not wait for it. It raises
`SaslPending` instead; the SASL gate (protocol/identity/saslgate.py) parks the connection, reads no
more of its requests, and evaluates the same token again once `subscribe`'s callback fires.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["SaslPending"]


class SaslPending(Exception):
    """Evaluate the same token again after `subscribe(callback)` has called `callback`.

    `subscribe` must call back exactly once, on the thread that runs the session (the event
    loop), whether what it waits for succeeded or not: the mechanism then decides with what
    it has. Deliberately not a SaslException, so it can never be taken for a failure."""

    def __init__(self, subscribe: Callable[[Callable[[], None]], None], reason: str) -> None:
        super().__init__(reason)
        self.subscribe = subscribe
        self.reason = reason
