"""Share groups (KIP-932) and streams groups (KIP-1071): the checks of Kafka 4.3's KafkaApis.

* Heartbeats: READ on the group (30, nothing else in the answer); then DESCRIBE on every topic
  the request names (share: subscribed topic names; streams: every topic of the topology),
  any denied: 29 for the whole request, so a member never joins with a topic it cannot see.
* Describes: DESCRIBE per group (30 entries), and a described group whose members or topology
  name a topic the principal may not DESCRIBE becomes a bare 29 entry (no members, no
  topology), so its topics are never learnt.
* ShareFetch / ShareAcknowledge: READ on the group, then READ per topic; denied partitions
  get 29 (acknowledgements on them too), the rest is forwarded. Share sessions are kept per
  connection (`ShareSessions`, docs/design.md "Share sessions").
* Share group offsets: Describe per group (DESCRIBE) then per topic (DESCRIBE), Alter (READ
  group, READ topic), Delete (DELETE group, READ topic) -- see the table rows.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import ModuleType

from kio.schema.errors import ErrorCode

from aclgate.authz.model import AclOperation, ResourceType
from aclgate.protocol.enforce.base import (
    ApiHandler,
    KioBody,
    PerEntry,
    answer,
    error_body,
    merged_response,
    reencode_request,
    then_addresses,
)
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.context import AuthContext
from aclgate.protocol.enforce.groups import (
    HIDDEN_TOPIC_GROUP,
    Decided,
    group_entries,
)
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.routing import forward
from aclgate.protocol.session import ProxySession, Slot, WithState
from aclgate.protocol.shapes.requests import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroups,
    DescribeShareGroupOffsetsRequestGroupsTopics,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareFetchRequestForgottenTopicsData,
    ShareGroupHeartbeatRequest,
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatRequestTopology,
)
from aclgate.protocol.versions import response_class, response_module

READ, DESCRIBE, CREATE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.CREATE
GROUP, TOPIC, CLUSTER = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER
GROUP_DENIED = ErrorCode.group_authorization_failed
TOPIC_DENIED = ErrorCode.topic_authorization_failed
#: Errors.TOPIC_AUTHORIZATION_FAILED.message() / GROUP_AUTHORIZATION_FAILED.message()
TOPIC_DENIED_MESSAGE = "Topic authorization failed."
GROUP_DENIED_MESSAGE = "Group authorization failed."
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
#: share sessions kept per client connection (a consumer needs one per group it reads)
MAX_SESSIONS = 64

#: Topic.isInternal: the topics a streams topology may not name
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def _member_id_valid(member_id: str | None) -> bool:
    """KafkaApis.isMemberIdValid: Kafka answers INVALID_REQUEST otherwise (left to it)."""
    return member_id is not None and 0 < len(member_id) <= 36


def _topic_valid(name: str) -> bool:
    return _LEGAL_TOPIC.fullmatch(name) is not None and name not in (".", "..")


def _first_denied_topic(ctx: AuthContext, header: RequestHeader, names: Iterable[str]) -> bool:
    """DESCRIBE on each distinct name (filterByAuthorized); True when any is denied."""
    verdicts = [ctx.check(header, DESCRIBE, TOPIC, n) for n in dict.fromkeys(names)]
    return not all(verdicts)


# ----------------------------------------------------------------------------- heartbeats


#: a streams group's topology, as a StreamsGroupHeartbeat request sends it (and, alike in the
#: fields read here, a StreamsGroupDescribe answer)
Topology = StreamsGroupHeartbeatRequestTopology


class ShareGroupHeartbeatHandler(ApiHandler):
    def describe(self) -> str:
        return (
            "`READ GROUP[group_id]` (30); then `DESCRIBE TOPIC[name]` for each subscribed "
            "topic name, any denied: 29"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: ShareGroupHeartbeatRequest,
    ) -> None:
        if not ctx.check(header, READ, GROUP, request.group_id):
            answer(session, header, error_body(header, request, GROUP_DENIED))
        elif _member_id_valid(request.member_id) and _first_denied_topic(
            ctx, header, request.subscribed_topic_names or ()
        ):
            answer(session, header, error_body(header, request, TOPIC_DENIED))
        else:
            forward(session, header, frame)


def topology_topics(topology: Topology | None) -> list[str]:
    """Every topic a streams topology names, in Kafka's order (distinct)."""
    names: list[str] = []
    for sub in topology.subtopologies if topology is not None else ():
        names += sub.source_topics
        names += sub.repartition_sink_topics
        names += (t.name for t in sub.repartition_source_topics)
        names += (t.name for t in sub.state_changelog_topics)
    return list(dict.fromkeys(names))


