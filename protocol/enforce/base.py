"""The building blocks of the API table: checks, and the two shapes most APIs take.

* `Whole`: a list of checks on the request as a unit (group, transactional id, cluster). The
  first denied check answers the whole request locally with its error code; the request never
  reaches the broker.
* `PerEntry`: one check per resource named in a top-level array (topics, groups, config
  resources). Denied entries are stripped from the request; the rest is forwarded and the
  denied entries' error results are merged into the broker's answer. When nothing is allowed
  the proxy answers alone.

Both first run `pre` checks (e.g. OffsetCommit's group READ before its topics). APIs that fit
neither shape are handlers of their own in the family modules, built from the same helpers.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Protocol, TypeAlias, TypeVar

from kio.schema.errors import ErrorCode
from mypy_extensions import mypyc_attr

from aclgate.authz.model import CLUSTER_NAME, AclOperation, ResourceType
from aclgate.protocol.codec import (
    MalformedResponse,
    decode_request,
    decode_response,
    encode_entity,
    encode_response,
    frame_with_size,
    framed,
)
from aclgate.protocol.effects import LookUpTopicIds
from aclgate.protocol.enforce.build import NAME_MARK, Aliases, NamedEntry, build
from aclgate.protocol.enforce.context import AuthContext, NotReady
from aclgate.protocol.enforce.slices import RENDERED_PER_TURN, at_once, decide_names, in_turns
from aclgate.protocol.enforce.topics import ids_at, unknown_ids
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import MalformedRequest, RequestHeader
from aclgate.protocol.lengths import length_prefix, read_length
from aclgate.protocol.routing import forward, rewriter_for
from aclgate.protocol.session import ProxySession, Slot, WithState
from aclgate.protocol.versions import request_class, response_class, response_module

_SIZE: Final = struct.Struct(">i")

#: a decoded kio request or response of any API and version: the generic shapes below read
#: and replace its fields by name (`array`, `response_array`), so no one type describes it
KioBody: TypeAlias = Any

#: Kafka's error code per resource type (AclEntry.authorizationError)
DENIED_CODE: Final = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
    ResourceType.DELEGATION_TOKEN: ErrorCode.delegation_token_authorization_failed,
}

OP_DOC: Final = {op: op.name for op in AclOperation}
TYPE_DOC: Final = {t: t.name for t in ResourceType}


@dataclass(frozen=True)
class Check:
    """One authorize() call: `operation` on `resource_type` named by `name(request)`."""

    operation: AclOperation
    resource_type: ResourceType
    #: the resource name taken from the request (None for the cluster)
    name: Callable[[KioBody], str | None] | None = None
    log_if_denied: bool = True
    #: when given, the check applies only to requests for which this returns True
    when: Callable[[RequestHeader, KioBody], bool] | None = None
    code: ErrorCode | None = None
    doc_name: str = ""

    @property
    def error(self) -> ErrorCode:
        return self.code if self.code is not None else DENIED_CODE[self.resource_type]

    def resource(self, request: KioBody) -> str:
        if self.resource_type == ResourceType.CLUSTER:
            return CLUSTER_NAME
        name = self.name(request) if self.name else None
        if name is None:
            raise MalformedRequest(f"no {self.resource_type.name} name in the request")
        return name

    def applies(self, header: RequestHeader, request: KioBody) -> bool:
        return self.when is None or self.when(header, request)

    def describe(self) -> str:
        target = (
            "CLUSTER"
            if self.resource_type == ResourceType.CLUSTER
            else f"{self.resource_type.name}[{self.doc_name or 'name'}]"
        )
        quiet = " (logIfDenied=false)" if not self.log_if_denied else ""
        return f"`{self.operation.name} {target}`{quiet}"


def first_denied(
    ctx: AuthContext, header: RequestHeader, request: KioBody, checks: Iterable[Check]
) -> Check | None:
    """Run checks in order; the first denied one, or None when all pass."""
    for check in checks:
        if check.applies(header, request) and not ctx.check(
            header,
            check.operation,
            check.resource_type,
            check.resource(request),
            check.log_if_denied,
        ):
            return check
    return None


# --------------------------------------------------------------------- sending and answering


def answer(session: ProxySession, header: RequestHeader, body: KioBody) -> None:
    session.respond(header, encode_response(header.correlation_id, body))


def error_body(
    header: RequestHeader,
    request: KioBody,
    code: ErrorCode,
    aliases: Aliases | None = None,
    **overrides: Any,
) -> KioBody:
    return build(
        response_class(header.api_key, header.api_version),
        code,
        request,
        aliases,
        overrides or None,
    )


def forward_if_cluster(
    session: ProxySession,
    ctx: AuthContext,
    header: RequestHeader,
    frame: Frame,
    request: KioBody,
    operation: AclOperation,
    **error_fields: Any,
) -> None:
    """A cluster operation checked for the whole request: forward, or answer it with 31."""
    if ctx.check_cluster(header, operation):
        forward(session, header, frame)
    else:
        answer(
            session,
            header,
            error_body(header, request, ErrorCode.cluster_authorization_failed, **error_fields),
        )


def reencode_request(frame: Frame, header: RequestHeader, body: KioBody) -> bytes:
    """The original header bytes (unknown tags included) with a new body."""
    return framed(frame[4 : header.body_offset], body, MalformedRequest)


def merged_response(frame: Frame, slot: Slot, merge: Callable[[KioBody], KioBody]) -> bytes:
    """Decode the broker's answer, let `merge` change it, then apply address rewriting."""
    body = merge(decode_response(frame, slot.api_key, slot.api_version))
    out = encode_response(slot.correlation_id, body)
    return out


