"""Where the proxy's ACLs live: the contract every ACL store backend keeps.

Two backends (docs/authz.md): `file` (an ACL file, polled; proxy/aclstore/filewatch.py) and `kafka` (an
ordered, compacted log of ACL records in a Kafka topic shared by a fleet, KIP-801's model).
The server owns one backend; it loads the policy into the Authorizer, commits the changes the
Admin API asks for (protocol/effects.py `StoreAclChange`), and reports its state to /readyz and
/metrics.
`proxy/aclstore/backends.py` opens the backend the configuration names (a module of its own: each
backend imports this contract, so the factory cannot live here without an import cycle).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from aclgate.authz.model import (
    AclBinding,
)

#: the backends `--acl-store` chooses from
BACKENDS = ("file", "kafka")
#: the serve option that makes an ACL host with `/` a network (KIP-1276, opt-in)
CIDR_FLAG = "--acl-host-cidr"


def warn_literal_cidr_hosts(
    log: logging.Logger, bindings: Iterable[AclBinding], cidr_hosts: bool, source: str
) -> int:
    """Without `--acl-host-cidr`, an ACL host with `/` (`10.0.0.0/8`) is a literal string, as
    in Kafka 4.3.1: no client address equals it, so the ACL never applies. Log one WARNING per
    load naming how many such ACLs `source` holds and the flag; returns that number."""
    if cidr_hosts:
        return 0
    count = sum(1 for b in bindings if "/" in b.host)
    if count:
        log.warning(
            "%s: %d ACL(s) have a host with '/' (a CIDR network?) but %s is off: such a host is "
            "a literal string that no client address equals, so these ACLs never apply; start "
            "with %s to match client addresses in the network (KIP-1276, "
            'docs/authz.md, "CIDR hosts (KIP-1276, opt-in)")',
            source,
            count,
            CIDR_FLAG,
            CIDR_FLAG,
        )
    return count


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
    #: records read so far by the initial replay (kafka; /readyz shows it until `loaded`)
    records_replayed: int = 0
    #: changes that failed because another producer took the writer's transactional id (kafka)
    writer_fenced: int = 0


def unready_reason(status: AclStoreStatus, max_staleness: float) -> str | None:
    """Why the store makes the proxy unready (/readyz 503), or None.

    Not loaded yet; degraded (the store cannot be read or applied: this instance enforces a
    policy its store no longer holds and will not catch up by itself); or not in step with its
    source for more than `max_staleness` seconds (0: staleness alone never makes it unready)."""
    stale = status.seconds_stale
    if not status.loaded:
        return f"loading: {status.records_replayed} records replayed"
    if status.error is not None:
        return status.error
    if max_staleness and stale is not None and stale > max_staleness:
        return (
            f"stale: not in step with its source for {stale:.0f} s, more than "
            f"acl_store_max_staleness_seconds ({max_staleness:g})"
        )
    return None


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


#: code -> name, one table per enum (an enum's `.name` is a slow property; IntEnum members
#: of different enums with one code are equal, so they cannot share a table)