def internal_topics(topology: Topology | None) -> list[str]:
    """The topics a streams group's coordinator may ask the broker to create."""
    names: list[str] = []
    for sub in topology.subtopologies if topology is not None else ():
        names += (t.name for t in sub.repartition_source_topics)
        names += (t.name for t in sub.state_changelog_topics)
    return list(dict.fromkeys(names))


def _streams_error(
    header: RequestHeader, request: StreamsGroupHeartbeatRequest, code: ErrorCode
) -> KioBody:
    """Kafka's StreamsGroupHeartbeat error answer: `status` empty, not null (the schema has
    no null default); the task lists and `partitions_by_user_endpoint` null (their schema
    default), not mirrored from the request's task lists."""
    nulls = dict.fromkeys(("active_tasks", "standby_tasks", "warmup_tasks"))
    return error_body(header, request, code, status=(), **nulls)


class StreamsGroupHeartbeatHandler(ApiHandler):
    def describe(self) -> str:
        return (
            "`READ GROUP[group_id]` (30); with a topology: Kafka's internal topics or invalid "
            "names 130, then `DESCRIBE TOPIC[name]` for every topic of it, any denied: 29, then "
            "`CREATE CLUSTER` (logIfDenied=false) or `CREATE TOPIC[name]` for each repartition "
            "and changelog topic, any denied: 29"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: StreamsGroupHeartbeatRequest,
    ) -> None:
        if not ctx.check(header, READ, GROUP, request.group_id):
            answer(session, header, _streams_error(header, request, GROUP_DENIED))
            return
        topics = topology_topics(request.topology)
        prohibited = [t for t in topics if t in INTERNAL_TOPICS]
        invalid = [t for t in topics if not _topic_valid(t)]
        if prohibited or invalid:
            message = (
                f"Use of Kafka internal topics {','.join(prohibited)} in a Kafka Streams "
                "topology is prohibited."
                if prohibited
                else f"Topic names {','.join(invalid)} are not valid topic names."
            )
            body = _streams_error(header, request, ErrorCode.streams_invalid_topology)
            answer(session, header, dataclasses.replace(body, error_message=message))
            return
        if _first_denied_topic(ctx, header, topics):
            answer(session, header, _streams_error(header, request, TOPIC_DENIED))
            return
        # Kafka creates missing internal topics itself after CREATE checks on the member's
        # principal; through the proxy the broker would check the proxy's own identity, so
        # the client's CREATE rights are required up front (docs/design.md, "Streams groups").
        creatable = internal_topics(request.topology)
        if creatable and not ctx.check_cluster(header, CREATE, log_if_denied=False):
            denied = [t for t in creatable if not ctx.check(header, CREATE, TOPIC, t)]
            if denied:
                body = _streams_error(header, request, TOPIC_DENIED)
                message = f"Unauthorized to CREATE on topics {', '.join(denied)}."
                answer(session, header, dataclasses.replace(body, error_message=message))
                return
        forward(session, header, frame)


# ------------------------------------------------------------------------------ describes


_HIDDEN_MESSAGE = {
    77: HIDDEN_TOPIC_GROUP,
    89: "The described group uses topics that the client is not authorized to describe.",
}


def _share_group_topics(group: KioBody) -> set[str]:
    return {
        tp.topic_name
        for member in group.members
        for tp in member.assignment.topic_partitions
        if tp.topic_name
    }


def _streams_group_topics(group: KioBody) -> set[str]:
    return set(topology_topics(group.topology))


def share_or_streams_answer(
    session: ProxySession, slot: Slot, frame: Frame, decided: Decided
) -> bytes:
    ctx = session.context
    assert slot.header is not None
    header = slot.header
    errors, wants_ops = decided
    mod = response_module(slot.api_key, slot.api_version)
    topics_of = _streams_group_topics if slot.api_key == 89 else _share_group_topics
    hidden_fields: dict[str, object] = {
        "members": (),
        "error_message": _HIDDEN_MESSAGE[slot.api_key],
    }
    if slot.api_key == 89:
        hidden_fields["topology"] = None

    def merge(body: KioBody) -> KioBody:
        groups: list[KioBody] = []
        for g in body.groups:
            if g.error_code == ErrorCode.none and ctx.enforcing:
                names = sorted(topics_of(g))
                if not all([ctx.check(header, DESCRIBE, TOPIC, t) for t in names]):
                    fields = {"group_id": g.group_id, **hidden_fields}
                    groups.append(build(mod.DescribedGroup, TOPIC_DENIED, None, None, fields))
                    continue
                if wants_ops:
                    ops = ctx.authorized_operations(GROUP, g.group_id)
                    g = dataclasses.replace(g, authorized_operations=ops)
            groups.append(g)
        return dataclasses.replace(body, groups=tuple(errors) + tuple(groups))

    return merged_response(frame, slot, merge)