# --------------------------------------------------------------------------- API shapes


@mypyc_attr(allow_interpreted_subclasses=True)
class ApiHandler:
    """One row of the API table. Subclasses implement `handle`; `describe` feeds the docs."""

    granularity = "whole"

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: KioBody,
    ) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    #: where the request names topics by id: paths of arrays whose entries have `topic_id`
    #: (("topics",), ("groups", "topics")); their unknown ids are looked up before `handle`.
    #: A ClassVar: compiled (mypyc), an instance attribute's default is read from the
    #: instance, so a Python subclass's own value (DeleteTopics, OffsetFetch) went unseen
    topic_id_paths: ClassVar[tuple[tuple[str, ...], ...]] = ()

    def topic_ids(self, session: ProxySession, request: KioBody) -> list[uuid.UUID | None]:
        """The topic ids `handle` will need named (those at `topic_id_paths`)."""
        return ids_at(request, self.topic_id_paths) if self.topic_id_paths else []

    def __call__(self, session: ProxySession, header: RequestHeader, frame: Frame) -> None:
        self.dispatch(session, session.context, header, frame, decode_request(frame, header))

    def dispatch(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: KioBody,
    ) -> None:
        """`handle`, once, after the two things every handler may need first: the names of
        the topic ids the request names and the cache lacks (asked of the cluster, `handle`
        then continuing with what it found: ids still unknown are answered as unknown), and
        an authorizer that is ready."""
        unknown = unknown_ids(ctx.policy.topic_ids, self.topic_ids(session, request))
        if unknown:
            look_up_then(
                session,
                ctx,
                unknown,
                lambda looked_up: self._handle(session, looked_up, header, frame, request),
            )
            return
        self._handle(session, ctx, header, frame, request)

    def _handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: KioBody,
    ) -> None:
        try:
            self.handle(session, ctx, header, frame, request)
        except NotReady:
            refuse_not_ready(session)


def knowing_ids(
    session: ProxySession,
    ctx: AuthContext,
    ids: Sequence[uuid.UUID | None],
    then: Callable[[AuthContext], None],
) -> None:
    """`then(ctx)` at once when the cache knows every topic id of `ids`, else once the
    cluster has been asked for the ones it lacks (`look_up_then`)."""
    unknown = unknown_ids(ctx.policy.topic_ids, ids) if ids else frozenset()
    if unknown:
        look_up_then(session, ctx, unknown, then)
    else:
        then(ctx)


def look_up_then(
    session: ProxySession,
    ctx: AuthContext,
    unknown: frozenset[uuid.UUID],
    then: Callable[[AuthContext], None],
) -> None:
    """Ask the cluster for the names of the topic ids `unknown`; `then(ctx)` continues with
    a context that knows what it found (ids still unknown are answered as unknown)."""
    session.wait(LookUpTopicIds(unknown), lambda found: then(ctx.with_looked_up(unknown, found)))


E = TypeVar("E")


