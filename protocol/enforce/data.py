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
import uuid
from collections.abc import Generator, Iterable, Sequence
from datetime import timedelta
from typing import ClassVar, Final, TypeVar, cast

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta

from aclgate.authz.model import AclOperation, ResourceType
from aclgate.protocol.codec import decode_request, encode_response, frame_with_size
from aclgate.protocol.enforce.base import (
    ApiHandler,
    KioBody,
    answer,
    error_body,
    forward,
    knowing_ids,
    merge_rewriter,
    partition_by_verdict,
    reencode_request,
    refuse_not_ready,
    spliced_answer,
    spliced_merge_rewriter,
)
from aclgate.protocol.enforce.build import NAME_MARK, build
from aclgate.protocol.enforce.context import AuthContext, NotReady
from aclgate.protocol.enforce.entrybytes import (
    ENTRY_BYTES_FROM,
    Entry,
    EntryPlan,
    EntrySpec,
    WalkedEntries,
    entry_plan,
)
from aclgate.protocol.enforce.entrybytes import walking as walking_entries
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
    Held,
    SessionAnswer,
    sessions_of,
)
from aclgate.protocol.enforce.peek import peek_produce
from aclgate.protocol.enforce.producebytes import (
    ID_MARK,
    TopicTemplate,
    WalkedProduce,
    WalkedTopic,
    stripped,
    template,
    walking,
)
from aclgate.protocol.enforce.protected import cluster_grant_excludes
from aclgate.protocol.enforce.slices import decide_names, in_turns
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.lengths import length_prefix
from aclgate.protocol.routing import rewriter_for
from aclgate.protocol.session import ProxySession, Slot, WithState
from aclgate.protocol.shapes.requests import (
    FetchRequest,
    ProduceRequest,
    ProduceRequestTopicData,
    SessionFetchRequest,
)
from aclgate.protocol.versions import request_class, response_module

WRITE, READ, CLUSTER_ACTION = AclOperation.WRITE, AclOperation.READ, AclOperation.CLUSTER_ACTION
TOPIC, TXN = ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID
_ATTRIBUTES: Final = struct.Struct(">h")
_TRANSACTIONAL: Final = 0x10