# ------------------------------------------------------------------- share group offsets


class DescribeShareGroupOffsetsHandler(PerEntry):
    """DESCRIBE per group (30 entries); per allowed group DESCRIBE per named topic: denied
    topics are taken out and answered with 29 partitions (id zero, offsets -1), or, for a
    group asked for all its topics (null list), left out of the answer."""

    def __init__(self) -> None:
        super().__init__(
            **{**group_entries("groups"), "name": _entry_group_id, "entry_key": None},
            entry_overrides={"topics": ()},
        )

    def describe(self) -> str:
        return (
            "`DESCRIBE GROUP[group_id]` per group (30); then `DESCRIBE TOPIC[topic_name]` per "
            "topic: denied topics' partitions 29 (start offset and lag -1); a null topic list "
            "(all topics): denied topics left out of the answer"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: DescribeShareGroupOffsetsRequest,
    ) -> None:
        allowed: list[DescribeShareGroupOffsetsRequestGroups]
        allowed, denied, _ = self.split(ctx, header, request.groups)
        errors = tuple(self.error_entry(header, g) for g in denied)
        mod = response_module(header.api_key, header.api_version)
        kept: list[DescribeShareGroupOffsetsRequestGroups] = []
        hidden: dict[str, tuple[KioBody, ...] | None] = {}
        for g in allowed:
            if g.topics is None:
                hidden[g.group_id] = None  # all topics: filtered in the answer
                kept.append(g)
                continue
            ok = [t for t in g.topics if ctx.check(header, DESCRIBE, TOPIC, t.topic_name)]
            no = [t for t in g.topics if t not in ok]
            if no:
                hidden[g.group_id] = tuple(_denied_offsets_topic(mod, t) for t in no)
            kept.append(dataclasses.replace(g, topics=tuple(ok)) if no else g)
        if not kept:
            answer(session, header, error_body(header, request, ErrorCode.none, groups=errors))
            return
        out = reencode_request(frame, header, dataclasses.replace(request, groups=tuple(kept)))
        order = [g.group_id for g in request.groups]
        forward(session, header, out, WithState(_offsets_answer, (errors, hidden, order)))


def _entry_group_id(group: DescribeShareGroupOffsetsRequestGroups) -> str:
    return str(group.group_id)


def _denied_offsets_topic(
    mod: ModuleType, topic: DescribeShareGroupOffsetsRequestGroupsTopics
) -> KioBody:
    partitions = tuple(
        build(
            mod.DescribeShareGroupOffsetsResponsePartition,
            TOPIC_DENIED,
            None,
            None,
            {
                "partition_index": p,
                "start_offset": -1,
                "lag": -1,
                "error_message": TOPIC_DENIED_MESSAGE,
            },
        )
        for p in topic.partitions
    )
    return build(
        mod.DescribeShareGroupOffsetsResponseTopic,
        ErrorCode.none,
        None,
        None,
        {"topic_name": topic.topic_name, "topic_id": uuid.UUID(int=0), "partitions": partitions},
    )


def _offsets_answer(
    session: ProxySession,
    slot: Slot,
    frame: Frame,
    state: tuple[tuple[KioBody, ...], dict[str, tuple[KioBody, ...] | None], list[str]],
) -> bytes | memoryview:
    ctx = session.context
    assert slot.header is not None
    header = slot.header
    errors, hidden, order = state

    def merge(body: KioBody) -> KioBody:
        groups = []
        for g in body.groups:
            extra = hidden.get(g.group_id, ())
            if extra == () or g.error_code != ErrorCode.none:
                groups.append(g)
            elif extra is None:
                # all topics asked: keep those the principal may DESCRIBE
                topics = tuple(
                    t for t in g.topics if ctx.check(header, DESCRIBE, TOPIC, t.topic_name)
                )
                groups.append(dataclasses.replace(g, topics=topics))
            else:
                groups.append(dataclasses.replace(g, topics=tuple(g.topics) + tuple(extra)))
        # in the request's order, as Kafka answers (the denied groups were answered here)
        rank = {g: i for i, g in reversed(list(enumerate(order)))}
        merged = sorted(groups + list(errors), key=lambda g: rank.get(g.group_id, len(order)))
        return dataclasses.replace(body, groups=tuple(merged))

    return then_addresses(session, slot, merged_response(frame, slot, merge))


