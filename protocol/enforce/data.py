"""Produce and Fetch: the hot path.

When every topic is allowed (the common case) the original request bytes are forwarded and
the response streams back untouched: the cost is one native decode of the request (record
batches stay bytes) and one cached authorize() per topic. A Produce of one named topic with
plain batches is not even decoded: its topic, partition count and acks are peeked from the
bytes (protocol.enforce.peek) and decoded only if the topic is denied. A consumer's Fetch is
peeked too (protocol.enforce.fetchpeek) and decoded only to strip or answer a denial or to
end a session.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar, cast

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta

from aclgate.authz.model import AclOperation, ResourceType
from aclgate.protocol.codec import decode_request, encode_response
from aclgate.protocol.enforce.base import (
    ApiHandler,
    KioBody,
    answer,
    error_body,
    forward,
    merge_rewriter,
    reencode_request,
)
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.context import AuthContext, NotReady
from aclgate.protocol.enforce.fetchpeek import (
    IdFetchTopic,
    NamedFetchTopic,
    PeekedFetch,
    peek_fetch,
)
from aclgate.protocol.enforce.fetchsessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchTopic,
    ForgottenTopic,
    Held,
    SessionAnswer,
    sessions_of,
)
from aclgate.protocol.enforce.peek import peek_produce
from aclgate.protocol.enforce.protected import cluster_grant_excludes
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.routing import rewriter_for
from aclgate.protocol.session import ProxySession, Slot, WithState
from aclgate.protocol.shapes.requests import ProduceRequest, ProduceRequestTopicData
from aclgate.protocol.versions import response_module

WRITE, READ, CLUSTER_ACTION = AclOperation.WRITE, AclOperation.READ, AclOperation.CLUSTER_ACTION
TOPIC, TXN = ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID
_ATTRIBUTES = struct.Struct(">h")
_TRANSACTIONAL = 0x10


#: a topic of a Produce request, every version (named by `name`, from v13 by `topic_id`:
#: read by field name)
ProduceTopic = ProduceRequestTopicData


if TYPE_CHECKING:  # the shapes that dataclasses.replace changes: kio's frozen dataclasses
    from _typeshed import DataclassInstance

    class FetchRequest(DataclassInstance, Protocol):
        """What the handler reads of a Fetch request, v4-18; the session fields exist from
        v7 and are read only past the version test (the replica id is read by name: a field
        up to v14, inside `replica_state` from v15)."""

        @property
        def topics(self) -> Sequence[FetchTopic]: ...
        @property
        def session_id(self) -> int: ...
        @property
        def session_epoch(self) -> int: ...
        @property
        def forgotten_topics_data(self) -> Sequence[ForgottenTopic]: ...


#: a topic of a peeked Fetch request
PeekedTopic = NamedFetchTopic | IdFetchTopic

#: an entry of a request's topic array, split by verdict
_Entry = TypeVar("_Entry")


def has_transactional_records(topics: Iterable[ProduceTopic]) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: the first batch of any partition is
    transactional (magic 2, attributes bit 4). Read from the uncompressed batch header."""
    for topic in topics:
        for partition in topic.partition_data:
            records = partition.records
            if (
                records
                and len(records) >= 23
                and records[16] == 2
                and _ATTRIBUTES.unpack_from(records, 21)[0] & _TRANSACTIONAL
            ):
                return True
    return False


def topic_names(
    ctx: AuthContext,
    header: RequestHeader,
    entries: Sequence[object],
    id_field: str = "topic_id",
    name_field: str = "name",
) -> list[str | None]:
    """The topic name of each entry, resolving ids through the cache (None = unknown id).
    Entries of any API and version: the fields are read by the names given."""
    first = entries[0] if entries else None
    if first is None or hasattr(first, name_field):
        return [getattr(e, name_field) for e in entries]
    resolved = ctx.topic_names_of([getattr(e, id_field) for e in entries])
    return [resolved[getattr(e, id_field)] for e in entries]