#: a topic of a Produce request, every version (named by `name`, from v13 by `topic_id`:
#: read by field name)
ProduceTopic = ProduceRequestTopicData


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
        request is decoded only to answer a denial. Several topics: walked as bytes, a slice
        per turn (protocol/enforce/producebytes.py). What neither reads: the full path."""
        peeked = peek_produce(frame, header)
        if peeked is None:
            in_turns(
                session,
                walking(frame, header),
                lambda walk: self._walked(session, header, frame, walk),
            )
            return
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

    # a request of several topics, walked as bytes (protocol/enforce/producebytes.py)

    def _walked(
        self, session: ProxySession, header: RequestHeader, frame: Frame, walk: WalkedProduce | None
    ) -> None:
        """`handle`'s decisions, on the walked request: the transactional id, then each
        topic (named, or by an id whose name is looked up first)."""
        if walk is None:  # what the walk does not follow: the full path reads it
            super().__call__(session, header, frame)
            return
        ctx = session.context
        if walk.transactional:
            txn = walk.transactional_id
            try:
                allowed = txn is not None and ctx.check(header, WRITE, TXN, txn)
            except NotReady:  # nothing was recorded
                refuse_not_ready(session)
                return
            if not allowed:
                if walk.acks == 0:
                    session.close_after_flush(
                        "transactional produce denied with acks=0 (Kafka closes)"
                    )
                else:
                    code = ErrorCode.transactional_id_authorization_failed
                    self._answer(session, header, walk, walk.topics, code, [])
                return
        knowing_ids(
            session,
            ctx,
            [t.key for t in walk.topics if isinstance(t.key, uuid.UUID)],
            lambda known: self._decide_walked(session, known, header, frame, walk),
        )

    def _decide_walked(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        walk: WalkedProduce,
    ) -> None:
        topics = walk.topics
        if topics and isinstance(topics[0].key, uuid.UUID):
            resolved = ctx.topic_names_of([cast(uuid.UUID, t.key) for t in topics])
            names = [resolved[cast(uuid.UUID, t.key)] for t in topics]
        else:
            names = [cast(str, t.key) for t in topics]
        counts: dict[str, int] = {}
        for topic, name in zip(topics, names, strict=True):
            if name is not None:
                counts[name] = counts.get(name, 0) + topic.partitions
        try:
            decide_names(
                session,
                ctx,
                header,
                WRITE,
                TOPIC,
                counts,
                True,
                lambda verdict: self._split_walked(session, header, frame, walk, names, verdict),
            )
        except NotReady:  # raised by the first check, before anything was recorded
            refuse_not_ready(session)

    def _split_walked(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        walk: WalkedProduce,
        names: list[str | None],
        verdict: dict[str, bool],
    ) -> None:
        allowed, denied, unknown = partition_by_verdict(walk.topics, names, verdict)
        acks = walk.acks
        if not denied and not unknown:
            _forward_whole(session, header, frame, acks)
            return
        if acks == 0:
            if allowed:  # as `_finish`: the allowed part with acks=1, the close after it
                forward(session, header, stripped(frame, header, walk, allowed, 1), _unanswered)
            session.close_after_flush("produce with acks=0 had unauthorized topics (Kafka closes)")
            return
        if not allowed:
            self._answer(
                session, header, walk, denied, ErrorCode.topic_authorization_failed, unknown
            )
            return
        marked = self._template(header, ErrorCode.topic_authorization_failed).marked
        count = len(denied) + len(unknown)

        def send(items: bytes) -> None:
            """The allowed topics to the broker; its answer merged with the denied ones."""
            merged = WithState(spliced_merge_rewriter, ("responses", marked, items, count))
            forward(session, header, stripped(frame, header, walk, allowed, acks), merged)

        in_turns(
            session,
            self._rendered(header, walk, denied, ErrorCode.topic_authorization_failed, unknown),
            send,
        )

    def _template(self, header: RequestHeader, code: ErrorCode) -> TopicTemplate:
        return template(header.api_version, code, tuple(self.aliases.items()))

    def _rendered(
        self,
        header: RequestHeader,
        walk: WalkedProduce,
        topics: list[WalkedTopic],
        code: ErrorCode,
        unknown: list[WalkedTopic],
    ) -> Generator[None, None, bytes]:
        """The answer's entries for `topics` with `code` on every partition, then `unknown`
        with UNKNOWN_TOPIC_ID, a slice per step."""
        items = yield from self._template(header, code).render(walk, topics)
        if unknown:
            unknown_template = self._template(header, ErrorCode.unknown_topic_id)
            items += yield from unknown_template.render(walk, unknown)
        return items

    def _answer(
        self,
        session: ProxySession,
        header: RequestHeader,
        walk: WalkedProduce,
        topics: list[WalkedTopic],
        code: ErrorCode,
        unknown: list[WalkedTopic],
    ) -> None:
        """Answer a request none of whose topics goes to the broker (`_rendered`)."""
        marked = self._template(header, code).marked
        empty = request_class(header.api_key, header.api_version)(
            transactional_id=None, acks=i16(1), timeout=_NO_WAIT, topic_data=()
        )
        one = dataclasses.replace(
            error_body(header, empty, ErrorCode.none, self.aliases), responses=(marked,)
        )
        count = len(topics) + len(unknown)
        in_turns(
            session,
            self._rendered(header, walk, topics, code, unknown),
            lambda items: session.respond(
                header, spliced_answer(header.correlation_id, one, marked, count, items)
            ),
        )

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
            _forward_whole(session, header, frame, acks)
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


def _fetch_with(plan: EntryPlan, walked: WalkedEntries, kept: list[Entry]) -> bytes:
    """The walked Fetch request with only the topics `kept` (their bytes as they came) and
    no forgotten topics, as `_full_decoded` sends it."""
    buf, flexible = walked.buf, plan.flexible
    after = [
        length_prefix(0, flexible) if field.name == "forgotten_topics_data" else buf[start:end]
        for field, start, end in zip(plan.after, walked.after_at, walked.after_at[1:], strict=False)
    ]
    return frame_with_size(
        buf[4 : walked.array_at]
        + length_prefix(len(kept), flexible)
        + b"".join([buf[start:end] for _k, start, end, _r in kept])
        + b"".join(after)
        + buf[walked.after_at[-1] :]
    )


def _forward_whole(session: ProxySession, header: RequestHeader, frame: Frame, acks: int) -> None:
    """The request as it came: with acks=0 the broker sends no answer to wait for."""
    if acks == 0:
        session.forward_without_response(frame)
    else:
        forward(session, header, frame)


def _unanswered(session: ProxySession, slot: Slot, frame: Frame) -> bytes:
    """The broker's answer to a request the client sent with acks=0: not for the client."""
    return b""


# ------------------------------------------------------------------------------------ Fetch

#: Fetch's topics answered per topic by protocol/enforce/entrybytes.py (as `_errors` builds)
FETCH_TOPICS: Final = EntrySpec(
    "topics",
    "responses",
    TOPIC,
    name=lambda topic: topic.topic,
    aliases={"partition_index": "partition", "partitions": "partitions"},
)