def partition_by_verdict(
    listed: list[E], names: list[str | None], verdict: dict[str, bool]
) -> tuple[list[E], list[E], list[E]]:
    """(allowed, denied, unknown-id) entries of `listed` by their names' verdicts."""
    allowed: list[E] = []
    denied: list[E] = []
    unknown: list[E] = []
    for entry, name in zip(listed, names, strict=True):
        if name is None:
            unknown.append(entry)
        else:
            (allowed if verdict[name] else denied).append(entry)
    return allowed, denied, unknown


def refuse_not_ready(session: ProxySession) -> None:
    """The authorizer has no policy yet (only with --early-start, whose listener opens before
    the ACL store has loaded) and the principal is not a super user: refused as a listener
    that is not open yet refuses it, by a close once the answers ahead are written, so the
    client connects again with its usual backoff, as it retries a broker that is starting.
    Kafka answers such a request on an early-start listener UNKNOWN_SERVER_ERROR (its
    AuthorizerNotReadyException has no error code), which clients do not retry: a deliberate
    difference (docs/design.md)."""
    session.close_after_flush(
        "the ACL policy is not loaded yet: only super users are served (--early-start); "
        "the client connects again",
        "acls_loading",
    )


@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass
class Unchecked(ApiHandler):
    """APIs Kafka does not authorize (ApiVersions, telemetry): forwarded as they are."""

    why: str = ""

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: KioBody,
    ) -> None:
        forward(session, header, frame)

    def describe(self) -> str:
        return f"none ({self.why})" if self.why else "none"


@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass
class Whole(ApiHandler):
    """Checks on the request as a unit; the first denied one answers every part of it."""

    checks: tuple[Check, ...]
    aliases: Aliases | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: KioBody,
    ) -> None:
        denied = first_denied(ctx, header, request, self.checks)
        if denied is None:
            forward(session, header, frame)
        else:
            answer(
                session,
                header,
                error_body(header, request, denied.error, self.aliases, **self.overrides),
            )

    def describe(self) -> str:
        return ", then ".join(c.describe() for c in self.checks)