def split_topics(
    ctx: AuthContext,
    header: RequestHeader,
    entries: Sequence[_Entry],
    names: Sequence[str | None],
    operation: AclOperation,
    partitions: str,
) -> tuple[list[_Entry], list[_Entry], list[_Entry]]:
    """(allowed, denied, unknown-id) entries; each distinct topic authorized once, with
    refCount = its partitions in the request (Kafka's filterByAuthorized over partitions,
    the field named `partitions`)."""
    if len(entries) == 1:  # the common case on the data path
        entry, name = entries[0], names[0]
        if name is None:
            return [], [], [entry]
        if ctx.check(header, operation, TOPIC, name, True, len(getattr(entry, partitions))):
            return [entry], [], []
        return [], [entry], []
    counts: dict[str, int] = {}
    for entry, name in zip(entries, names, strict=True):
        if name is not None:
            counts[name] = counts.get(name, 0) + len(getattr(entry, partitions))
    verdict = {n: ctx.check(header, operation, TOPIC, n, True, c) for n, c in counts.items()}
    allowed: list[_Entry]
    denied: list[_Entry]
    unknown: list[_Entry]
    allowed, denied, unknown = [], [], []
    for entry, name in zip(entries, names, strict=True):
        if name is None:
            unknown.append(entry)
        elif verdict[name]:
            allowed.append(entry)
        else:
            denied.append(entry)
    return allowed, denied, unknown


class ProduceHandler(ApiHandler):
    granularity = "per topic"
    topic_id_paths = (("topic_data",),)  # v13+
    aliases: ClassVar[dict[str, str]] = {
        "responses": "topic_data",
        "partition_responses": "partition_data",
    }

    def describe(self) -> str:
        return (
            "if the first batch of any partition is transactional: `WRITE TRANSACTIONAL_ID[transactional_id]` "
            "(null id = denied; every partition gets 53); then `WRITE TOPIC[name]` per topic "
            "(all partitions of a denied topic get 29). acks=0 with a denial: the allowed part is "
            "forwarded and the connection closed, as the broker does"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: ProduceRequest,
    ) -> None:
        topics = request.topic_data
        acks = request.acks
        if has_transactional_records(topics):
            txn = request.transactional_id
            if txn is None or not ctx.check(header, WRITE, TXN, txn):
                if acks == 0:
                    session.close_after_flush(
                        "transactional produce denied with acks=0 (Kafka closes)"
                    )
                else:
                    code = ErrorCode.transactional_id_authorization_failed
                    answer(session, header, error_body(header, request, code, self.aliases))
                return
        names = topic_names(ctx, header, topics)
        allowed, denied, unknown = split_topics(ctx, header, topics, names, WRITE, "partition_data")
        self._finish(session, header, frame, request, acks, allowed, denied, unknown)

    def __call__(self, session: ProxySession, header: RequestHeader, frame: Frame) -> None:
        """One plain named topic (the common case): decide from the peeked bytes; the
        request is decoded only to answer a denial. Everything else: the full path."""
        peeked = peek_produce(frame, header)
        if peeked is None:
            return super().__call__(session, header, frame)
        acks, topic, partitions = peeked
        ctx = session.context
        if isinstance(topic, str):
            name = topic
        else:  # Produce v13 names the topic by id: a known one is decided here too
            known = ctx.policy.topic_ids.name(topic)
            if known is None:
                return super().__call__(session, header, frame)
            name = known
        try:
            allowed = ctx.check(header, WRITE, TOPIC, name, True, partitions)
        except NotReady:  # nothing was recorded: the full path answers it
            return super().__call__(session, header, frame)
        if allowed:
            if acks == 0:
                session.forward_without_response(frame)
            else:
                session.forward(header, frame, rewriter_for(header))
            return
        request = decode_request(frame, header)
        self._finish(session, header, frame, request, acks, [], list(request.topic_data), [])

    def _finish(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        request: ProduceRequest,
        acks: int,
        allowed: Sequence[ProduceTopic],
        denied: Sequence[ProduceTopic],
        unknown: Sequence[ProduceTopic],
    ) -> None:
        """Forward, strip or answer once every topic has been decided."""
        if not denied and not unknown:
            if acks == 0:
                session.forward_without_response(frame)
            else:
                forward(session, header, frame)
            return
        if acks == 0:
            if allowed:
                # Kafka appends the allowed part, then closes: the client sees the close once
                # the records are in the log. So the allowed part goes with acks=1, and the
                # close comes after the broker's answer, which the client never sees.
                stripped = dataclasses.replace(request, topic_data=tuple(allowed), acks=i16(1))
                forward(session, header, reencode_request(frame, header, stripped), _unanswered)
            session.close_after_flush("produce with acks=0 had unauthorized topics (Kafka closes)")
            return
        errors = self._errors(header, denied, ErrorCode.topic_authorization_failed)
        errors += self._errors(header, unknown, ErrorCode.unknown_topic_id)
        if not allowed:
            answer(session, header, error_body(header, request, ErrorCode.none, responses=errors))
            return
        stripped = dataclasses.replace(request, topic_data=tuple(allowed))
        forward(
            session,
            header,
            reencode_request(frame, header, stripped),
            WithState(merge_rewriter, ("responses", errors)),
        )

    def _errors(
        self, header: RequestHeader, entries: Iterable[ProduceTopic], code: ErrorCode
    ) -> tuple[KioBody, ...]:
        cls = response_module(header.api_key, header.api_version).TopicProduceResponse
        return tuple(build(cls, code, e, self.aliases) for e in entries)


