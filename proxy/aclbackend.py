"""Where the proxy's ACLs live: the contract every ACL store backend keeps.

Two backends (docs/authz.md): `file` (an ACL file, polled; proxy/aclstore.py) and `kafka` (an
ordered, compacted log of ACL records in a Kafka topic shared by a fleet, KIP-801's model).
The server owns one backend; it loads the policy into the Authorizer, commits the changes the
Admin API asks for (protocol/effects.py `StoreAclChange`), and reports its state to /readyz and
/metrics.
`proxy/aclstores.py` opens the backend the configuration names (a module of its own: each
backend imports this contract, so the factory cannot live here without an import cycle).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from aclgate.authz.model import AclBinding

#: the backends `--acl-store` chooses from
BACKENDS = ("file", "kafka")


class AclStoreError(Exception):
    """A change could not be committed; nothing of it was applied."""


@dataclass(frozen=True, slots=True)
class AclStoreStatus:
    """What /readyz and /metrics say about the store."""

    backend: str  # "file" | "kafka"
    #: the policy has been loaded (kafka: replayed to the high-water mark seen at start);
    #: until then only super users are authorized
    loaded: bool
    #: the last record applied (kafka), or None
    applied_offset: int | None
    #: sha256 of the canonical ACL set in force: equal on two instances that hold the same policy
    fingerprint: str
    #: why the store is degraded (an undecodable record, an unreadable file), or None
    error: str | None = None
    #: seconds since the store was last known to be in step with its source, or None if it is
    seconds_stale: float | None = None


class AclBackend(Protocol):
    """An ACL store backend, driven by the server on its event loop."""

    async def start(self) -> None:
        """Load the policy (the initial replay); returns when the authorizer may serve
        everyone, or raises AclStoreError if the policy cannot be loaded."""

    async def change(self, additions: Sequence[AclBinding], removals: Sequence[AclBinding]) -> None:
        """Commit `removals` then `additions` as one batch; returns once the change is durable
        and in force in this instance's authorizer (read-your-writes). Raises AclStoreError."""

    def status(self) -> AclStoreStatus: ...

    async def stop(self) -> None: ...


def acl_fingerprint(bindings: Iterable[AclBinding]) -> str:
    """sha256 of the canonical form of an ACL set: each binding as compact JSON with sorted
    keys, the lines sorted and joined by newlines. Independent of order, duplicates and of
    the backend, so two instances holding the same policy report the same fingerprint."""
    lines = sorted(
        {json.dumps(b.to_dict(), sort_keys=True, separators=(",", ":")) for b in bindings}
    )
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()