@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass
class PerEntry(ApiHandler):
    """Per-resource checks over the top-level array `array` of the request.

    `name` reads the resource name from an entry. The response's array `response_array` gets
    one error entry per denied request entry, built by mirroring it (`aliases` maps response
    field names to request field names where they differ).
    """

    array: str
    response_array: str
    operation: AclOperation
    resource_type: ResourceType
    name: Callable[[KioBody], str | None] = lambda e: e.name
    pre: tuple[Check, ...] = ()
    aliases: Aliases | None = None
    entry_overrides: dict[str, Any] = field(default_factory=dict)
    #: extra entry-level check (e.g. CreateTopics' cluster shortcut); returns True to allow all
    shortcut: Check | None = None
    log_if_denied: bool = True
    granularity: str = "per entry"
    doc_name: str = "name"
    #: for arrays of plain names (DeleteGroups): the response field that echoes the name
    entry_key: str | None = None
    #: top-level fields of the answer to a denied `pre` check (OffsetDelete: no topics)
    pre_overrides: dict[str, Any] = field(default_factory=dict)
    #: forward even when every entry is denied, as Kafka still asks the coordinator then
    forward_empty: bool = False

    def topic_ids(self, session: ProxySession, request: KioBody) -> list[uuid.UUID | None]:
        """A per-topic array may name its topics by id (`names` resolves them)."""
        if self.resource_type != ResourceType.TOPIC:
            return []
        return ids_at(request, ((self.array,),))

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: KioBody,
    ) -> None:
        denied_pre = first_denied(ctx, header, request, self.pre)
        if denied_pre is not None:
            answer(
                session,
                header,
                error_body(header, request, denied_pre.error, self.aliases, **self.pre_overrides),
            )
            return
        entries = getattr(request, self.array) or ()
        if self.shortcut is not None and ctx.check(
            header,
            self.shortcut.operation,
            self.shortcut.resource_type,
            self.shortcut.resource(request),
            self.shortcut.log_if_denied,
        ):
            forward(session, header, frame)
            return
        self.split_in_turns(
            session,
            ctx,
            header,
            entries,
            lambda parts: self.finish(session, header, frame, request, *parts),
        )

    def names(self, ctx: AuthContext, entries: Sequence[KioBody]) -> list[str | None]:
        """Resource names of the entries; topic ids are resolved (None = unknown id)."""
        first = entries[0] if entries else None
        if (
            self.resource_type == ResourceType.TOPIC
            and first is not None
            and getattr(first, "name", None) is None
            and getattr(first, "topic_id", None) is not None
        ):
            resolved = ctx.topic_names_of([e.topic_id for e in entries])
            return [resolved[e.topic_id] for e in entries]
        return [self.name(e) for e in entries]

    def split(
        self, ctx: AuthContext, header: RequestHeader, entries: Iterable[KioBody]
    ) -> tuple[list[KioBody], list[KioBody], list[KioBody]]:
        """(allowed, denied, unknown-id) entries. Each distinct name is authorized once
        (refCount = its occurrences), as Kafka's filterByAuthorized does."""
        listed, names, counts = self._named(ctx, entries)
        verdict = {
            name: ctx.check(
                header, self.operation, self.resource_type, name, self.log_if_denied, count
            )
            for name, count in counts.items()
        }
        return partition_by_verdict(listed, names, verdict)

    def split_in_turns(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        entries: Iterable[KioBody],
        then: Callable[[tuple[list[KioBody], list[KioBody], list[KioBody]]], None],
    ) -> None:
        """`split`, a slice of names per turn of the event loop past
        protocol/enforce/slices.py's `DECISIONS_PER_TURN`; `then(parts)` once decided."""
        listed, names, counts = self._named(ctx, entries)
        self.decide_names(
            session,
            ctx,
            header,
            counts,
            lambda verdict: then(partition_by_verdict(listed, names, verdict)),
        )

    def decide_names(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        counts: dict[str, int],
        then: Callable[[dict[str, bool]], None],
    ) -> None:
        """`then({name: allowed})` for the distinct names `counts` (and their reference
        counts), a slice per turn past protocol/enforce/slices.py's `DECISIONS_PER_TURN`."""
        decide_names(
            session,
            ctx,
            header,
            self.operation,
            self.resource_type,
            counts,
            self.log_if_denied,
            then,
        )

    def _named(
        self, ctx: AuthContext, entries: Iterable[KioBody]
    ) -> tuple[list[KioBody], list[str | None], dict[str, int]]:
        """(the entries, their names, each distinct name's occurrences)."""
        listed = list(entries)
        names = self.names(ctx, listed)
        counts: dict[str, int] = {}
        for name in names:
            if name is not None:
                counts[name] = counts.get(name, 0) + 1
        return listed, names, counts

    def error_entry(
        self, header: RequestHeader, entry: KioBody, code: ErrorCode | None = None
    ) -> KioBody:
        cls = _array_item(response_class(header.api_key, header.api_version), self.response_array)
        overrides = dict(self.entry_overrides)
        source = entry
        if self.entry_key is not None and not dataclasses.is_dataclass(entry):
            overrides[self.entry_key] = entry
            source = None
        return build(
            cls, code or DENIED_CODE[self.resource_type], source, self.aliases, overrides or None
        )

    def finish(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        request: KioBody,
        allowed: list[KioBody],
        denied: list[KioBody],
        unknown: Sequence[KioBody] = (),
    ) -> None:
        if not denied and not unknown:
            forward(session, header, frame)
            return
        if unknown:
            self._finish_rendered(session, header, frame, request, allowed, denied, unknown, None)
            return
        in_turns(
            session,
            self.rendering(header, denied),
            lambda rendered: self._finish_rendered(
                session, header, frame, request, allowed, denied, unknown, rendered
            ),
        )

    def _finish_rendered(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        request: KioBody,
        allowed: list[KioBody],
        denied: list[KioBody],
        unknown: Sequence[KioBody],
        rendered: tuple[KioBody, bytes] | None,
    ) -> None:
        if rendered is not None:
            marked, items = rendered
            if not allowed and not self.forward_empty:
                empty = dataclasses.replace(request, **{self.array: ()})  # not mirrored again
                session.respond(header, self.all_denied(header, empty, marked, len(denied), items))
                return
            stripped = dataclasses.replace(request, **{self.array: tuple(allowed)})
            spliced = (self.response_array, marked, items, len(denied))
            forward(
                session,
                header,
                reencode_request(frame, header, stripped),
                WithState(spliced_merge_rewriter, spliced),
            )
            return
        errors = tuple(self.error_entry(header, e) for e in denied)
        errors += tuple(self.error_entry(header, e, ErrorCode.unknown_topic_id) for e in unknown)
        if not allowed and not self.forward_empty:
            body = error_body(header, request, ErrorCode.none, self.aliases)
            answer(session, header, dataclasses.replace(body, **{self.response_array: errors}))
            return
        stripped = dataclasses.replace(request, **{self.array: tuple(allowed)})
        forward(
            session,
            header,
            reencode_request(frame, header, stripped),
            WithState(merge_rewriter, (self.response_array, errors)),
        )

    def all_denied(
        self, header: RequestHeader, empty: KioBody, marked: KioBody, count: int, items: bytes
    ) -> bytes:
        """The answer to a request whose every entry is denied: `empty` (the request without
        its entries) answered, its array the `count` encoded error entries `items`, `marked`
        one of their shape."""
        body = error_body(header, empty, ErrorCode.none, self.aliases)
        one = dataclasses.replace(body, **{self.response_array: (marked,)})
        return spliced_answer(header.correlation_id, one, marked, count, items)

    def denied_items(
        self, header: RequestHeader, denied: list[KioBody]
    ) -> tuple[KioBody, bytes] | None:
        """`rendering`, all at once."""
        return at_once(self.rendering(header, denied))

    def rendering(
        self, header: RequestHeader, denied: list[KioBody]
    ) -> Generator[None, None, tuple[KioBody, bytes] | None]:
        """(one marked error entry, the encoded error entries of `denied`), rendered as
        bytes from one `NamedEntry` per shape (the entry's fields but its name): the bytes kio
        would encode, some 20 times faster (issue 20), `RENDERED_PER_TURN` a step. None:
        entries named by id. Plain names (DeleteGroups' `entry_key`) are entries of one
        shape."""
        shapes: dict[tuple[Any, ...], NamedEntry] = {}
        items: list[bytes] = []
        code = DENIED_CODE[self.resource_type]
        marked: KioBody | None = None
        for done, entry in enumerate(denied):
            if done and not done % RENDERED_PER_TURN:
                yield
            name = self.name(entry)
            if name is None:
                return None  # entries named by id
            if self.entry_key is not None and isinstance(entry, str):
                shape: tuple[Any, ...] = ()
                mark: KioBody = NAME_MARK
            else:
                fields = _name_field(entry, name)
                if fields is None:
                    return None
                field, others = fields
                shape = tuple([getattr(entry, f) for f in others])
                mark = None
            template = shapes.get(shape)
            if template is None:
                if mark is None:
                    mark = dataclasses.replace(entry, **{field: NAME_MARK})
                marked = self.error_entry(header, mark, code)
                template = shapes[shape] = NamedEntry(marked)
            items.append(template.render(name))
        if marked is None or not next(iter(shapes.values())).echoes:
            return None  # an answer that does not name its entries: the marker is not unique
        return marked, b"".join(items)

    def describe(self) -> str:
        pre = ", then ".join(c.describe() for c in self.pre)
        own = f"`{self.operation.name} {self.resource_type.name}[{self.doc_name}]` per entry"
        if not self.log_if_denied:
            own += " (logIfDenied=false)"
        if self.shortcut is not None:
            own = f"{self.shortcut.describe()} allows all, else {own}"
        return f"{pre}, then {own}" if pre else own


