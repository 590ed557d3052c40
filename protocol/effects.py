"""What a session asks of the IO layer: one typed vocabulary, in the style of h11's events.

A handler that needs something only the IO layer can do (ask the cluster, run a slow job off
the event loop, wait) does not call into the IO layer and does not raise to be re-run later:
it asks the session to `wait(effect, then)`. The session hands the effect to
`SessionIO.perform(token, effect)`; the IO layer does the work and answers with
`session.resume(token, result)`, which calls `then(result)` with the request's own state
still in hand (the request is parsed once). While a request waits, the requests behind it
wait in the session's backlog, so answers keep their order.

Notifications (`notify`) are effects nobody resumes: the IO layer acts on them or ignores
them (a sans-IO test ignores them all).

    session ──perform(token, LookUpTopicIds)──▶ IO layer ──Metadata──▶ cluster
    session ◀─────resume(token, {id: name})───── IO layer ◀─────────────┘

Each class is small, frozen and slotted: effects are values, compared and logged as such.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aclgate.authz.model import AclBinding

R = TypeVar("R", covariant=True)
Answer = TypeVar("Answer")

# ------------------------------------------------------------------- waits (resumed)


class Waits(Generic[R]):
    """An effect the IO layer resumes with a value of type R: `session.wait(effect, then)`
    types `then`'s argument from the effect."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class LookUpTopicIds(Waits["dict[uuid.UUID, str]"]):
    """Learn the names of these topic ids from the cluster. Resumed with {id: name} for those
    it knows (an id it does not know is a topic that does not exist); the shared topic-id
    cache learns them too."""

    ids: frozenset[uuid.UUID]


@dataclass(frozen=True, slots=True)
class LookUpPartitionCounts(Waits[dict[str, int] | None]):
    """Which of these topics exist, and with how many partitions. Resumed with
    {name: partition count} for the topics that exist, or None if the cluster cannot tell."""

    names: frozenset[str]


@dataclass(frozen=True, slots=True)
class TopicNames:
    """Every topic of the cluster as the proxy last listed it; `version` grows each time the
    list changes, so what was computed from one list is known to still hold."""

    version: int
    names: frozenset[str]


@dataclass(frozen=True, slots=True)
class ListTopicNames(Waits["TopicNames | None"]):
    """Every topic of the cluster, listed at most `max_age` seconds ago (the IO layer keeps
    one list for all connections and asks the cluster at most once at a time). Resumed with
    the list, or with None when the cluster cannot tell and no list is known yet."""

    max_age: float


@dataclass(frozen=True, slots=True)
class AskCluster(Waits["Answer | None"], Generic[Answer]):
    """Send `request` (a kio request body) to the cluster as the proxy itself, over the
    control connection, when an answer the broker computes for its caller must be computed
    again for the client (e.g. DescribeTopicPartitions pages). Resumed with the decoded
    answer, or with None when the cluster cannot be asked or answers something else."""

    request: Any
    answer: type[Answer]


@dataclass(frozen=True, slots=True)
class RunBlocking(Waits[object]):
    """Compute `function(*args)` off the event loop (password hashing, a DescribeAcls answer
    of 200,000 ACLs), queued fairly by `source` (the client's address). Resumed with its
    return value (or the exception it raised), or with `Busy` when the IO layer's queues are
    full and it was not run.

    Data, not a closure: `function` is a module-level function or a bound method, and what
    it works on travels in `args`, so an effect says what it computes when logged or
    compared (checked when made)."""

    function: Callable[..., Any]
    args: tuple[Any, ...] = ()
    source: str | None = None

    def __post_init__(self) -> None:
        name = getattr(self.function, "__qualname__", "")
        if "<" in name or getattr(self.function, "__closure__", None):
            raise TypeError(f"RunBlocking needs a named function, not {name or self.function!r}")


@dataclass(frozen=True, slots=True)
class Sleep(Waits[None]):
    """Resume after `seconds` (e.g. Kafka's connection.failed.authentication.delay.ms)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class NextTurn(Waits[None]):
    """Resume in a later turn of the event loop, once the work the decisions made so far
    queued (their audit records) has caught up: a request naming tens of thousands of
    resources is decided a slice at a time (protocol/enforce/slices.py), other clients'
    requests served between two slices (issue 20)."""


@dataclass(frozen=True, slots=True)
class AwaitKeySet(Waits[None]):
    """Resume once the listener's OAUTHBEARER key set, being fetched again because a token
    names a key id it lacks (`reason`), has been fetched (or the fetch failed)."""

    reason: str


@dataclass(frozen=True, slots=True)
class LookUpGroups(Waits[frozenset[str]]):
    """The names of the groups the directory (LDAP, --ldap-url) says `user` is a member of
    (`user`: the principal's name, after `User:`). Resumed with them, from the IO layer's
    cache or the directory, or with none when the directory cannot tell and what it said
    last is older than --ldap-max-stale (fail closed). The IO layer keeps the session's
    groups in step with the directory afterwards (protocol/identity/directory.py)."""

    user: str


@dataclass(frozen=True, slots=True)
class StoreAclChange(Waits["AclStoreFailure | None"]):
    """Commit one ACL change to the ACL store (CreateAcls, DeleteAcls): `removals` first,
    then `additions`, as one batch. Resumed with None once the change is durable in the store
    *and* in force on this instance (read-your-writes: the client's next request sees it), or
    with an `AclStoreFailure` when it could not be committed (nothing of it applied)."""

    additions: tuple[AclBinding, ...] = ()
    removals: tuple[AclBinding, ...] = ()


@dataclass(frozen=True, slots=True)
class AclStoreFailure:
    """Why a `StoreAclChange` was not committed (e.g. the ACL topic is unreachable)."""

    message: str


class Busy:
    """The result of a `RunBlocking` the IO layer could not queue."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Busy()"


BUSY = Busy()

# ------------------------------------------------------------- notifications (not resumed)


@dataclass(frozen=True, slots=True)
class AclChangeRefused:
    """The ACL Admin API refused a change before it reached the store (the DeleteAcls guard,
    protocol/enforce/acls.py): the IO layer audits it as a failed `acl_change` and logs it."""

    removals: tuple[AclBinding, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The connection's first SASL authentication succeeded: `principal` (e.g. User:alice)
    is who it is from now on."""

    principal: str


@dataclass(frozen=True, slots=True)
class AuthenticationResult:
    """One SASL exchange ended (for metrics)."""

    mechanism: str
    succeeded: bool


@dataclass(frozen=True, slots=True)
class AutoCreateTopics:
    """Have the cluster auto-create these topics (the principal may CREATE them)."""

    names: frozenset[str]


@dataclass(frozen=True, slots=True)
class DroppedApiKeys:
    """The cluster announced API keys the proxy does not serve (dropped from ApiVersions)."""

    keys: frozenset[int]


Wait = (
    LookUpTopicIds
    | LookUpPartitionCounts
    | ListTopicNames
    | AskCluster[Any]
    | RunBlocking
    | Sleep
    | NextTurn
    | AwaitKeySet
    | StoreAclChange
    | LookUpGroups
)
Notification = (
    Authenticated | AuthenticationResult | AutoCreateTopics | DroppedApiKeys | AclChangeRefused
)
Effect = Wait | Notification

#: the token of a notification: nothing will be resumed with it
NO_RESUME = 0
