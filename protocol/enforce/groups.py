"""Group and coordinator APIs whose shape is not a plain Whole or PerEntry."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from aclgate.authz.model import CLUSTER_NAME, AclOperation, ResourceType
from aclgate.protocol.codec import decode_request
from aclgate.protocol.effects import ListTopicNames, TopicNames
from aclgate.protocol.enforce.base import (
    DENIED_CODE,
    ApiHandler,
    KioBody,
    PerEntry,
    answer,
    error_body,
    forward,
    forward_if_cluster,
    knowing_ids,
    merged_response,
    reencode_request,
    refuse_not_ready,
    splice_marked,
    spliced_answer,
    then_addresses,
)
from aclgate.protocol.enforce.build import NAME_MARK, NamedEntry, build
from aclgate.protocol.enforce.context import AuthContext, NotReady
from aclgate.protocol.enforce.data import topic_names
from aclgate.protocol.enforce.peek import peek_offset_fetch_groups
from aclgate.protocol.enforce.regexsub import (
    REGEX_TOPICS_MAX_AGE,
    Heartbeat,
    InvalidRegex,
    RegexMember,
    RegexMembers,
    matching,
    regex_step,
    resolve_member,
    unwrap,
    wrap,
)
from aclgate.protocol.enforce.slices import decide_each, decide_names, in_turns
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.session import ProxySession, Slot, WithState
from aclgate.protocol.shapes.requests import (
    BatchedFindCoordinator,
    BatchedOffsetFetch,
    BatchedOffsetFetchGroups,
    BatchedOffsetFetchGroupsTopics,
    ConsumerGroupDescribeRequest,
    DescribeGroupsRequest,
    ShareGroupDescribeRequest,
    SingleFindCoordinator,
    SingleOffsetFetch,
    SingleOffsetFetchTopics,
    StreamsGroupDescribeRequest,
)
from aclgate.protocol.versions import request_class, response_module

READ, DESCRIBE, DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
TOPIC, GROUP, TXN, CLUSTER = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.TRANSACTIONAL_ID,
    ResourceType.CLUSTER,
)
GROUP_DENIED = ErrorCode.group_authorization_failed
TOPIC_DENIED = ErrorCode.topic_authorization_failed
INVALID_REGEX = ErrorCode.invalid_regular_expression


#: an OffsetFetch request topic of any version (v10 names it by id, the others by name)
OffsetFetchTopic = SingleOffsetFetchTopics | BatchedOffsetFetchGroupsTopics
#: a group of an OffsetFetch request of v8+ (topics by name, or by id in v10)
OffsetFetchGroup = BatchedOffsetFetchGroups


class ConsumerGroupMember(Protocol):
    """A member of a described KIP-848 group: its subscription and its two assignments (whose
    `topic_partitions` are read by name, as they may be absent)."""

    @property
    def subscribed_topic_names(self) -> Sequence[str] | None: ...
    @property
    def assignment(self) -> object: ...
    @property
    def target_assignment(self) -> object: ...


if TYPE_CHECKING:  # the shapes that dataclasses.replace changes: kio's frozen dataclasses
    from _typeshed import DataclassInstance

    class GroupRef(DataclassInstance, Protocol):
        @property
        def group_id(self) -> str: ...

    class GroupResult(GroupRef, Protocol):
        @property
        def error_code(self) -> ErrorCode: ...

    class OffsetFetchGroupResult(GroupResult, Protocol):
        @property
        def topics(self) -> Sequence[KioBody]: ...

    class OffsetFetchAnswer(DataclassInstance, Protocol):
        @property
        def groups(self) -> Sequence[OffsetFetchGroupResult]: ...

    class GroupsAnswer(DataclassInstance, Protocol):
        """A DescribeGroups answer, every version."""

        @property
        def groups(self) -> Sequence[GroupResult]: ...

    class DescribedConsumerGroup(GroupResult, Protocol):
        @property
        def members(self) -> Sequence[ConsumerGroupMember]: ...

    class ConsumerGroupDescribeAnswer(DataclassInstance, Protocol):
        @property
        def groups(self) -> Sequence[DescribedConsumerGroup]: ...


#: entries of a request array, split by verdict
Entry = TypeVar("Entry")
#: a described KIP-848 group member (kio's frozen dataclass)
ConsumerGroupMemberT = TypeVar("ConsumerGroupMemberT", bound=ConsumerGroupMember)
#: what describe_groups decided: the denied groups' error entries, and whether the client
#: asked for authorized operations (None: the rewrite decides)
Decided = tuple[tuple[KioBody, ...], bool | None]
GroupsRewrite = Callable[[ProxySession, Slot, Frame, Decided], bytes]


def _finish_with_rewrite(session: ProxySession, slot: Slot, body: KioBody) -> bytes | memoryview:
    from aclgate.protocol.codec import encode_response

    return then_addresses(session, slot, encode_response(slot.correlation_id, body))


# ------------------------------------------------------------------------------ OffsetFetch


def _decide_groups(
    session: ProxySession,
    ctx: AuthContext,
    header: RequestHeader,
    group_ids: Sequence[str],
    then: Callable[[list[bool]], None],
) -> None:
    """DESCRIBE on each group of an OffsetFetch v8+, in order, duplicates too (Kafka checks
    each group of the request), a slice per turn past DECISIONS_PER_TURN."""
    decide_each(session, ctx, header, DESCRIBE, GROUP, group_ids, True, then)


class OffsetFetchHandler(ApiHandler):
    """DESCRIBE on the group, then on each topic. v8+ batches groups; the all-partitions form
    (topics = null) is answered by the broker and filtered silently."""

    topic_id_paths = (("groups", "topics"),)  # v10 names topics by id

    granularity = "per group, then per topic"

    def __call__(self, session: ProxySession, header: RequestHeader, frame: Frame) -> None:
        """v8+: the group ids are read in place and decided first (a slice per turn), so a
        request of 58,000 denied groups (1 MiB) is answered as bytes without decoding it
        (issue 20); a request with an allowed group is decoded then, its groups not decided
        again."""
        groups = peek_offset_fetch_groups(frame, header)
        if groups is None:
            super().__call__(session, header, frame)
            return
        ctx = session.context
        try:
            _decide_groups(
                session,
                ctx,
                header,
                groups,
                lambda verdicts: self._peeked(session, ctx, header, frame, groups, verdicts),
            )
        except NotReady:  # raised by the first check, before anything was recorded
            refuse_not_ready(session)

    def _peeked(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        groups: list[str],
        verdicts: list[bool],
    ) -> None:
        if not any(verdicts):
            mod = response_module(header.api_key, header.api_version)
            empty = request_class(header.api_key, header.api_version)(
                groups=(), require_stable=False
            )
            session.respond(header, self._all_groups_denied(mod, header, empty, groups))
            return
        request = decode_request(frame, header)
        knowing_ids(
            session,
            ctx,
            self.topic_ids(session, request),
            lambda known: self._groups_decided(session, known, header, frame, request, verdicts),
        )

    def describe(self) -> str:
        return (
            "`DESCRIBE GROUP[group_id]` (v2-7 top-level 30, v8+ per group, v1 on every partition); "
            "then `DESCRIBE TOPIC[name]` per topic (partitions {committed_offset -1, 29}); "
            "all-partitions form: unauthorized topics silently dropped"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: SingleOffsetFetch | BatchedOffsetFetch,  # v1-7 one group, v8+ a groups array
    ) -> None:
        # the version tells the shape (mypy cannot narrow on it)
        if header.api_version >= 8:
            self._batched(session, ctx, header, frame, request)  # type: ignore[arg-type]
        else:
            self._single(session, ctx, header, frame, request)  # type: ignore[arg-type]

    # v1-7: one group, top-level topics
    def _single(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: SingleOffsetFetch,
    ) -> None:
        mod = response_module(header.api_key, header.api_version)
        if not ctx.check(header, DESCRIBE, GROUP, request.group_id):
            if header.api_version >= 2:
                answer(session, header, error_body(header, request, GROUP_DENIED, topics=()))
            else:
                answer(
                    session,
                    header,
                    error_body(
                        header,
                        request,
                        ErrorCode.none,
                        topics=self._topic_errors(mod, request.topics or (), GROUP_DENIED),
                    ),
                )
            return
        if request.topics is None:
            forward(session, header, frame, _filter_offset_fetch)
            return
        allowed, denied = _split_topics(
            ctx, header, request.topics, [t.name for t in request.topics]
        )
        if not denied:
            forward(session, header, frame)
            return
        errors = self._topic_errors(mod, denied, TOPIC_DENIED)
        if not allowed:
            answer(session, header, error_body(header, request, ErrorCode.none, topics=errors))
            return
        stripped = reencode_request(
            frame, header, dataclasses.replace(request, topics=tuple(allowed))
        )
        forward(session, header, stripped, WithState(_merge_offset_fetch, {None: errors}))

    # v8+: groups[]
    def _batched(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: BatchedOffsetFetch,
    ) -> None:
        _decide_groups(
            session,
            ctx,
            header,
            [group.group_id for group in request.groups],
            lambda verdicts: self._groups_decided(session, ctx, header, frame, request, verdicts),
        )

    def _groups_decided(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: BatchedOffsetFetch,
        verdicts: list[bool],
    ) -> None:
        mod = response_module(header.api_key, header.api_version)
        kept_groups: list[OffsetFetchGroup] = []
        denied_groups: list[str] = []
        topic_errors: dict[str, tuple[KioBody, ...]] = {}
        for group, allowed_group in zip(request.groups, verdicts, strict=True):
            if not allowed_group:
                denied_groups.append(group.group_id)
                continue
            if group.topics is None:
                kept_groups.append(group)
                continue
            names = topic_names(ctx, header, group.topics)
            allowed, denied = _split_topics(ctx, header, group.topics, names)
            if denied:
                topic_errors[group.group_id] = self._topic_errors(mod, denied, TOPIC_DENIED)
            kept_groups.append(dataclasses.replace(group, topics=tuple(allowed)))
        filtering = any(g.topics is None for g in kept_groups)
        if not denied_groups and not topic_errors and not filtering:
            forward(session, header, frame)
            return
        if not kept_groups:  # every group denied: their results rendered as bytes (issue 20)
            session.respond(header, self._all_groups_denied(mod, header, request, denied_groups))
            return
        group_errors = [self._group_error(mod, g) for g in denied_groups]
        stripped = reencode_request(
            frame, header, dataclasses.replace(request, groups=tuple(kept_groups))
        )
        forward(
            session,
            header,
            stripped,
            WithState(_merge_offset_fetch_batched, (tuple(group_errors), topic_errors)),
        )

    def _all_groups_denied(
        self,
        mod: ModuleType,
        header: RequestHeader,
        request: BatchedOffsetFetch,
        denied_groups: Sequence[str],
    ) -> bytes:
        """The framed answer to a v8+ request whose groups are all denied, rendered as bytes
        (one template, each group id written into it)."""
        marked = self._group_error(mod, NAME_MARK)
        template = NamedEntry(marked)
        items = b"".join([template.render(g) for g in denied_groups])
        one = error_body(header, request, ErrorCode.none, groups=(marked,))
        return spliced_answer(header.correlation_id, one, marked, len(denied_groups), items)

    @staticmethod
    def _group_error(mod: ModuleType, group_id: str) -> KioBody:
        return build(
            mod.OffsetFetchResponseGroup,
            GROUP_DENIED,
            None,
            None,
            {"group_id": group_id, "topics": ()},
        )

    @staticmethod
    def _topic_errors(
        mod: ModuleType, topics: Sequence[OffsetFetchTopic], code: ErrorCode
    ) -> tuple[KioBody, ...]:
        cls = (
            mod.OffsetFetchResponseTopics
            if hasattr(mod, "OffsetFetchResponseTopics")
            else mod.OffsetFetchResponseTopic
        )
        part_cls = (
            mod.OffsetFetchResponsePartitions
            if hasattr(mod, "OffsetFetchResponsePartitions")
            else mod.OffsetFetchResponsePartition
        )
        out: list[KioBody] = []
        for t in topics:
            partitions = tuple(
                build(
                    part_cls,
                    code,
                    None,
                    None,
                    {"partition_index": p, "committed_offset": -1, "metadata": ""},
                )
                for p in t.partition_indexes
            )
            out.append(build(cls, code, t, None, {"partitions": partitions}))
        return tuple(out)


def _split_topics(
    ctx: AuthContext, header: RequestHeader, topics: Sequence[Entry], names: list[str | None]
) -> tuple[list[Entry], list[Entry]]:
    """(allowed, denied) topics; `names[i]` names `topics[i]` (None: an unknown id)."""
    verdict: dict[str, bool] = {}
    allowed: list[Entry] = []
    denied: list[Entry] = []
    for topic, name in zip(topics, names, strict=True):
        if name is None:
            denied.append(topic)
            continue
        if name not in verdict:
            verdict[name] = ctx.check(header, DESCRIBE, TOPIC, name)
        (allowed if verdict[name] else denied).append(topic)
    return allowed, denied


def _visible(
    ctx: AuthContext, header: RequestHeader, topics: Sequence[KioBody]
) -> tuple[KioBody, ...]:
    """All-partitions answers: keep only the topics the principal may DESCRIBE (silently);
    a topic is named by `name` or, in newer versions, by `topic_id`."""
    kept: list[KioBody] = []
    for t in topics:
        name = getattr(t, "name", None)
        if name is None and getattr(t, "topic_id", None) is not None:
            name = ctx.policy.topic_ids.name(t.topic_id)
        if name is not None and ctx.check(header, DESCRIBE, TOPIC, name, False):
            kept.append(t)
    return tuple(kept)


def _header(slot: Slot) -> RequestHeader:
    assert slot.header is not None  # a slot answering a request always has its header
    return slot.header


def _filter_offset_fetch(session: ProxySession, slot: Slot, frame: Frame) -> bytes:
    ctx = session.context
    return merged_response(
        frame,
        slot,
        lambda b: dataclasses.replace(b, topics=_visible(ctx, _header(slot), b.topics)),
    )


def _merge_offset_fetch(
    session: ProxySession, slot: Slot, frame: Frame, denied: dict[None, tuple[KioBody, ...]]
) -> bytes:
    errors = denied[None]
    return merged_response(
        frame, slot, lambda b: dataclasses.replace(b, topics=tuple(b.topics) + errors)
    )


def _merge_offset_fetch_batched(
    session: ProxySession,
    slot: Slot,
    frame: Frame,
    denied: tuple[tuple[KioBody, ...], dict[str, tuple[KioBody, ...]]],
) -> bytes:
    ctx = session.context
    group_errors, topic_errors = denied
    header = _header(slot)

    def merge(body: OffsetFetchAnswer) -> OffsetFetchAnswer:
        groups: list[OffsetFetchGroupResult] = []
        for g in body.groups:
            topics = tuple(g.topics)
            if g.group_id in topic_errors:
                topics += topic_errors[g.group_id]
            elif g.error_code == ErrorCode.none:
                # groups with explicit topics had their denied topics stripped and recorded;
                # the others asked for all partitions and are filtered
                asked_all = g.group_id not in topic_errors
                topics = _visible(ctx, header, topics) if asked_all else topics
            groups.append(dataclasses.replace(g, topics=topics))
        return dataclasses.replace(body, groups=tuple(groups) + group_errors)

    return merged_response(frame, slot, merge)


# -------------------------------------------------------------------------- ListGroups etc.


def group_entries(array: str, **more: Any) -> dict[str, Any]:
    """PerEntry settings (field name -> value, of the fields' several types) for a request
    array of group ids described per group."""
    return {
        "array": array,
        "response_array": "groups",
        "operation": DESCRIBE,
        "resource_type": GROUP,
        "name": _group_id,
        "entry_key": "group_id",
        "doc_name": "group_id",
        **more,
    }


def modern_group_entries() -> dict[str, Any]:
    """`group_entries` of the KIP-848, share and streams group describes, whose denied
    groups Kafka answers without an error message (KafkaApis sets only the code)."""
    return group_entries("group_ids", entry_overrides={"error_message": None})


#: Kafka's message for a described consumer group naming a topic the caller may not DESCRIBE
HIDDEN_TOPIC_GROUP = (
    "The group has described topic(s) that the client is not authorized to describe."
)


def _group_id(group_id: str) -> str:
    """The resource name of an entry that is a bare group id."""
    return group_id


def describe_groups(
    handler: PerEntry,
    session: ProxySession,
    ctx: AuthContext,
    header: RequestHeader,
    frame: Frame,
    request: GroupDescribeRequest,  # its `handler.array` is read
    rewrite: GroupsRewrite,
    wants_ops: bool | None,
) -> None:
    """DescribeGroups, ConsumerGroupDescribe, ShareGroupDescribe, StreamsGroupDescribe:
    DESCRIBE per group (a slice per turn past slices.DECISIONS_PER_TURN); denied groups get
    error entries, rendered as bytes (issue 20: 95,000 denied groups in 1 MiB took 1.4 s as
    kio objects), the rest go upstream and the answer is rewritten (authorized operations for
    the client; `wants_ops=False` with nothing denied forwards untouched, None always
    rewrites)."""
    groups = getattr(request, handler.array)
    handler.split_in_turns(
        session,
        ctx,
        header,
        groups,
        lambda parts: _groups_described(
            handler, session, ctx, header, frame, request, rewrite, wants_ops, parts
        ),
    )


def _groups_described(
    handler: PerEntry,
    session: ProxySession,
    ctx: AuthContext,
    header: RequestHeader,
    frame: Frame,
    request: GroupDescribeRequest,
    rewrite: GroupsRewrite,
    wants_ops: bool | None,
    parts: tuple[list[str], list[str], list[str]],  # group ids: allowed, denied, unknown
) -> None:
    allowed, denied, _ = parts
    if wants_ops is False and not denied:
        forward(session, header, frame)
        return
    in_turns(
        session,
        handler.rendering(header, denied),
        lambda rendered: _groups_rendered(
            handler, session, ctx, header, frame, request, rewrite, allowed, denied, rendered
        ),
    )


def _groups_rendered(
    handler: PerEntry,
    session: ProxySession,
    ctx: AuthContext,
    header: RequestHeader,
    frame: Frame,
    request: GroupDescribeRequest,
    rewrite: GroupsRewrite,
    allowed: list[str],
    denied: list[str],
    rendered: tuple[KioBody, bytes] | None,
) -> None:
    if not allowed:
        if rendered is not None:
            marked, items = rendered
            empty = dataclasses.replace(request, **{handler.array: ()})
            session.respond(header, handler.all_denied(header, empty, marked, len(denied), items))
            return
        errors = tuple(handler.error_entry(header, g) for g in denied)
        answer(session, header, error_body(header, request, ErrorCode.none, groups=errors))
        return
    if denied:
        frame = reencode_request(
            frame, header, dataclasses.replace(request, **{handler.array: tuple(allowed)})
        )
    ops = bool(getattr(request, "include_authorized_operations", False)) and ctx.enforcing
    if rendered is None:
        errors = tuple(handler.error_entry(header, g) for g in denied)
        forward(session, header, frame, WithState(rewrite, (errors, ops)))
        return
    marked, items = rendered
    forward(
        session,
        header,
        frame,
        WithState(_spliced_groups, (rewrite, marked, ops, items, len(denied))),
    )


def _spliced_groups(
    session: ProxySession,
    slot: Slot,
    frame: Frame,
    state: tuple[GroupsRewrite, KioBody, bool, bytes, int],
) -> bytes:
    """`rewrite` with the denied groups as one marked entry, which the rendered entries
    then replace (base.splice_marked)."""
    rewrite, marked, ops, items, count = state
    out = rewrite(session, slot, frame, ((marked,), ops))
    return splice_marked(out, slot, "groups", marked, items, count)


#: the requests of the describe-group APIs: an array of group ids (`groups`, or `group_ids`
#: from KIP-848 on)
GroupDescribeRequest = (
    DescribeGroupsRequest
    | ConsumerGroupDescribeRequest
    | ShareGroupDescribeRequest
    | StreamsGroupDescribeRequest
)


class GroupDescriptions(PerEntry):
    """DescribeGroups, ConsumerGroupDescribe, ShareGroupDescribe, StreamsGroupDescribe: one
    handler, told apart by the table's data: the request array of group ids and its denied
    entries (`entries`), the rewrite of the broker's answer (`answer`: authorized operations
    for the client, groups naming topics it may not see hidden), and whether the request
    says if it wants authorized operations (`ops_on_request`: DescribeGroups v3+; nothing
    denied and none wanted, the answer is forwarded untouched)."""

    def __init__(
        self, entries: dict[str, Any], answer: GroupsRewrite, doc: str, ops_on_request: bool
    ) -> None:
        super().__init__(**entries)
        self.answer, self.doc, self.ops_on_request = answer, doc, ops_on_request

    def describe(self) -> str:
        return f"`{self.operation.name} {self.resource_type.name}[{self.doc_name}]` per group; {self.doc}"

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: GroupDescribeRequest,
    ) -> None:
        wants_ops = (
            bool(getattr(request, "include_authorized_operations", False)) and ctx.enforcing
            if self.ops_on_request
            else None
        )
        describe_groups(self, session, ctx, header, frame, request, self.answer, wants_ops)


def describe_groups_answer(
    session: ProxySession, slot: Slot, frame: Frame, decided: Decided
) -> bytes:
    ctx = session.context
    errors, wants_ops = decided

    def merge(body: GroupsAnswer) -> GroupsAnswer:
        groups = tuple(body.groups)
        if wants_ops:
            groups = tuple(
                dataclasses.replace(
                    g, authorized_operations=ctx.authorized_operations(GROUP, g.group_id)
                )
                if g.error_code == ErrorCode.none
                else g
                for g in groups
            )
        return dataclasses.replace(body, groups=groups + errors)

    return merged_response(frame, slot, merge)


# --------------------------------------------------------------------------- FindCoordinator

KEY_TYPES = {0: (DESCRIBE, GROUP), 1: (DESCRIBE, TXN), 2: (AclOperation.CLUSTER_ACTION, CLUSTER)}


class FindCoordinatorHandler(ApiHandler):
    granularity = "v0-3 whole, v4+ per key"

    def describe(self) -> str:
        return (
            "key type GROUP: `DESCRIBE GROUP[key]` (30); TRANSACTION: `DESCRIBE TRANSACTIONAL_ID[key]` (53); "
            "SHARE: `CLUSTER_ACTION CLUSTER` (31, whole request)"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        # v0-3 name one `key` (v1+ of a `key_type`), v4+ `coordinator_keys`: read by version
        request: SingleFindCoordinator | BatchedFindCoordinator,
    ) -> None:
        key_type = int(getattr(request, "key_type", 0))
        if key_type not in KEY_TYPES:
            answer(session, header, error_body(header, request, ErrorCode.invalid_request))
            return
        operation, rtype = KEY_TYPES[key_type]
        # the version tells the shape (mypy cannot narrow on it)
        if header.api_version < 4:
            self._one_key(session, ctx, header, frame, request, operation, rtype)  # type: ignore[arg-type]
        else:
            self._keys(session, ctx, header, frame, request, operation, rtype)  # type: ignore[arg-type]

    @staticmethod
    def _one_key(
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: SingleFindCoordinator,
        operation: AclOperation,
        rtype: ResourceType,
    ) -> None:
        if rtype == CLUSTER:
            forward_if_cluster(session, ctx, header, frame, request, operation, coordinators=())
        elif ctx.check(header, operation, rtype, request.key):
            forward(session, header, frame)
        else:
            body = error_body(header, request, DENIED_CODE[rtype], node_id=-1, host="", port=-1)
            answer(session, header, body)

    def _keys(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: BatchedFindCoordinator,
        operation: AclOperation,
        rtype: ResourceType,
    ) -> None:
        keys = request.coordinator_keys
        if rtype == CLUSTER:
            errors = self._key_errors(header, keys, ErrorCode.cluster_authorization_failed)
            forward_if_cluster(session, ctx, header, frame, request, operation, coordinators=errors)
            return
        decide_names(  # each distinct key once, a slice per turn (95,000 keys fit in 1 MiB)
            session,
            ctx,
            header,
            operation,
            rtype,
            dict.fromkeys(keys, 1),
            True,
            lambda verdict: self._keys_decided(session, header, frame, request, rtype, verdict),
        )

    def _keys_decided(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        request: BatchedFindCoordinator,
        rtype: ResourceType,
        verdict: dict[str, bool],
    ) -> None:
        keys = request.coordinator_keys
        allowed = [k for k in keys if verdict[k]]
        denied = [k for k in keys if not verdict[k]]
        if not denied:
            forward(session, header, frame)
            return
        # the denied keys' entries rendered as bytes from one template (issue 20)
        marked = self._key_errors(header, [NAME_MARK], DENIED_CODE[rtype])[0]
        template = NamedEntry(marked)
        items = b"".join([template.render(k) for k in denied])
        if not allowed:
            empty = dataclasses.replace(request, coordinator_keys=())
            one = error_body(header, empty, ErrorCode.none, coordinators=(marked,))
            session.respond(
                header, spliced_answer(header.correlation_id, one, marked, len(denied), items)
            )
            return
        stripped = reencode_request(
            frame, header, dataclasses.replace(request, coordinator_keys=tuple(allowed))
        )
        state = (marked, items, len(denied))
        forward(session, header, stripped, WithState(_merge_coordinators, state))

    @staticmethod
    def _key_errors(
        header: RequestHeader, keys: Sequence[str], code: ErrorCode
    ) -> tuple[KioBody, ...]:
        mod = response_module(header.api_key, header.api_version)
        return tuple(
            build(
                mod.Coordinator, code, None, None, {"key": k, "node_id": -1, "host": "", "port": -1}
            )
            for k in keys
        )


def _merge_coordinators(
    session: ProxySession, slot: Slot, frame: Frame, state: tuple[KioBody, bytes, int]
) -> bytes:
    """The broker's coordinators, addresses rewritten, then the denied keys' entries (one
    marked entry in the answer, replaced by the rendered ones)."""
    from aclgate.protocol.addresses import rewrite_find_coordinator

    marked, items, count = state
    merged = merged_response(
        frame,
        slot,
        lambda b: dataclasses.replace(b, coordinators=(*b.coordinators, marked)),
    )
    out = rewrite_find_coordinator(merged, slot.api_version, session.config.brokers)
    return splice_marked(out, slot, "coordinators", marked, items, count)


# ------------------------------------------------------------------- KIP-848 consumer groups


class ConsumerGroupHeartbeatHandler(ApiHandler):
    def describe(self) -> str:
        return (
            "`READ GROUP[group_id]` (30); then `DESCRIBE TOPIC[name]` for each subscribed topic "
            "name, any denied: 29 (Kafka 4.0+); a `SubscribedTopicRegex` (v1+) is resolved by "
            "aclgate to the topics the principal may DESCRIBE, sent as names (docs/design.md)"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: Heartbeat,
    ) -> None:
        if not ctx.check(header, READ, GROUP, request.group_id):
            answer(session, header, error_body(header, request, GROUP_DENIED))
            return
        for topic in dict.fromkeys(request.subscribed_topic_names or ()):
            if not ctx.check(header, DESCRIBE, TOPIC, topic):
                answer(session, header, error_body(header, request, TOPIC_DENIED))
                return
        members = session.owned(RegexMembers)
        step = regex_step(members, request)
        if isinstance(step, InvalidRegex):
            answer(
                session,
                header,
                error_body(header, request, INVALID_REGEX, error_message=str(step)),
            )
        elif isinstance(step, RegexMember):
            session.wait(
                ListTopicNames(REGEX_TOPICS_MAX_AGE),
                lambda topics: self._resolved(session, ctx, header, frame, request, step, topics),
            )
        elif step is None:
            forward(session, header, frame)
        else:  # the names to send instead of the client's (it dropped its regex)
            body = dataclasses.replace(request, subscribed_topic_names=step)
            forward(session, header, reencode_request(frame, header, body))

    @staticmethod
    def _resolved(
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: Heartbeat,
        member: RegexMember,
        topics: TopicNames | None,
    ) -> None:
        if topics is None and member.sent is None:
            answer(
                session,
                header,
                error_body(
                    header,
                    request,
                    ErrorCode.coordinator_not_available,
                    error_message="aclgate could not list the cluster's topics to resolve "
                    "the subscribed regex",
                ),
            )
            return
        changed = topics is not None and resolve_member(
            member,
            topics,
            (ctx.policy.authorizer.version, id(ctx.policy.dry_run)),
            lambda topic: ctx.check(header, DESCRIBE, TOPIC, topic, False),
        )
        fresh_regex = getattr(request, "subscribed_topic_regex", None)
        if not (fresh_regex or changed or request.subscribed_topic_names is not None):
            forward(session, header, frame)  # nothing new for the broker
            return
        fields: dict[str, object] = {"subscribed_topic_names": member.sent}
        if fresh_regex:
            fields["subscribed_topic_regex"] = wrap(member.regex)
        body = dataclasses.replace(request, **fields)
        forward(session, header, reencode_request(frame, header, body))


def _shown_member(member: ConsumerGroupMemberT) -> ConsumerGroupMemberT:
    """A member as Kafka would describe it: its own regex, not the wrapped one aclgate sent,
    and the names it subscribed to itself, without those aclgate resolved from the regex."""
    regex = unwrap(getattr(member, "subscribed_topic_regex", None))
    if regex is None:
        return member
    names = member.subscribed_topic_names
    if names is not None:
        resolved = set(matching(regex, names))
        names = tuple(n for n in names if n not in resolved)
    return dataclasses.replace(  # type: ignore[type-var]
        member, subscribed_topic_regex=regex, subscribed_topic_names=names
    )


def _group_topics(group: DescribedConsumerGroup) -> set[str]:
    """The topics Kafka checks before describing a group: those of members' assignments and
    target assignments only (KafkaApis.handleConsumerGroupDescribe); a subscribed name that
    is in no assignment (a topic not created yet) does not hide the group."""
    names: set[str] = set()
    for member in group.members:
        for assignment in (member.assignment, member.target_assignment):
            for tp in getattr(assignment, "topic_partitions", ()) or ():
                if getattr(tp, "topic_name", None):
                    names.add(tp.topic_name)
    return names


def consumer_group_describe_answer(
    session: ProxySession, slot: Slot, frame: Frame, decided: Decided
) -> bytes:
    ctx = session.context
    header = _header(slot)
    errors, wants_ops = decided
    mod = response_module(slot.api_key, slot.api_version)

    def merge(body: ConsumerGroupDescribeAnswer) -> ConsumerGroupDescribeAnswer:
        groups: list[KioBody] = []
        for g in body.groups:
            if any(unwrap(getattr(m, "subscribed_topic_regex", None)) for m in g.members):
                g = dataclasses.replace(g, members=tuple(_shown_member(m) for m in g.members))
            if g.error_code == ErrorCode.none and ctx.enforcing:
                hidden = [
                    t for t in sorted(_group_topics(g)) if not ctx.check(header, DESCRIBE, TOPIC, t)
                ]
                if hidden:
                    groups.append(
                        build(
                            mod.DescribedGroup,
                            TOPIC_DENIED,
                            None,
                            None,
                            {
                                "group_id": g.group_id,
                                "members": (),
                                "error_message": HIDDEN_TOPIC_GROUP,
                            },
                        )
                    )
                    continue
                if wants_ops:
                    g = dataclasses.replace(
                        g, authorized_operations=ctx.authorized_operations(GROUP, g.group_id)
                    )
            groups.append(g)
        return dataclasses.replace(body, groups=tuple(groups) + errors)

    return merged_response(frame, slot, merge)


__all__ = [
    "CLUSTER_NAME",
    "ConsumerGroupHeartbeatHandler",
    "FindCoordinatorHandler",
    "GroupDescriptions",
    "OffsetFetchHandler",
    "_finish_with_rewrite",
    "consumer_group_describe_answer",
    "describe_groups_answer",
]