#: decides a cluster operation for a request and reports it; True lets the request through
ClusterDecision = Callable[[AuthContext, RequestHeader, AclOperation], bool]


def _cluster_check(ctx: AuthContext, header: RequestHeader, operation: AclOperation) -> bool:
    return ctx.check_cluster(header, operation)


@dataclass(frozen=True)
class HeaderCheck:
    """A cluster check Kafka makes on a request as a whole, before it looks at any entry
    (AuthHelper.authorizeClusterOperation), decided here from the header alone, before the
    body is decoded: a denied client's 100,000 entries cost no decoding (issue 20).

    The denied answer has one result per entry of the request's first field, a top-level
    array (CreateAcls' creations, DeleteAcls' filters): its count is read from its length
    prefix, checked against the bytes that could hold that many entries, and the answer's
    `response_array` is that many copies of `entry(response module)`, built as bytes."""

    operation: AclOperation
    response_array: str
    entry: Callable[[Any], KioBody]
    #: the fewest bytes one request entry takes (a count needing more than the frame holds
    #: is a request Kafka cannot parse: closed, as Kafka closes)
    min_entry_bytes: int = 8
    decide: ClusterDecision = _cluster_check

    def served(self, handler: ApiHandler) -> ApiHandler:
        """The handler of an allowed request: the row's own (it makes no cluster check)."""
        return handler

    def denied_answer(self, header: RequestHeader, frame: Frame) -> bytes:
        flexible = request_class(header.api_key, header.api_version).__flexible__
        try:
            count, used = read_length(frame, header.body_offset, flexible)
        except Exception as exc:  # a prefix cut short (struct.error, kio's varint reader)
            raise MalformedRequest(f"no entry count: {exc!r}") from exc
        room = len(frame) - header.body_offset - used
        if not 0 <= count * self.min_entry_bytes <= room:
            raise MalformedRequest(f"{count} entries cannot fit in {room} bytes")
        entry = self.entry(response_module(header.api_key, header.api_version))
        one = build(
            response_class(header.api_key, header.api_version),
            ErrorCode.none,
            overrides={self.response_array: (entry,)},
        )
        return repeated_answer(header.correlation_id, one, entry, count)