# -------------------------------------------------------------------- share sessions


#: a topic id of a share request (kio reads the zero id as None, which names no topic)
TopicKey = uuid.UUID | None
#: a share session's (group_id, member_id), as the request names them (null ones are
#: looked up, never kept)
SessionKey = tuple[str | None, str | None]


@dataclass
class Held:
    """One share session (group, member) as the client sees it, and what the proxy kept out
    of the broker's copy because the principal may not READ it."""

    topics: dict[TopicKey, set[int]] = field(default_factory=dict)
    out: set[TopicKey] = field(default_factory=set)


class ShareSessions(dict[SessionKey, Held]):
    """A client connection's share sessions: (group_id, member_id) -> its share session."""


def share_sessions(session: ProxySession) -> dict[SessionKey, Held]:
    held = session.owned(ShareSessions)
    if len(held) >= MAX_SESSIONS:
        held.pop(next(iter(held)))  # the oldest: its next fetch is answered 122
    return held


#: the requests of a share session: ShareFetch and ShareAcknowledge
ShareRequest = ShareFetchRequest | ShareAcknowledgeRequest


def _session_missing(header: RequestHeader, request: ShareRequest) -> KioBody:
    return error_body(header, request, ErrorCode.share_session_not_found, responses=())


class _ShareSessionHandler(ApiHandler):
    def topic_ids(self, session: ProxySession, request: ShareRequest) -> list[uuid.UUID | None]:
        """The request's topic ids and those of the share session it continues: all of
        them are authorized on every request (`share_handle`)."""
        ids: list[uuid.UUID | None] = [t.topic_id for t in request.topics or ()]
        held = share_sessions(session).get((request.group_id, request.member_id))
        if held is not None:
            ids.extend(held.topics)
        return ids


class ShareFetchHandler(_ShareSessionHandler):
    """READ GROUP, then READ TOPIC for every topic of the request and of the session."""

    def describe(self) -> str:
        return (
            "`READ GROUP[group_id]` (30); then `READ TOPIC[id]` for every topic of the request "
            "and of the share session: denied partitions 29 (and their acknowledgements), kept "
            "out of the broker's session; unknown ids 100"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: ShareFetchRequest,
    ) -> None:
        share_handle(session, ctx, header, frame, request, request.forgotten_topics_data)


class ShareAcknowledgeHandler(_ShareSessionHandler):
    def describe(self) -> str:
        return (
            "`READ GROUP[group_id]` (30); then `READ TOPIC[id]` per topic: denied partitions "
            "29, unknown ids 100"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: ShareAcknowledgeRequest,
    ) -> None:
        share_handle(session, ctx, header, frame, request, None)


def share_handle(
    session: ProxySession,
    ctx: AuthContext,
    header: RequestHeader,
    frame: Frame,
    request: ShareRequest,
    forgotten_topics: Sequence[ShareFetchRequestForgottenTopicsData] | None,
) -> None:
    """ShareFetch (its `forgotten_topics`) and ShareAcknowledge (None): the group, the
    session, then the topics."""
    fetch = forgotten_topics is not None
    group_id, member_id = request.group_id, request.member_id
    if group_id is None:
        forward(session, header, frame)  # Kafka: INVALID_REQUEST, before any check
        return
    if not ctx.check(header, READ, GROUP, group_id):
        answer(session, header, error_body(header, request, GROUP_DENIED, responses=()))
        return
    if not _member_id_valid(member_id):
        forward(session, header, frame)  # Kafka: INVALID_REQUEST, nothing touched
        return
    sessions = share_sessions(session)
    key = (group_id, member_id)
    epoch = request.share_session_epoch
    held = sessions.get(key)
    if epoch == INITIAL_EPOCH and fetch:
        held = Held()
    elif held is None and epoch != INITIAL_EPOCH and ctx.enforcing:
        # a session this connection never opened: the client must open one here
        answer(session, header, _session_missing(header, request))
        return
    view = held.topics if held is not None else {}
    ids = list(dict.fromkeys([t.topic_id for t in request.topics] + list(view)))
    names = ctx.topic_names_of(ids)
    verdict = {i: (n is not None and ctx.check(header, READ, TOPIC, n)) for i, n in names.items()}
    # the client's view of the session after this request
    new_view: dict[TopicKey, set[int]] = {k: set(v) for k, v in view.items()}
    if fetch:
        for t in request.topics:
            if names[t.topic_id] is not None:
                new_view.setdefault(t.topic_id, set()).update(
                    p.partition_index for p in t.partitions
                )
        for f in forgotten_topics or ():
            parts = new_view.get(f.topic_id)
            if parts is not None:
                parts.difference_update(f.partitions)
                if not parts:
                    del new_view[f.topic_id]
    was_out = held.out if held is not None else set()
    denied = {i for i in new_view if not verdict[i]}
    named = {t.topic_id for t in request.topics}
    # allowed again while kept out of the broker's session: added back (unless named here)
    readd = [i for i in new_view if verdict[i] and i in was_out and i not in named and fetch]
    drop = [i for i in view if not verdict[i] and i not in was_out and fetch]
    errors = _share_errors(header, request, names, verdict, new_view if fetch else {}, denied)
    if held is not None and fetch:
        held.topics, held.out = new_view, denied
        if epoch == FINAL_EPOCH:
            sessions.pop(key, None)
        else:
            sessions[key] = held
    elif epoch == FINAL_EPOCH:
        sessions.pop(key, None)
    if not errors and not readd and not drop:
        forward(session, header, frame)
        return
    mod = type(request)
    topics = [t for t in request.topics if verdict[t.topic_id]]
    changes: dict[str, object] = {"topics": tuple(topics)}
    if fetch:
        item = _item(mod, "topics")
        part = _item(item, "partitions")
        topics += [
            item(
                topic_id=i,
                partitions=tuple(
                    part(partition_index=p, acknowledgement_batches=()) for p in sorted(new_view[i])
                ),
            )
            for i in readd
        ]
        forgot = _item(mod, "forgotten_topics_data")
        forgotten = list(forgotten_topics or ())
        forgotten += [forgot(topic_id=i, partitions=tuple(sorted(view[i]))) for i in drop]
        changes = {"topics": tuple(topics), "forgotten_topics_data": tuple(forgotten)}
    out = reencode_request(frame, header, dataclasses.replace(request, **changes))
    forward(session, header, out, WithState(_share_answer, errors))


