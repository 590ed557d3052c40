"""The partition APIs of topics: CreatePartitions and DescribeTopicPartitions.

* CreatePartitions reports duplicate names as INVALID_REQUEST before authorization, then
  checks ALTER per topic.
* DescribeTopicPartitions without topic names pages over the topics the client may DESCRIBE,
  as Kafka does: the broker pages over every topic (it answers the proxy), so the proxy reads
  broker pages on the control connection (the `AskCluster` effect) until the client's page
  is full, at most 1 + EXTRA_PAGES of them. Past that bound the page is short and its next
  cursor is where the reading stopped; when that names a hidden topic it is sealed
  (protocol/enforce/cursor.py, with the key in `Policy.cursors`) and opened again when the
  client sends it back.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
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
from kio.static.primitive import i32, i32Timedelta

from aclgate.authz.model import AclOperation, ResourceType
from aclgate.protocol.effects import AskCluster
from aclgate.protocol.enforce.base import (
    ApiHandler,
    KioBody,
    PerEntry,
    answer,
    error_body,
    forward,
    merged_response,
    reencode_request,
    splice_marked,
    spliced_answer,
)
from aclgate.protocol.enforce.build import NAME_MARK, NamedEntry, build
from aclgate.protocol.enforce.context import AuthContext
from aclgate.protocol.enforce.slices import decide_each
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

#: broker pages asked for beyond the first to fill one client page: the bound on the work one
#: all-topics request makes (a principal who may see 1 topic of 100,000 gets short pages,
#: each with a cursor, rather than making the proxy read every partition of the cluster)
EXTRA_PAGES = 4
#: the partition limit of those pages: Kafka's max.request.partition.size.limit default (a
#: broker caps a larger one at its own value, so asking more gains nothing)
EXTRA_PAGE_LIMIT = 2000


@dataclass
class _Named:
    header: RequestHeader
    #: the denied topics' entries: one marked entry, replaced in the answer by the `count`
    #: entries rendered as `items` (base.splice_marked)
    marked: dtp_response.DescribeTopicPartitionsResponseTopic
    items: bytes
    count: int


class DescribeTopicPartitionsHandler(ApiHandler):
    """DescribeTopicPartitionsRequestHandler: DESCRIBE per topic, audited even for all-topics."""

    granularity = "per topic"

    def describe(self) -> str:
        return (
            "`DESCRIBE TOPIC[name]` per topic at or after the cursor (logIfDenied=true even for "
            "all-topics); named topics denied: {29, name, zero id}; all-topics (empty list): "
            "paged over the topics the client may describe, as Kafka pages them (more broker "
            "pages are read to fill a page, at most 4 more); topic bitfields computed for "
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
        if request.topics:
            self._named(session, ctx, header, frame, request)
            return
        pages = _Pages(ctx, header, request)
        if ctx.enforcing:
            pages.ask(session, frame, request)
        else:  # dry-run: the broker's page, which holds every topic the client would see
            forward(session, header, frame, WithState(_one_page, pages))

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
        decide_each(  # a slice per turn: 1 MiB names 87,000 topics
            session,
            ctx,
            header,
            DESCRIBE,
            TOPIC,
            names,
            True,
            lambda verdicts: self._decided(session, header, frame, request, names, verdicts),
        )

    def _decided(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        request: DescribeTopicPartitionsRequest,
        names: Sequence[str],
        verdicts: list[bool],
    ) -> None:
        cursor = request.cursor
        mod = response_module(header.api_key, header.api_version)
        allowed = {n for n, ok in zip(names, verdicts, strict=True) if ok}
        denied = [n for n, ok in zip(names, verdicts, strict=True) if not ok]
        # denied topics rendered as bytes from one template (issue 20)
        marked = _dtp_topic(mod, ErrorCode.topic_authorization_failed, NAME_MARK)
        template = NamedEntry(marked)
        items = b"".join([template.render(n) for n in denied])
        if not allowed:
            empty = dataclasses.replace(request, topics=())
            one = error_body(header, empty, ErrorCode.none, topics=(marked,))
            session.respond(
                header, spliced_answer(header.correlation_id, one, marked, len(denied), items)
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
        plan = _Named(header, marked, items, len(denied))
        forward(session, header, frame, WithState(_named_answer, plan))

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


class _Pages:
    """One all-topics request answered as Kafka's DescribeTopicPartitionsRequestHandler and
    KRaftMetadataCache.describeTopicResponse page it: over the topics the client may DESCRIBE,
    in name order from the cursor, `limit` partitions (a topic may be cut; the next cursor is
    the first partition not returned, or the next topic's partition 0 when the page ends with
    a topic), the limit being the request's capped by the broker's
    max.request.partition.size.limit.

    The broker pages over every topic (it answers the proxy), so broker pages are read in
    turn (`feed`) until the client's page is full or the cluster has no more, at most
    1 + EXTRA_PAGES of them; past that the page is short and its cursor is where the reading
    stopped (sealed when it names a hidden topic)."""

    __slots__ = (
        "ctx",
        "first",
        "following",
        "header",
        "limit",
        "pages",
        "request",
        "seen",
        "taken",
        "throttle",
        "topics",
    )

    def __init__(
        self, ctx: AuthContext, header: RequestHeader, request: DescribeTopicPartitionsRequest
    ) -> None:
        self.ctx, self.header, self.request = ctx, header, request
        self.topics: list[dtp_response.DescribeTopicPartitionsResponseTopic] = []
        #: DESCRIBE decisions made for this request (a topic cut across pages is checked once)
        self.seen: dict[str, bool] = {}
        self.limit = self.taken = self.pages = 0
        self.first: DescribeTopicPartitionsResponse | None = None
        #: where the broker's last page left off (while more pages are read)
        self.following: dtp_response.Cursor | None = None
        self.throttle = i32Timedelta.parse(timedelta(0))

    def feed(
        self, page: DescribeTopicPartitionsResponse
    ) -> DescribeTopicPartitionsResponse | dtp_response.Cursor:
        """Take one broker page: the client's answer once it is complete, else the broker's
        cursor to read the next page from."""
        self.pages += 1
        self.throttle = max(self.throttle, page.throttle_time)
        if self.first is None:
            self.first = page
            # a page with a next cursor holds exactly the broker's capped limit
            asked = max(int(self.request.response_partition_limit), 1)
            held = sum(len(t.partitions) for t in page.topics)
            self.limit = asked if page.next_cursor is None else max(min(asked, held), 1)
        for topic in page.topics:
            self.ctx.policy.topic_ids.learn(topic.topic_id, topic.name)
            name = topic.name
            if name is None or not self._visible(name):
                continue
            parts = topic.partitions
            if self.taken == self.limit:  # the page ended with the topic before this one
                return self._answer(_cursor(name, parts[0].partition_index if parts else 0))
            take = min(self.limit - self.taken, len(parts))
            self._add(name, topic, parts[:take])
            if take < len(parts):
                return self._answer(_cursor(name, parts[take].partition_index))
        following = page.next_cursor
        if following is None:
            return self._answer(None)
        if self.taken == self.limit and self._may_see(following.topic_name):
            return self._answer(following)
        return following

    def stop(self, following: dtp_response.Cursor) -> DescribeTopicPartitionsResponse:
        """The answer when no more broker pages are read: what was gathered, and a cursor
        where the reading stopped (sealed when it names a topic the client may not see)."""
        if self.ctx.enforcing and not self._may_see(following.topic_name):
            # a name the client may not learn: sealed, not audited (Kafka never sees it)
            following = _sealed_cursor(self.ctx, following)
        return self._answer(following)

    def next_page(self, following: dtp_response.Cursor) -> DescribeTopicPartitionsRequest:
        return dataclasses.replace(
            self.request,
            cursor=dtp_request.Cursor(
                topic_name=following.topic_name, partition_index=following.partition_index
            ),
            response_partition_limit=i32(max(EXTRA_PAGE_LIMIT, self.limit)),
        )

    def ask(
        self, session: ProxySession, frame: Frame, request: DescribeTopicPartitionsRequest
    ) -> None:
        """Read one broker page on the control connection; the requests behind this one wait
        (hold), so the answer keeps its place."""
        session.wait(
            AskCluster(request, DescribeTopicPartitionsResponse),
            lambda page: self._asked(session, frame, page),
        )

    def _asked(
        self, session: ProxySession, frame: Frame, page: DescribeTopicPartitionsResponse | None
    ) -> None:
        if page is None:  # the cluster could not be asked
            if self.following is None:  # no page yet: the client's upstream pages, as before
                forward(session, self.header, frame, WithState(_one_page, self))
            else:
                answer(session, self.header, self.stop(self.following))
            return
        got = self.feed(page)
        if not isinstance(got, dtp_response.Cursor):
            answer(session, self.header, got)
        elif self.pages > EXTRA_PAGES:
            answer(session, self.header, self.stop(got))
        else:
            self.following = got
            self.ask(session, frame, self.next_page(got))

    def _visible(self, name: str) -> bool:
        known = self.seen.get(name)
        if known is None:
            known = self.seen[name] = self.ctx.check(self.header, DESCRIBE, TOPIC, name)
        return known

    def _may_see(self, name: str) -> bool:
        """Whether a cursor may name `name` (decided, not audited, unless already checked)."""
        known = self.seen.get(name)
        return known if known is not None else self.ctx.decide(DESCRIBE, TOPIC, name).allowed

    def _add(
        self,
        name: str,
        topic: dtp_response.DescribeTopicPartitionsResponseTopic,
        parts: tuple[dtp_response.DescribeTopicPartitionsResponsePartition, ...],
    ) -> None:
        self.taken += len(parts)
        last = self.topics[-1] if self.topics else None
        if last is not None and last.name == name:  # cut across broker pages: one entry
            self.topics[-1] = dataclasses.replace(last, partitions=last.partitions + parts)
            return
        if self.ctx.enforcing:
            topic = dataclasses.replace(
                topic,
                topic_authorized_operations=i32(self.ctx.authorized_operations(TOPIC, name)),
            )
        self.topics.append(dataclasses.replace(topic, partitions=parts))

    def _answer(self, cursor: dtp_response.Cursor | None) -> DescribeTopicPartitionsResponse:
        assert self.first is not None  # set by the first feed
        return dataclasses.replace(
            self.first,
            topics=tuple(self.topics),
            next_cursor=cursor,
            throttle_time=self.throttle,
        )


def _cursor(topic: str, partition: int) -> dtp_response.Cursor:
    return dtp_response.Cursor(topic_name=TopicName(topic), partition_index=i32(partition))


def _one_page(session: ProxySession, slot: Slot, frame: Frame, pages: _Pages) -> bytes:
    """The client's upstream answered the request itself (dry-run, or the control connection
    failed): that one page, filtered, with the broker's cursor sealed if need be."""

    def merge(body: DescribeTopicPartitionsResponse) -> DescribeTopicPartitionsResponse:
        got = pages.feed(body)
        return pages.stop(got) if isinstance(got, dtp_response.Cursor) else got

    return merged_response(frame, slot, merge)


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


def _named_answer(session: ProxySession, slot: Slot, frame: Frame, plan: _Named) -> bytes:
    """Named topics: the broker's answer with the client's bitfields and the denied topics."""
    ctx = session.context

    def merge(body: DescribeTopicPartitionsResponse) -> DescribeTopicPartitionsResponse:
        topics: list[dtp_response.DescribeTopicPartitionsResponseTopic] = []
        for t in body.topics:
            ctx.policy.topic_ids.learn(t.topic_id, t.name)
            if t.name is not None and ctx.enforcing:
                t = dataclasses.replace(
                    t, topic_authorized_operations=i32(ctx.authorized_operations(TOPIC, t.name))
                )
            topics.append(t)
        return dataclasses.replace(body, topics=(*topics, plan.marked))

    out = merged_response(frame, slot, merge)
    return splice_marked(out, slot, "topics", plan.marked, plan.items, plan.count)


__all__ = ["CreatePartitionsHandler", "DescribeTopicPartitionsHandler"]