def repeated_answer(correlation_id: int, one: KioBody, entry: KioBody, count: int) -> bytes:
    """The framed answer `one`, whose only array holds `entry` once, with that array holding
    `count` copies of it instead: bytes repeated, no `count` objects built or encoded."""
    return spliced_answer(correlation_id, one, entry, count, encode_entity(entry) * count)


def spliced_answer(
    correlation_id: int, one: KioBody, entry: KioBody, count: int, items: bytes
) -> bytes:
    """The framed answer `one`, whose array holds `entry` once (an entry found nowhere
    else in it), with that array holding the `count` encoded entries `items` instead."""
    flexible = type(one).__flexible__
    whole = encode_response(correlation_id, one)
    marker = length_prefix(1, flexible) + encode_entity(entry)
    at = whole.index(marker, 4)
    return frame_with_size(
        whole[4:at] + length_prefix(count, flexible) + items + whole[at + len(marker) :]
    )


class HeaderDecided(Protocol):
    """What `DecidedOnHeader` needs of a check decided on the header: `HeaderCheck` (an
    answer counted from one array's length prefix), `denied_bytes.MirroredCheck` (an answer
    mirroring the request's nested entries, walked as bytes)."""

    @property
    def operation(self) -> AclOperation: ...

    @property
    def decide(self) -> ClusterDecision: ...

    def served(self, handler: ApiHandler) -> ApiHandler: ...

    def denied_answer(self, header: RequestHeader, frame: Frame) -> bytes: ...


class DecidedOnHeader:
    """A table row's handler behind its header check: a denied request is answered without
    decoding its body; an allowed one goes to `check.served(handler)`, which makes no
    cluster check of its own for it."""

    __slots__ = ("check", "handler")

    def __init__(self, check: HeaderDecided, handler: ApiHandler):
        self.check = check
        self.handler = check.served(handler)

    def __call__(self, session: ProxySession, header: RequestHeader, frame: Frame) -> None:
        try:
            allowed = self.check.decide(session.context, header, self.check.operation)
        except NotReady:  # refused as `ApiHandler.dispatch` refuses it
            refuse_not_ready(session)
            return
        if allowed:
            self.handler(session, header, frame)
        else:
            session.respond(header, self.check.denied_answer(header, frame))


#: entry class -> (the field holding its name, its other fields)
_NAME_FIELDS: Final[dict[type, tuple[str, tuple[str, ...]]]] = {}


def _name_field(entry: KioBody, name: str | None) -> tuple[str, tuple[str, ...]] | None:
    """(the string field `name` was read from, the others) of a request entry: entries
    alike in the others answer alike but for the name."""
    cls = type(entry)
    if cls in _NAME_FIELDS:
        return _NAME_FIELDS[cls]
    if not (dataclasses.is_dataclass(entry) and isinstance(name, str)):
        return None
    fields = [f.name for f in dataclasses.fields(entry)]
    holders = [f for f in fields if getattr(entry, f) is name]
    if len(holders) != 1:  # not found, or two fields holding one (interned) string
        return None  # decided on a later entry
    found = _NAME_FIELDS[cls] = (holders[0], tuple(f for f in fields if f != holders[0]))
    return found