def _unanswered(session: ProxySession, slot: Slot, frame: Frame) -> bytes:
    """The broker's answer to a request the client sent with acks=0: not for the client."""
    return b""


# ------------------------------------------------------------------------------------ Fetch

#: (session_id offset, session_epoch offset) in the body, by version (docs/design.md, "Fetch
#: sessions")
_SESSION_AT = {**dict.fromkeys(range(7, 15), (17, 21)), **dict.fromkeys(range(15, 19), (13, 17))}
_II = struct.Struct(">ii")
_NO_WAIT = i32Timedelta.parse(timedelta(0))


def replica_id(request: object) -> int:
    state = getattr(request, "replica_state", None)
    return int(state.replica_id) if state is not None else int(getattr(request, "replica_id", -1))


def decoded(
    frame: Frame,
    header: RequestHeader,
    request: FetchRequest | PeekedFetch,
    *entries: Sequence[FetchTopic],
) -> tuple[FetchRequest, tuple[list[FetchTopic], ...]]:
    """The request as kio decodes it, and `entries` (topics of `request`) as the same topics
    of the decoded one: a peeked request is decoded only when a denial must be stripped or
    answered, or a session ended, and its topics carry their position in the request."""
    if not isinstance(request, PeekedFetch):
        return request, tuple(list(e) for e in entries)
    full: FetchRequest = decode_request(frame, header)
    topics = full.topics
    return full, tuple([topics[cast(PeekedTopic, t).index] for t in e] for e in entries)


def _answer_with(session: ProxySession, slot: Slot, frame: Frame, answer: bytes) -> bytes:
    """The broker's answer to a session close is replaced by the proxy's own."""
    return answer


