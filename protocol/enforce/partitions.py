"""The partition APIs of topics: CreatePartitions and DescribeTopicPartitions.

* CreatePartitions reports duplicate names as INVALID_REQUEST before authorization, then
  checks ALTER per topic.
* DescribeTopicPartitions filters like all-topics Metadata, also across `cursor` paging: a
  next cursor that would name a hidden topic is sealed (protocol/enforce/cursor.py, with the
  key in `Policy.cursors`) and opened again when the client sends it back.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from types import ModuleType
from typing import TypeVar

from kio.schema.create_partitions.v0 import request as cp_v0
from kio.schema.create_partitions.v1 import request as cp_v1
from kio.schema.create_partitions.v2 import request as cp_v2
from kio.schema.create_partitions.v3 import request as cp_v3
from kio.schema.describe_topic_partitions.v0 import request as dtp_request
from kio.schema.describe_topic_partitions.v0 import response as dtp_response
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from aclgate.authz.model import AclOperation, ResourceType
from aclgate.protocol.enforce.base import (
    ApiHandler,
    KioBody,
    PerEntry,
    answer,
    error_body,
    forward,
    merged_response,
    reencode_request,
)
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.context import AuthContext
from aclgate.protocol.enforce.topics import ZERO
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.session import ProxySession, Slot, WithState
from aclgate.protocol.versions import response_module

#: a CreatePartitions request of any version (each is stripped into its own class)
CreatePartitionsRequest = TypeVar(
    "CreatePartitionsRequest",
    cp_v0.CreatePartitionsRequest,
    cp_v1.CreatePartitionsRequest,
    cp_v2.CreatePartitionsRequest,
    cp_v3.CreatePartitionsRequest,
)

#: DescribeTopicPartitions has one version (v0); a new one needs these types widened
DescribeTopicPartitionsRequest = dtp_request.DescribeTopicPartitionsRequest
DescribeTopicPartitionsResponse = dtp_response.DescribeTopicPartitionsResponse

DESCRIBE, TOPIC, INVALID = AclOperation.DESCRIBE, ResourceType.TOPIC, ErrorCode.invalid_request

# --------------------------------------------------------------------------- CreatePartitions


class CreatePartitionsHandler(PerEntry):
    """ControllerApis.createPartitions: names given twice are INVALID_REQUEST ("Duplicate
    topic name.", once per name) and never authorized; then ALTER per topic."""

    def __init__(self) -> None:
        super().__init__(
            array="topics",
            response_array="results",
            operation=AclOperation.ALTER,
            resource_type=TOPIC,
        )

    def describe(self) -> str:
        return (
            'names given twice: 42 ("Duplicate topic name.", once) before authorization; then '
            "`ALTER TOPIC[name]` per topic"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: CreatePartitionsRequest,
    ) -> None:
        counts = Counter(t.name for t in request.topics)
        duplicates = [n for n, c in counts.items() if c > 1]
        unique = [t for t in request.topics if counts[t.name] == 1]
        allowed, denied, _ = self.split(ctx, header, unique)
        if (not duplicates and not denied) or not ctx.enforcing:
            forward(session, header, frame)
            return
        mod = response_module(header.api_key, header.api_version)
        errors = tuple(
            build(
                mod.CreatePartitionsTopicResult,
                INVALID,
                None,
                None,
                {"name": n, "error_message": "Duplicate topic name."},
            )
            for n in duplicates
        ) + tuple(self.error_entry(header, t) for t in denied)
        if not allowed:
            answer(session, header, error_body(header, request, ErrorCode.none, results=errors))
            return
        stripped = reencode_request(
            frame, header, dataclasses.replace(request, topics=tuple(allowed))
        )
        forward(
            session,
            header,
            stripped,
            lambda s, slot, f: merged_response(
                f, slot, lambda b: dataclasses.replace(b, results=tuple(b.results) + errors)
            ),
        )


# ------------------------------------------------------------------ DescribeTopicPartitions


@dataclass
class _TopicPlan:
    header: RequestHeader
    all_topics: bool
    errors: tuple[dtp_response.DescribeTopicPartitionsResponseTopic, ...]


class DescribeTopicPartitionsHandler(ApiHandler):
    """DescribeTopicPartitionsRequestHandler: DESCRIBE per topic, audited even for all-topics."""

    granularity = "per topic"

    def describe(self) -> str:
        return (
            "`DESCRIBE TOPIC[name]` per topic at or after the cursor (logIfDenied=true even for "
            "all-topics); named topics denied: {29, name, zero id}; all-topics (empty list): "
            "unauthorized topics omitted, also across cursor paging; topic bitfields computed for "
            "the client; a cursor not among the named topics or a negative cursor partition: "
            "every topic 42"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: DescribeTopicPartitionsRequest,
    ) -> None:
        cursor = _open_cursor(ctx, request.cursor)
        if cursor is not request.cursor:
            request = dataclasses.replace(request, cursor=cursor)
            frame = reencode_request(frame, header, request)
        if not request.topics:
            plan = _TopicPlan(header, True, ())
            forward(session, header, frame, WithState(_describe_topic_partitions_answer, plan))
        else:
            self._named(session, ctx, header, frame, request)

    def _named(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: DescribeTopicPartitionsRequest,
    ) -> None:
        """Explicit topics: only names at or after the cursor are described (and checked)."""
        cursor = request.cursor
        names = sorted(
            {t.name for t in request.topics if t.name >= (cursor.topic_name if cursor else "")}
        )
        if cursor is not None and (cursor.topic_name not in names or cursor.partition_index < 0):
            if ctx.enforcing:
                answer(session, header, self._all(header, request, INVALID))
            else:  # dry-run: untouched, the broker answers the same
                forward(session, header, frame)
            return
        mod = response_module(header.api_key, header.api_version)
        allowed: set[str] = set()
        errors: list[dtp_response.DescribeTopicPartitionsResponseTopic] = []
        for name in names:
            if ctx.check(header, DESCRIBE, TOPIC, name):
                allowed.add(name)
            else:
                errors.append(_dtp_topic(mod, ErrorCode.topic_authorization_failed, name))
        if not allowed:
            answer(
                session, header, error_body(header, request, ErrorCode.none, topics=tuple(errors))
            )
            return
        kept = tuple(t for t in request.topics if t.name in allowed)
        if len(kept) != len(request.topics):
            # a denied cursor topic is answered 29; the others then start at partition 0
            keep_cursor = cursor is not None and cursor.topic_name in allowed
            request = dataclasses.replace(
                request, topics=kept, cursor=cursor if keep_cursor else None
            )
            frame = reencode_request(frame, header, request)
        plan = _TopicPlan(header, False, tuple(errors))
        forward(session, header, frame, WithState(_describe_topic_partitions_answer, plan))

    @staticmethod
    def _all(
        header: RequestHeader, request: DescribeTopicPartitionsRequest, code: ErrorCode
    ) -> KioBody:
        """DescribeTopicPartitionsRequest.getErrorResponse."""
        mod = response_module(header.api_key, header.api_version)
        return error_body(
            header,
            request,
            ErrorCode.none,
            topics=tuple(_dtp_topic(mod, code, t.name) for t in request.topics),
        )


def _open_cursor(ctx: AuthContext, cursor: dtp_request.Cursor | None) -> dtp_request.Cursor | None:
    """The real cursor behind a sealed one; any other cursor (a real name, a token altered or
    sealed under another key) as it is: the broker then pages on from a name that is no topic."""
    seal = ctx.policy.cursors
    if cursor is None or seal is None:
        return cursor
    opened = seal.open(cursor.topic_name)
    if opened is None:
        return cursor
    return dataclasses.replace(
        cursor, topic_name=TopicName(opened[0]), partition_index=i32(opened[1])
    )


def _sealed_cursor(ctx: AuthContext, cursor: dtp_response.Cursor) -> dtp_response.Cursor:
    """`cursor` with its hidden topic name sealed into a token (partition 0 on the wire)."""
    seal = ctx.policy.cursors
    if seal is None:  # fail closed: the connection closes (internal error), the name stays hidden
        raise RuntimeError(
            "Policy.cursors is not set: a cursor naming a hidden topic cannot be sealed"
        )
    return dataclasses.replace(
        cursor,
        topic_name=TopicName(seal.seal(cursor.topic_name, cursor.partition_index)),
        partition_index=i32(0),
    )


def _dtp_topic(
    mod: ModuleType, code: ErrorCode, name: str
) -> dtp_response.DescribeTopicPartitionsResponseTopic:
    topic: dtp_response.DescribeTopicPartitionsResponseTopic = build(
        mod.DescribeTopicPartitionsResponseTopic,
        code,
        None,
        None,
        {"name": name, "topic_id": ZERO, "is_internal": False, "partitions": ()},
    )
    return topic


def _describe_topic_partitions_answer(
    session: ProxySession, slot: Slot, frame: Frame, plan: _TopicPlan
) -> bytes:
    ctx = session.context

    def merge(body: DescribeTopicPartitionsResponse) -> DescribeTopicPartitionsResponse:
        topics: list[dtp_response.DescribeTopicPartitionsResponseTopic] = []
        for t in body.topics:
            ctx.policy.topic_ids.learn(t.topic_id, t.name)
            if t.name is None:
                topics.append(t)
                continue
            if plan.all_topics and not ctx.check(plan.header, DESCRIBE, TOPIC, t.name):
                continue
            if ctx.enforcing:
                t = dataclasses.replace(
                    t, topic_authorized_operations=i32(ctx.authorized_operations(TOPIC, t.name))
                )
            topics.append(t)
        cursor = body.next_cursor
        if (
            plan.all_topics
            and cursor is not None
            and ctx.enforcing
            and not ctx.decide(DESCRIBE, TOPIC, cursor.topic_name).allowed
        ):  # a name the client may not learn: sealed, not audited (Kafka never sees it)
            cursor = _sealed_cursor(ctx, cursor)
        return dataclasses.replace(body, topics=tuple(topics) + plan.errors, next_cursor=cursor)

    return merged_response(frame, slot, merge)


__all__ = ["CreatePartitionsHandler", "DescribeTopicPartitionsHandler"]