#: (session_id offset, session_epoch offset) in the body, by version (docs/design.md, "Fetch
#: sessions")
_SESSION_AT: Final = {
    **dict.fromkeys(range(7, 15), (17, 21)),
    **dict.fromkeys(range(15, 19), (13, 17)),
}
_II: Final = struct.Struct(">ii")
_NO_WAIT: Final = i32Timedelta.parse(timedelta(0))


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
        names: list[str | None] = []
        for topic in peeked.topics:  # ids the cache lacks: looked up first (`dispatch`)
            if isinstance(topic, NamedFetchTopic):
                names.append(topic.topic)
                continue
            known = name(topic.topic_id)
            if known is None:
                return self.dispatch(session, ctx, header, frame, peeked)
            names.append(known)
        peeked.names = names
        try:  # `_handle`, inlined
            self.handle(session, ctx, header, frame, peeked)
        except NotReady:
            refuse_not_ready(session)

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
                ctx.groups,
            ):
                forward(session, header, self._patched(frame, header, request, 0, FINAL_EPOCH))
            else:
                self._answer_alone(
                    session, header, request, topics, ErrorCode.topic_authorization_failed
                )
            return
        names = (
            request.names
            if isinstance(request, PeekedFetch) and request.names is not None
            else topic_names(ctx, header, topics, name_field="topic")
        )
        allowed, denied, unknown = split_topics(ctx, header, topics, names, READ, "partitions")
        if v < 7:  # no sessions before v7
            self._full(session, header, frame, request, allowed, denied, unknown, 0)
            return
        sessions = sessions_of(session)
        # v7+: kio's classes have the session fields, as a peeked request does
        sessioned: SessionFetchRequest | PeekedFetch = request  # type: ignore[assignment]
        sid, epoch = int(sessioned.session_id), int(sessioned.session_epoch)
        held = sessions.held.pop(sid, None) if sid else None  # put back if it goes on
        key = "topic_id" if v >= 13 else "topic"
        version = ctx.policy.authorizer.version
        if epoch > 0 and held is not None:  # an incremental fetch in a session of ours
            if denied or unknown or not self._still_allowed(ctx, header, held, version):
                self._end(session, header, frame, request, sid)
                return
            held.add(topics, names, key)
            held.forget(sessioned.forgotten_topics_data, key)
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
        plan = (
            entry_plan(FETCH_TOPICS, header.api_key, header.api_version)
            if len(frame) >= ENTRY_BYTES_FROM
            else None
        )
        if plan is not None:
            topics = request.topics
            at = {id(t): i for i, t in enumerate(topics)}
            picked = (
                [at[id(t)] for t in allowed],
                [at[id(t)] for t in denied],
                [at[id(t)] for t in unknown],
            )
            in_turns(
                session,
                walking_entries(plan, frame, header),
                lambda walked: self._full_as_bytes(
                    session, header, frame, request, plan, walked, picked, own
                ),
            )
            return
        request, (allowed, denied, unknown) = decoded(
            frame, header, request, allowed, denied, unknown
        )
        self._full_decoded(session, header, frame, request, allowed, denied, unknown, own)

    def _full_decoded(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        request: FetchRequest,
        allowed: Sequence[FetchTopic],
        denied: Sequence[FetchTopic],
        unknown: Sequence[FetchTopic],
        own: int,
    ) -> None:
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

    def _full_as_bytes(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        request: FetchRequest | PeekedFetch,
        plan: EntryPlan,
        walked: WalkedEntries | None,
        picked: tuple[list[int], list[int], list[int]],
        own: int,
    ) -> None:
        """`_full` for a large request (issue 20: 12,000 denied topics in 1 MiB took 0.5 s as
        kio objects): the topics walked in place (protocol/enforce/entrybytes.py), the
        denied ones answered from their rendered bytes, the allowed ones' bytes spliced into
        the request forwarded."""
        if walked is None:  # what the walk does not follow: decoded, as before
            full, _ = decoded(frame, header, request)
            kept, refused, unnamed = ([full.topics[i] for i in part] for part in picked)
            self._full_decoded(session, header, frame, full, kept, refused, unnamed, own)
            return
        allowed, denied, unknown = ([walked.entries[i] for i in part] for part in picked)
        buf = walked.buf
        items = b"".join([rendered for _k, _s, _e, rendered in denied])
        if unknown:
            assert plan.unknown_walk is not None  # unknown: only topics named by id
            unknown_walk = plan.unknown_walk
            items += b"".join([unknown_walk(buf, start, end)[0] for _k, start, end, _r in unknown])
        first = denied[0] if denied else unknown[0]
        one = decode_request(_fetch_with(plan, walked, [first]), header)
        mark = {"topic_id": ID_MARK} if plan.by_id else {"topic": NAME_MARK}
        code = ErrorCode.topic_authorization_failed if denied else ErrorCode.unknown_topic_id
        marked = self._errors(header, [dataclasses.replace(one.topics[0], **mark)], code)[0]
        count = len(denied) + len(unknown)
        if not allowed and not own:
            stub = decode_request(_fetch_with(plan, walked, []), header)
            body = error_body(header, stub, ErrorCode.none, responses=(marked,), session_id=0)
            session.respond(
                header, spliced_answer(header.correlation_id, body, marked, count, items)
            )
            return
        stripped = _fetch_with(plan, walked, allowed)
        stripped = bytes(self._patched(stripped, header, request, own, FINAL_EPOCH))
        spliced = ("responses", marked, items, count)
        forward(session, header, stripped, WithState(spliced_merge_rewriter, spliced))

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
        if offsets is None:  # before v7: no session fields
            return frame
        sessioned: SessionFetchRequest | PeekedFetch = request  # type: ignore[assignment]
        if sessioned.session_id == session_id and sessioned.session_epoch == epoch:
            return frame
        patched = bytearray(frame)
        _II.pack_into(patched, header.body_offset + offsets[0], session_id, epoch)
        return bytes(patched)