class FetchHandler(ApiHandler):
    """Consumers keep their KIP-227 fetch sessions: the partitions each session of the
    connection holds are tracked (protocol.enforce.fetchsessions), every partition a request
    adds is authorized (all of them in a full request), and an incremental fetch that adds
    nothing new is forwarded unchanged. A session holding a partition that is no longer
    allowed (a new ACL snapshot) or asked to take a denied one is closed at the broker and the
    client told FETCH_SESSION_ID_NOT_FOUND, so it comes back with a full request, whose denied
    partitions are refused (docs/design.md, "Fetch sessions")."""

    topic_id_paths = (("topics",),)  # v13+

    granularity = "per topic"

    def describe(self) -> str:
        return (
            "follower fetch (replica id >= 0): `CLUSTER_ACTION CLUSTER`, never covering a protected "
            "topic or a topic id (every partition 29 if denied); "
            "consumer: `READ TOPIC[name]` per topic a request names, an unresolvable topic id gives "
            "100; an incremental fetch session's partitions are re-authorized when the ACLs change "
            "and the session ended (70) if one is denied"
        )

    def __call__(self, session: ProxySession, header: RequestHeader, frame: Frame) -> None:
        """A consumer's fetch (the common case) is decided from the peeked bytes
        (protocol.enforce.fetchpeek) and decoded with kio only to strip or answer a denial."""
        peeked = peek_fetch(frame, header)
        if peeked is None:
            return super().__call__(session, header, frame)
        ctx = session.context
        name = ctx.policy.topic_ids.name
        for topic in peeked.topics:  # ids the cache lacks: looked up first (`dispatch`)
            topic_id = getattr(topic, "topic_id", None)
            if topic_id is not None and name(topic_id) is None:
                return self.dispatch(session, ctx, header, frame, peeked)
        self._handle(session, ctx, header, frame, peeked)

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: FetchRequest | PeekedFetch,
    ) -> None:
        topics = request.topics
        v = header.api_version
        if replica_id(request) >= 0:
            policy = ctx.policy
            # CLUSTER_ACTION covers every topic, but not one aclgate keeps for itself (the ACL
            # store's): a follower fetch naming it, or naming topics by id, is refused
            assert not isinstance(request, PeekedFetch)  # the peek leaves followers alone
            if ctx.check_cluster(header, CLUSTER_ACTION) and not cluster_grant_excludes(
                policy.protected_topics,
                policy.authorizer.super_users,
                ctx.principal,
                (getattr(t, "topic", None) for t in topics),
            ):
                forward(session, header, self._patched(frame, header, request, 0, FINAL_EPOCH))
            else:
                self._answer_alone(
                    session, header, request, topics, ErrorCode.topic_authorization_failed
                )
            return
        names = topic_names(ctx, header, topics, name_field="topic")
        allowed, denied, unknown = split_topics(ctx, header, topics, names, READ, "partitions")
        if v < 7:  # no sessions before v7
            self._full(session, header, frame, request, allowed, denied, unknown, 0)
            return
        sessions = sessions_of(session)
        sid, epoch = int(request.session_id), int(request.session_epoch)
        held = sessions.held.pop(sid, None) if sid else None  # put back if it goes on
        key = "topic_id" if v >= 13 else "topic"
        version = ctx.policy.authorizer.version
        if epoch > 0 and held is not None:  # an incremental fetch in a session of ours
            if denied or unknown or not self._still_allowed(ctx, header, held, version):
                self._end(session, header, frame, request, sid)
                return
            held.add(topics, names, key)
            held.forget(request.forgotten_topics_data, key)
            sessions.held[sid] = held

            def went_on(error: int, new_sid: int) -> None:
                if error or new_sid != sid:  # the broker ended or refused it
                    sessions.held.pop(sid, None)

            forward(session, header, frame, SessionAnswer(rewriter_for(header), v >= 12, went_on))
            return
        # A full fetch (epoch 0 opens a session, -1 has none), or a session this connection
        # does not know (then fetched sessionless: never another connection's session).
        own = sid if held is not None else 0
        if epoch == INITIAL_EPOCH and not denied and not unknown:
            opened = Held(version=version)
            opened.add(topics, names, key)

            def bind(error: int, new_sid: int) -> None:
                if not error and new_sid:
                    sessions.bind(new_sid, opened)

            frame = self._patched(frame, header, request, own, INITIAL_EPOCH)
            forward(session, header, frame, SessionAnswer(rewriter_for(header), v >= 12, bind))
            return
        self._full(session, header, frame, request, allowed, denied, unknown, own)

    def _full(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        request: FetchRequest | PeekedFetch,
        allowed: Sequence[FetchTopic],
        denied: Sequence[FetchTopic],
        unknown: Sequence[FetchTopic],
        own: int,
    ) -> None:
        """Fetched without a session (closing `own`, a session of this connection, if any):
        forwarded whole, stripped of its denied topics, or answered alone."""
        if not denied and not unknown:
            forward(session, header, self._patched(frame, header, request, own, FINAL_EPOCH))
            return
        request, (allowed, denied, unknown) = decoded(
            frame, header, request, allowed, denied, unknown
        )
        errors = self._errors(header, denied, ErrorCode.topic_authorization_failed)
        errors += self._errors(header, unknown, ErrorCode.unknown_topic_id)
        if not allowed and not own:
            answer(
                session,
                header,
                error_body(header, request, ErrorCode.none, responses=errors, session_id=0),
            )
            return
        changes: dict[str, object] = {"topics": tuple(allowed)}
        if header.api_version >= 7:
            changes.update(session_id=own, session_epoch=FINAL_EPOCH, forgotten_topics_data=())
        stripped = reencode_request(frame, header, dataclasses.replace(request, **changes))
        forward(session, header, stripped, WithState(merge_rewriter, ("responses", errors)))

    @staticmethod
    def _still_allowed(ctx: AuthContext, header: RequestHeader, held: Held, version: int) -> bool:
        """What the session holds, re-authorized if the ACLs changed since it last was."""
        if held.version == version:
            return True
        for name, partitions in held.topics.values():
            if not ctx.check(header, READ, TOPIC, name, True, len(partitions)):
                return False
        held.version = version
        return True

    def _end(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        request: FetchRequest | PeekedFetch,
        sid: int,
    ) -> None:
        """End session `sid` the way a broker does: the broker is asked to close it (an
        empty sessionless fetch that does not wait) and the client is answered
        FETCH_SESSION_ID_NOT_FOUND, so it opens a new one with a full request."""
        request, _ = decoded(frame, header, request)
        close = dataclasses.replace(
            request,
            session_id=sid,
            session_epoch=FINAL_EPOCH,
            topics=(),
            forgotten_topics_data=(),
            max_wait=_NO_WAIT,
            min_bytes=i32(0),
        )
        body = error_body(
            header, request, ErrorCode.fetch_session_id_not_found, responses=(), session_id=0
        )
        ended = encode_response(header.correlation_id, body)
        forward(
            session, header, reencode_request(frame, header, close), WithState(_answer_with, ended)
        )

    def _answer_alone(
        self,
        session: ProxySession,
        header: RequestHeader,
        request: FetchRequest,
        topics: Sequence[FetchTopic],
        code: ErrorCode,
    ) -> None:
        errors = self._errors(header, topics, code)
        answer(
            session,
            header,
            error_body(header, request, ErrorCode.none, responses=errors, session_id=0),
        )

    def _errors(
        self, header: RequestHeader, entries: Iterable[FetchTopic], code: ErrorCode
    ) -> tuple[KioBody, ...]:
        mod = response_module(header.api_key, header.api_version)
        aliases = {"partition_index": "partition", "partitions": "partitions"}
        out: list[KioBody] = []
        for entry in entries:
            partitions = tuple(build(mod.PartitionData, code, p, aliases) for p in entry.partitions)
            out.append(
                build(mod.FetchableTopicResponse, code, entry, aliases, {"partitions": partitions})
            )
        return tuple(out)

    @staticmethod
    def _patched(
        frame: Frame,
        header: RequestHeader,
        request: FetchRequest | PeekedFetch,
        session_id: int,
        epoch: int,
    ) -> Frame:
        """The request bytes with (session_id, session_epoch) set in place."""
        offsets = _SESSION_AT.get(header.api_version)
        if offsets is None or (request.session_id == session_id and request.session_epoch == epoch):
            return frame
        patched = bytearray(frame)
        _II.pack_into(patched, header.body_offset + offsets[0], session_id, epoch)
        return bytes(patched)
