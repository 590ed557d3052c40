"""Deciding the many resources of one request a slice per turn of the event loop.

One request may name tens of thousands of resources: a 1 MiB OffsetFetch names 58,000 groups,
a 256 KiB DeleteGroups 24,000. Deciding them all at once, each decision recorded (metrics,
authorizer log, audit), held the event loop of every client of the worker 0.2-0.25 s (issue
20). Up to `DECISIONS_PER_TURN` checks are made at once; the rest wait for the `NextTurn`
effect, which the IO layer resumes in a later turn once the audit records already queued have
been made, other clients' requests served in between. The requests behind wait in the
session's backlog, as they wait behind any effect, so answers keep their order.

A request of up to `DECISIONS_PER_TURN` checks (every request of a well-behaved client) is
decided at once, as before: `then` runs before `decide_each` returns, and an authorizer that
is not ready raises `NotReady` from the first check, before anything was recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TypeVar, cast

from aclgate.authz.model import AclOperation, ResourceType
from aclgate.protocol.effects import NextTurn
from aclgate.protocol.enforce.context import AuthContext
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.session import ProxySession

T = TypeVar("T")

#: checks made in one turn of the event loop at most (some 3-5 ms of a worker's time, the
#: decisions' records included, measured through `aclgate serve`: bench/loop_stall.py)
DECISIONS_PER_TURN = 2_048


def decide_each(
    session: ProxySession,
    ctx: AuthContext,
    header: RequestHeader,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Sequence[str],
    log_if_denied: bool,
    then: Callable[[list[bool]], None],
    ref_counts: Sequence[int] | None = None,
) -> None:
    """`then(verdicts)`: for each of `names`, in order, whether `ctx.check` lets it through
    (`ref_counts`: Kafka's reference count of each, else 1); made a slice per turn past
    `DECISIONS_PER_TURN`."""
    counts = ref_counts if ref_counts is not None else [1] * len(names)
    types = [resource_type] * len(names)
    in_turns(session, _deciding(ctx, header, operation, types, names, counts, log_if_denied), then)


def in_turns(
    session: ProxySession,
    work: Generator[None, None, T],
    then: Callable[[T], None],
    _resumed: bool = False,
) -> None:
    """Run `work` a step per turn of the event loop (each `yield` ends a turn: the NextTurn
    effect), then `then(what it returned)`. The first step runs at once; when `work` took
    more than one turn, `then` gets a turn of its own (it is work on the whole request, such
    as splitting its entries by verdict, and must not add to the last slice's)."""
    try:
        next(work)
    except StopIteration as done:
        result: T = done.value
        if _resumed:
            session.wait(NextTurn(), lambda _: then(result))
        else:
            then(result)
        return
    session.wait(NextTurn(), lambda _: in_turns(session, work, then, True))


def decide_targets(
    session: ProxySession,
    ctx: AuthContext,
    header: RequestHeader,
    operation: AclOperation,
    targets: Sequence[tuple[ResourceType, str]],
    log_if_denied: bool,
    then: Callable[[list[bool]], None],
) -> None:
    """`decide_each` for resources of several types: `then(verdicts)` for each (type, name)
    of `targets`, in order, `DECISIONS_PER_TURN` a turn."""
    types = [resource_type for resource_type, _name in targets]
    names = [name for _type, name in targets]
    counts = [1] * len(targets)
    in_turns(session, _deciding(ctx, header, operation, types, names, counts, log_if_denied), then)


def _deciding(
    ctx: AuthContext,
    header: RequestHeader,
    operation: AclOperation,
    types: Sequence[ResourceType],
    names: Sequence[str],
    counts: Sequence[int],
    log_if_denied: bool,
) -> Generator[None, None, list[bool]]:
    """The checks, `DECISIONS_PER_TURN` a step (parallel sequences: no object per check)."""
    check = ctx.check
    verdicts: list[bool] = []
    for start in range(0, len(names), DECISIONS_PER_TURN):
        if start:
            yield
        stop = start + DECISIONS_PER_TURN
        verdicts.extend(
            check(header, operation, resource_type, name, log_if_denied, count)
            for resource_type, name, count in zip(
                types[start:stop], names[start:stop], counts[start:stop], strict=True
            )
        )
    return verdicts


def at_once(work: Generator[None, None, T]) -> T:
    """What `work` returns, all its steps run now (for callers outside a session)."""
    while True:
        try:
            next(work)
        except StopIteration as done:
            return cast(T, done.value)


#: entries rendered as bytes in one turn at most (a few ms)
RENDERED_PER_TURN = 8_192


def decide_names(
    session: ProxySession,
    ctx: AuthContext,
    header: RequestHeader,
    operation: AclOperation,
    resource_type: ResourceType,
    counts: dict[str, int],
    log_if_denied: bool,
    then: Callable[[dict[str, bool]], None],
) -> None:
    """`then({name: allowed})` for distinct names and their reference counts (Kafka's
    filterByAuthorized: each distinct name is authorized once)."""
    decide_each(
        session,
        ctx,
        header,
        operation,
        resource_type,
        list(counts),
        log_if_denied,
        lambda verdicts: then(dict(zip(counts, verdicts, strict=True))),
        list(counts.values()),
    )
