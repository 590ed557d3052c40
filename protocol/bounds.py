"""How long a client-chosen string may be where the proxy keeps or writes it.

A request can carry a 30 KB client id or resource name (Kafka's strings are int16-sized), and
the proxy keeps such strings in caches (the client-id cache), keys (the audit log's
aggregation, the denial log's rate limit) and lines (audit events, the authorizer log). So
each is cut to a documented length there (docs/design.md, "Bounded client strings"); the
requests themselves are forwarded untouched.

A cut string keeps a recognisable prefix and ends with a marker giving the whole string's
length and a digest of it, e.g. `client-aaaa…[30000 chars sha256:1a2b3c4d5e6f7a8b]`: two
different long strings stay two different keys, and a reader can still correlate one string
across lines, instances and logs. Pure: no IO.
"""

from __future__ import annotations

import hashlib
from typing import Final

#: The request header's client id. Kafka has no limit; clients use short ids ("rdkafka",
#: "producer-1", "console-consumer-12345"), 256 is far more than any of them.
CLIENT_ID: Final = 256
#: Topic, group, transactional id, ...: longer than Kafka's longest valid topic name (249),
#: so a real topic is never cut; group and transactional ids of real applications are shorter.
RESOURCE_NAME: Final = 512
#: `type:name`. Principals come from credentials (users file, a trusted CA, a signed token),
#: but a certificate subject or a token's claim can be long: 1024 covers any practical one.
PRINCIPAL: Final = 1024

#: hex digits of the SHA-256 kept in the marker: 64 bits, so distinct strings do not collide
#: by chance, nor by a client's search, within any audit trail
DIGEST_CHARS: Final = 16


def bounded(text: str, limit: int) -> str:
    """`text` itself when at most `limit` characters, else a prefix and the marker, exactly
    `limit` characters in all (the marker is under 50: every limit above leaves a prefix)."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    marker = f"...[{len(text)} chars sha256:{digest[:DIGEST_CHARS]}]"
    return text[: max(0, limit - len(marker))] + marker


def bounded_or_none(text: str | None, limit: int) -> str | None:
    """`bounded` for an optional string (a null client id stays null)."""
    return text if text is None else bounded(text, limit)