def _array_item(cls: type, array: str) -> type:
    from aclgate.protocol.enforce.build import _entity_item, _field_info, _unwrap_optional

    for name, tp, _meta, _default in _field_info(cls):
        if name == array:
            item = _entity_item(_unwrap_optional(tp)[0])
            if item is not None:
                return item
    raise KeyError(f"{cls.__name__} has no entity array {array!r}")


def merge_rewriter(
    session: ProxySession, slot: Slot, frame: Frame, denied: tuple[str, tuple[KioBody, ...]]
) -> bytes | memoryview:
    """Append the denied entries (`denied` = (array, entries)) to the broker's answer, then
    apply whatever address rewriting the API needs."""
    array, errors = denied

    def merge(body: KioBody) -> KioBody:
        return dataclasses.replace(body, **{array: tuple(getattr(body, array)) + errors})

    return then_addresses(session, slot, merged_response(frame, slot, merge))


def splice_marked(
    out: bytes | memoryview, slot: Slot, array: str, marked: KioBody, items: bytes, count: int
) -> bytes:
    """The framed answer `out`, whose `array` holds `marked` once (an entry found nowhere
    else in it), with `marked` replaced by the `count` encoded entries `items` and the
    array's count made right."""
    body = decode_response(out, slot.api_key, slot.api_version)
    item = encode_entity(marked)  # compared as bytes: kio reads a zero UUID back as None
    before: list[bytes] = []
    for entry in getattr(body, array):
        encoded = encode_entity(entry)
        if encoded == item:
            break
        before.append(encoded)
    else:
        raise ValueError(f"the marked entry is not in the answer's {array}")
    entries = len(getattr(body, array))
    return _splice(bytes(out), item, sum(map(len, before)), entries, count, items, body)


def _splice(
    whole: bytes, item: bytes, before: int, entries: int, count: int, items: bytes, body: KioBody
) -> bytes:
    """`whole` (a framed answer whose array of `entries` holds the encoded entry `item` once,
    after `before` bytes of entries) with `item` replaced by the `count` encoded `items`."""
    flexible = type(body).__flexible__
    at = whole.index(item, 4)
    prefix = length_prefix(entries, flexible)
    start = at - before - len(prefix)
    assert whole[start : start + len(prefix)] == prefix, "the array's count is where it must be"
    return frame_with_size(
        whole[4:start]
        + length_prefix(entries - 1 + count, flexible)
        + whole[start + len(prefix) : at]
        + items
        + whole[at + len(item) :]
    )


def spliced_merge_rewriter(
    session: ProxySession, slot: Slot, frame: Frame, state: tuple[str, KioBody, bytes, int]
) -> bytes | memoryview:
    """`merge_rewriter` for denied entries already encoded (`PerEntry.denied_items`): state
    (array, its marked entry, the entries' bytes, their count). The broker's answer is
    encoded with the marked entry last in `array`, which is then replaced by the bytes (the
    answer decoded once: it may hold a Fetch's records)."""
    array, marked, items, count = state
    body = decode_response(frame, slot.api_key, slot.api_version)
    entries = tuple(getattr(body, array))
    whole = encode_response(
        slot.correlation_id, dataclasses.replace(body, **{array: (*entries, marked)})
    )
    before = sum(len(encode_entity(e)) for e in entries)
    out = _splice(whole, encode_entity(marked), before, len(entries) + 1, count, items, body)
    return then_addresses(session, slot, out)


def then_addresses(session: ProxySession, slot: Slot, out: bytes) -> bytes | memoryview:
    """The address rewrite the request's API needs, applied to an answer already changed."""
    assert slot.header is not None
    address = rewriter_for(slot.header)
    return address(session, slot, out) if address is not None else out


__all__ = [
    "DENIED_CODE",
    "ApiHandler",
    "Check",
    "MalformedResponse",
    "PerEntry",
    "Unchecked",
    "Whole",
    "answer",
    "error_body",
    "first_denied",
    "forward",
    "merge_rewriter",
    "reencode_request",
    "then_addresses",
]