def _item(cls: type, array: str) -> type:
    from aclgate.protocol.enforce.base import _array_item

    return _array_item(cls, array)


def _share_errors(
    header: RequestHeader,
    request: ShareRequest,
    names: dict[TopicKey, str | None],
    verdict: dict[TopicKey, bool],
    view: dict[TopicKey, set[int]],
    denied: set[TopicKey],
) -> tuple[KioBody, ...]:
    """The answer's entries for denied (29) and unknown (100) partitions: those the request
    names, and (ShareFetch) every denied partition still in the session."""
    topic_cls = _item(response_class(header.api_key, header.api_version), "responses")
    part_cls = _item(topic_cls, "partitions")
    fetch = header.api_key == 78
    parts: dict[TopicKey, dict[int, tuple[ErrorCode, bool]]] = {}
    for t in request.topics:
        if verdict[t.topic_id]:
            continue
        code = TOPIC_DENIED if names[t.topic_id] is not None else ErrorCode.unknown_topic_id
        for p in t.partitions:
            parts.setdefault(t.topic_id, {})[p.partition_index] = (
                code,
                bool(p.acknowledgement_batches),
            )
    for i in denied:
        for partition in view[i]:
            parts.setdefault(i, {}).setdefault(partition, (TOPIC_DENIED, False))
    out = []
    for topic_id, by_partition in parts.items():
        entries = []
        for index, (code, acked) in sorted(by_partition.items()):
            # Share{Fetch,Acknowledge}Response.partitionResponse: a code, no message
            fields: dict[str, object] = {"partition_index": index, "error_message": None}
            if fetch:
                fields["acknowledge_error_code"] = code if acked else ErrorCode.none
                fields["records"] = b""  # MemoryRecords.EMPTY
            entries.append(build(part_cls, code, None, None, fields))
        fields = {"topic_id": topic_id, "partitions": tuple(entries)}
        out.append(build(topic_cls, ErrorCode.none, None, None, fields))
    return tuple(out)


def _share_answer(
    session: ProxySession, slot: Slot, frame: Frame, errors: tuple[KioBody, ...]
) -> bytes | memoryview:
    if not errors:
        return then_addresses(session, slot, bytes(frame))

    def merge(body: KioBody) -> KioBody:
        if body.error_code != ErrorCode.none:
            return body
        return dataclasses.replace(body, responses=tuple(body.responses) + errors)

    return then_addresses(session, slot, merged_response(frame, slot, merge))


__all__ = [
    "DescribeShareGroupOffsetsHandler",
    "ShareAcknowledgeHandler",
    "ShareFetchHandler",
    "ShareGroupHeartbeatHandler",
    "StreamsGroupHeartbeatHandler",
    "share_or_streams_answer",
]
