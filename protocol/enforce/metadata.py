"""Metadata: what a principal may see of the cluster.

* All-topics requests (null list; an empty list in v0) are forwarded; topics the principal may
  not DESCRIBE are dropped from the answer silently (logIfDenied=false), as Kafka does.
* Named topics are checked one by one (DESCRIBE, audited); denied ones are stripped from the
  request and answered with Kafka's shapes: by name {29, name, zero id, not internal}, by id
  {29, null name, id}; an id that cannot be resolved gets 100 (UNKNOWN_TOPIC_ID). As in Kafka,
  one non-zero id in a v12+ request makes the whole request by id: names are ignored (and
  removed from what is forwarded), so a name can never vouch for another topic's id.
* Auto-creation is forwarded only when the principal may CREATE every requested topic
  (CREATE on the cluster, or on each topic); otherwise the request goes with auto-creation off
  and topics that come back UNKNOWN_TOPIC_OR_PARTITION and may not be created get Kafka's
  create-denied answer (29), while those that may be created keep that answer and are
  created by a separate auto-creating Metadata request (the `AutoCreateTopics` effect, protocol/effects.py): a KRaft
  broker also answers 3 and creates them in the background. CREATE is audited only then,
  i.e. when the topic really did not exist, as Kafka checks CREATE only for missing topics.
* Authorized-operations bitfields are recomputed for the client's principal.

The answer is rewritten by walking the topic entries and copying kept byte slices (a full
decode and re-encode of a large Metadata answer costs milliseconds); the brokers array is
spliced as in the transparent proxy.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import uuid
from collections.abc import Container
from types import ModuleType
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.serial.readers import (
    read_compact_string_nullable,
    read_nullable_legacy_string,
)

from aclgate.authz.model import AclOperation, ResourceType
from aclgate.protocol.addresses import BrokerDirectory, advertised_brokers, metadata_brokers_span
from aclgate.protocol.codec import (
    DECODE_ERRORS,
    MalformedResponse,
    decode_request,
    encode_entity,
)
from aclgate.protocol.effects import AutoCreateTopics
from aclgate.protocol.enforce.base import (
    ApiHandler,
    KioBody,
    forward,
    reencode_request,
    spliced_answer,
)
from aclgate.protocol.enforce.build import NAME_MARK, NamedEntry, build
from aclgate.protocol.enforce.context import NOT_REQUESTED, AuthContext, ClusterView, NotReady
from aclgate.protocol.enforce.peek import peek_metadata
from aclgate.protocol.enforce.topics import ZERO
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.lengths import length_prefix, read_length
from aclgate.protocol.session import ProxySession, Slot, WithState
from aclgate.protocol.shapes.requests import MetadataRequest, MetadataRequestTopics
from aclgate.protocol.versions import response_class, response_module

DESCRIBE, CREATE = AclOperation.DESCRIBE, AclOperation.CREATE
TOPIC: Final = ResourceType.TOPIC
_I32: Final = struct.Struct(">i")
INTERNAL_TOPICS: Final = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state"}
)
#: (topic id, name) pairs a rewrite fed the topic id cache (replayed with a memoized answer)
Learned = list[tuple[uuid.UUID | None, str | None]]


class _Plan:
    """What the response rewrite must do for one forwarded Metadata request. A plain class,
    not a dataclass: compiled, a dataclass keeps the `dataclasses`-made `__init__`, a Python
    frame per request."""

    __slots__ = (
        "all_topics",
        "asked",
        "cluster_ops",
        "creatable_unknown_to_29",
        "create_if_unknown",
        "dropped",
        "errors",
        "header",
        "topic_ops",
    )

    def __init__(
        self,
        header: RequestHeader,
        all_topics: bool,
        errors: list[bytes],
        creatable_unknown_to_29: set[str],
        topic_ops: bool,
        cluster_ops: bool,
        asked: Container[str] | None = None,
    ) -> None:
        self.header = header
        self.all_topics = all_topics
        #: encoded MetadataResponseTopic errors to append
        self.errors = errors
        #: topics that may not be created: map 3 -> 29
        self.creatable_unknown_to_29 = creatable_unknown_to_29
        self.topic_ops = topic_ops
        self.cluster_ops = cluster_ops
        #: v3: topics to create aside
        self.create_if_unknown: set[str] = set()
        #: for a request the proxy narrowed (denied topics stripped), the names it forwarded
        #: (by name, or by an id it resolved): an answer entry of another topic is dropped.
        #: Kafka answers exactly what was asked, but a broker may not (tansu answers an empty
        #: list with every topic, as Kafka itself does at v0), and a stripped request must not
        #: become a wider one. None: all topics, or the client's request forwarded as it came.
        self.asked = asked
        #: the rewrite dropped an entry nobody asked for: its output is not remembered
        self.dropped = False


class MetadataHandler(ApiHandler):
    granularity = "per topic"
    topic_id_paths = (("topics",),)  # v10+ may name a topic by id

    def describe(self) -> str:
        return (
            "`DESCRIBE TOPIC[name]` per topic (all-topics requests: unauthorized topics silently "
            "omitted, logIfDenied=false); auto-creation only if `CREATE CLUSTER` (logIfDenied=false) "
            "or `CREATE TOPIC[name]`; v8-10 includeClusterAuthorizedOperations: `DESCRIBE CLUSTER` "
            "then the bitfield; topic bitfields computed for the client"
        )

    def __call__(self, session: ProxySession, header: RequestHeader, frame: Frame) -> None:
        """Named topics and nothing more asked (the common case): decide from the peeked
        names; the request is decoded only when some topics, not all, are denied (or nothing
        is known of the cluster yet), as the denied ones are stripped from it. Else the full
        path."""
        names = peek_metadata(frame, header)
        if names is None:
            return super().__call__(session, header, frame)
        ctx = session.context
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        try:
            verdict = {n: ctx.check(header, DESCRIBE, TOPIC, n, True, c) for n, c in counts.items()}
        except NotReady:  # raised by the first check, before anything was recorded
            return super().__call__(session, header, frame)
        if all(verdict.values()):
            # forwarded as the client sent it: the broker answers the client's own question
            plan = _Plan(header, False, [], set(), False, False)
            forward(session, header, frame, WithState(rewrite_metadata_answer, plan))
            return
        if not any(verdict.values()):  # answered from the names as `handle` would answer
            mod = response_module(header.api_key, header.api_version)
            errors = [
                _topic_error(mod, ErrorCode.topic_authorization_failed, n, None) for n in names
            ]
            plan = _Plan(header, False, errors, set(), False, False, asked=())
            if self._answer_alone(session, ctx, header, plan):
                return
        self.handle(session, ctx, header, frame, decode_request(frame, header), verdict)

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        # topic ids (v10+), auto-creation (v4+) and the bitfield flags exist by version, so
        # they are read with getattr (MetadataRequest's docstring names them)
        request: MetadataRequest,
        verdict: dict[str, bool] | None = None,
    ) -> None:
        """`verdict` (name -> allowed): the checks `__call__` has already made."""
        v = header.api_version
        topics = request.topics
        all_topics = topics is None or (v == 0 and not topics)
        topic_ops = (
            bool(getattr(request, "include_topic_authorized_operations", False)) and ctx.enforcing
        )
        cluster_ops = (
            bool(getattr(request, "include_cluster_authorized_operations", False)) and ctx.enforcing
        )
        plan = _Plan(header, all_topics, [], set(), topic_ops, cluster_ops)
        if all_topics or topics is None:
            forward(session, header, frame, WithState(rewrite_metadata_answer, plan))
            return
        mod = response_module(header.api_key, v)
        by_ids = v >= 12 and any(_topic_id(t) not in (None, ZERO) for t in topics)
        if by_ids:
            # One entry with an id and Kafka answers by ids alone, ignoring every name
            # (KafkaApis.handleTopicMetadataRequest, useTopicId): authorize what it will answer,
            # and forward exactly that (a name next to an id must not decide for the id).
            topics = tuple(
                dataclasses.replace(t, name=None)
                for t in topics
                if _topic_id(t) not in (None, ZERO)
            )
            request = dataclasses.replace(request, topics=topics)
        ids = [i for t in topics if t.name is None and (i := _topic_id(t)) is not None]
        names = ctx.topic_names_of(ids) if ids else {}
        kept: list[MetadataRequestTopics] = []
        counts: dict[str, int] = {}
        for t in topics:
            name = t.name
            if name is None and (topic_id := _topic_id(t)) is not None:
                name = names.get(topic_id)
            if name is not None:
                counts[name] = counts.get(name, 0) + 1
        if verdict is None:
            verdict = {n: ctx.check(header, DESCRIBE, TOPIC, n, True, c) for n, c in counts.items()}
        for t in topics:
            if t.name is not None:
                if verdict[t.name]:
                    kept.append(t)
                else:
                    plan.errors.append(
                        _topic_error(mod, ErrorCode.topic_authorization_failed, t.name, None)
                    )
            elif (topic_id := _topic_id(t)) is not None:  # v10+
                name = names.get(topic_id)
                if name is None:
                    plan.errors.append(
                        _topic_error(mod, ErrorCode.unknown_topic_id, None, topic_id)
                    )
                elif verdict[name]:
                    kept.append(t)
                else:
                    plan.errors.append(
                        _topic_error(mod, ErrorCode.topic_authorization_failed, None, topic_id)
                    )
        auto_create = bool(getattr(request, "allow_auto_topic_creation", False))
        changes: dict[str, Any] = {}
        if auto_create and kept and ctx.enforcing:
            wanted = [t.name for t in kept if t.name is not None]
            if not ctx.decide(CREATE, ResourceType.CLUSTER, "kafka-cluster").allowed:
                plan.creatable_unknown_to_29 = {
                    n for n in wanted if not ctx.decide(CREATE, TOPIC, n).allowed
                }
            if plan.creatable_unknown_to_29:
                changes["allow_auto_topic_creation"] = False
                plan.create_if_unknown = set(wanted) - plan.creatable_unknown_to_29
        if len(kept) != len(topics):  # narrowed (see _Plan.asked)
            plan.asked = {t.name for t in kept if t.name is not None} | {
                name
                for t in kept
                if t.name is None
                and (topic_id := _topic_id(t)) is not None
                and (name := names.get(topic_id)) is not None
            }
        if not kept and plan.errors and self._answer_alone(session, ctx, header, plan):
            return
        if len(kept) != len(topics) or changes or by_ids:
            request = dataclasses.replace(request, topics=tuple(kept), **changes)
            frame = reencode_request(frame, header, request)
        forward(session, header, frame, WithState(rewrite_metadata_answer, plan))

    def _answer_alone(
        self, session: ProxySession, ctx: AuthContext, header: RequestHeader, plan: _Plan
    ) -> bool:
        """Every named topic was refused: answer from the last view of the cluster."""
        view: ClusterView = ctx.policy.cluster_view
        if not view.seen():
            return False  # nothing seen yet: forward an empty request instead
        v = header.api_version
        mod = response_module(header.api_key, v)
        known = [
            build(
                mod.MetadataResponseBroker,
                ErrorCode.none,
                None,
                None,
                {"node_id": n, "host": "", "port": 0, "rack": rack},
            )
            for n, rack in sorted(view.racks.items())
        ]
        brokers = advertised_brokers(tuple(known), _NoLearn(session.config.brokers))
        # one marked entry, replaced by the encoded errors (`spliced_answer`)
        marked = _topic_error_entity(mod, ErrorCode.topic_authorization_failed, NAME_MARK, None)
        body = build(
            response_class(header.api_key, v),
            ErrorCode.none,
            None,
            None,
            {
                "brokers": brokers,
                "cluster_id": view.cluster_id,
                "controller_id": view.controller_id,
                "topics": (marked,),
                "cluster_authorized_operations": self._cluster_ops(ctx, header)
                if plan.cluster_ops
                else NOT_REQUESTED,
            },
        )
        errors = b"".join(plan.errors)
        session.respond(
            header, spliced_answer(header.correlation_id, body, marked, len(plan.errors), errors)
        )
        return True

    @staticmethod
    def _cluster_ops(ctx: AuthContext, header: RequestHeader) -> int:
        if ctx.check_cluster(header, DESCRIBE):
            return ctx.authorized_operations(ResourceType.CLUSTER, "kafka-cluster")
        return 0


def _topic_id(topic: MetadataRequestTopics) -> uuid.UUID | None:
    """A topic's id: v10+ may name topics by id (None: by name, or an older version)."""
    return getattr(topic, "topic_id", None)


class _NoLearn:
    """Advertise known nodes without recording the placeholder addresses."""

    def __init__(self, directory: BrokerDirectory):
        self.directory = directory

    def learn(self, node_id: int, host: str, port: int) -> None:
        pass

    def advertise(self, node_id: int) -> tuple[str, int] | None:
        return self.directory.advertise(node_id)


def _topic_error(
    mod: ModuleType, code: ErrorCode, name: str | None, topic_id: uuid.UUID | None
) -> bytes:
    """A denied or unknown topic's entry, encoded; one named by a plain name is rendered as
    bytes from one template per (version, code), since a request may name tens of thousands
    of denied topics (issue 20)."""
    if name is None or name in INTERNAL_TOPICS:
        return encode_entity(_topic_error_entity(mod, code, name, topic_id))
    return _named_topic_error(mod, code).render(name)


@functools.cache
def _named_topic_error(mod: ModuleType, code: ErrorCode) -> NamedEntry:
    return NamedEntry(_topic_error_entity(mod, code, NAME_MARK, None))


def _topic_error_entity(
    mod: ModuleType, code: ErrorCode, name: str | None, topic_id: uuid.UUID | None
) -> KioBody:
    """A denied or unknown topic's entry: the shared fields are built once per (version,
    code) and copied, since `build` inspects the class on every call."""
    cls, shared, own = _topic_error_template(mod, code)
    values = {
        "name": name,
        "topic_id": topic_id,
        "is_internal": name in INTERNAL_TOPICS if name else False,
    }
    return cls(**shared, **{field: values[field] for field in own})


@functools.cache
def _topic_error_template(
    mod: ModuleType, code: ErrorCode
) -> tuple[type, dict[str, Any], tuple[str, ...]]:
    """(class, the fields every such entry shares, the per-topic fields of this version)."""
    body = build(
        mod.MetadataResponseTopic,
        code,
        None,
        None,
        {"name": None, "partitions": (), "topic_authorized_operations": NOT_REQUESTED},
    )
    names = {f.name for f in dataclasses.fields(body)}
    own = tuple(n for n in ("name", "topic_id", "is_internal") if n in names)
    return type(body), {n: getattr(body, n) for n in names - set(own)}, own


# --------------------------------------------------------------------- response rewriting


def _read_string(frame: Frame, offset: int, flexible: bool) -> tuple[str | None, int]:
    reader = read_compact_string_nullable if flexible else read_nullable_legacy_string
    return reader(frame, offset)


def _memoizable(plan: _Plan, v: int) -> bool:
    """The rewrite depends on nothing but the broker's bytes and the address directory: no
    decision is taken (so none is audited or counted) and nothing is added or recomputed."""
    return not (
        plan.all_topics
        or plan.errors
        or plan.creatable_unknown_to_29
        or plan.create_if_unknown
        or plan.cluster_ops
        or (plan.topic_ops and v >= 8)
    )


def rewrite_metadata_answer(session: ProxySession, slot: Slot, frame: Frame, plan: _Plan) -> bytes:
    """Rewrite the broker's answer for the client; a plain one (see `_memoizable`) is
    remembered by its bytes and replayed, side effects on the shared caches included."""
    v = slot.api_version
    memo = session.config.answers
    if not _memoizable(plan, v) or len(frame) > memo.max_bytes:
        return _rewrite_answer(session, slot, frame, plan, [])
    directory = session.config.directory
    body = bytes(frame[8:])
    hit = memo.get((v, getattr(directory, "generation", None), body))
    view: ClusterView = session.context.policy.cluster_view
    asked = plan.asked
    if hit is not None and asked is not None:
        for _topic_id, name in hit[1]:
            if name not in asked:  # the same answer to another question: not replayed
                hit = None
                break
    if hit is None:
        learned: Learned = []
        out = _rewrite_answer(session, slot, frame, plan, learned)
        if not plan.dropped:
            # keyed on the generation after the rewrite: advertising may have bound a port
            key = (v, getattr(directory, "generation", None), body)
            entry = (out[8:], tuple(learned), view.cluster_id, view.controller_id, view.racks)
            memo.put(key, entry)
        return out
    rest: bytes  # the memo holds what the branch above put
    rest, replayed, view.cluster_id, view.controller_id, view.racks = hit
    learn = session.context.policy.topic_ids.learn
    for topic_id, name in replayed:
        learn(topic_id, name)
    return _I32.pack(len(rest) + 4) + bytes(frame[4:8]) + rest


def _rewrite_answer(
    session: ProxySession, slot: Slot, frame: Frame, plan: _Plan, learned: Learned
) -> bytes:
    """The full rewrite; appends the (topic id, name) pairs it fed the id cache to `learned`."""
    ctx: AuthContext = session.context
    v = slot.api_version
    flexible = response_class(3, v).__flexible__
    mod = response_module(3, v)
    topic_reader = entity_reader(mod.MetadataResponseTopic)
    view: ClusterView = ctx.policy.cluster_view
    try:
        b_start, b_end, brokers = metadata_brokers_span(frame, v)
        pos = b_end
        cluster_id = None
        if v >= 2:
            cluster_id, n = _read_string(frame, pos, flexible)
            pos += n
        controller_id = -1
        if v >= 1:
            (controller_id,) = _I32.unpack_from(frame, pos)
            pos += 4
        topics_at = pos
        count, n = read_length(frame, pos, flexible)
        pos += n
        kept: list[bytes] = []
        to_create: list[str] = []
        for _ in range(max(count, 0)):
            topic, used = topic_reader(frame, pos)
            raw = frame[pos : pos + used]
            pos += used
            topic_id = getattr(topic, "topic_id", None)
            ctx.policy.topic_ids.learn(topic_id, topic.name)
            learned.append((topic_id, topic.name))
            kept_raw = _rewrite_topic(ctx, plan, mod, topic, raw, v)
            if kept_raw is not None:
                kept.append(kept_raw)
            if (
                topic.name in plan.create_if_unknown
                and topic.error_code == ErrorCode.unknown_topic_or_partition
            ):
                to_create.append(topic.name)
        tail = bytearray(frame[pos:])
    except DECODE_ERRORS as exc:
        raise MalformedResponse(f"cannot walk Metadata v{v} topics: {exc!r}") from exc
    # audited now that the topics are known missing
    to_create = [n for n in to_create if ctx.check(plan.header, CREATE, TOPIC, n)]
    if to_create:
        session.notify(AutoCreateTopics(frozenset(to_create)))
    view.cluster_id = cluster_id
    view.controller_id = controller_id
    view.racks = {b.node_id: getattr(b, "rack", None) for b in brokers}
    kept.extend(plan.errors)
    if plan.cluster_ops and 8 <= v <= 10:
        _I32.pack_into(tail, 0, MetadataHandler._cluster_ops(ctx, plan.header))
    length = length_prefix(len(kept), flexible)
    new_brokers = session.config.broker_arrays.rewrite(
        bytes(frame[b_start:b_end]), brokers, v, session.config.brokers
    )
    payload = b"".join(
        (frame[4:b_start], new_brokers, frame[b_end:topics_at], length, *kept, bytes(tail))
    )
    return _I32.pack(len(payload)) + payload


def _rewrite_topic(
    ctx: AuthContext,
    plan: _Plan,
    mod: ModuleType,
    topic: KioBody,  # a MetadataResponseTopic of the answer's version
    raw: Frame,
    v: int,
) -> bytes | None:
    """The bytes to keep for one topic entry, or None to drop it."""
    name = topic.name
    asked = plan.asked
    if asked is not None and name is not None and name not in asked:
        plan.dropped = True  # an entry nobody asked for (see _Plan.asked)
        return None
    if (
        plan.all_topics
        and name is not None
        and not ctx.check(plan.header, DESCRIBE, TOPIC, name, False)
    ):
        return None
    if (
        name in plan.creatable_unknown_to_29
        and topic.error_code == ErrorCode.unknown_topic_or_partition
    ):
        ctx.check(plan.header, CREATE, TOPIC, name)  # audited now that the topic is known missing
        return _topic_error(mod, ErrorCode.topic_authorization_failed, name, None)
    # Kafka fills the bitfield on every topic the broker returned, errors included (a missing
    # topic shows what the principal could do with it); only its own authorization-error
    # entries keep "not requested"
    if not plan.topic_ops or v < 8 or name is None:
        return bytes(raw)
    ops = ctx.authorized_operations(TOPIC, name)
    if v >= 9 and raw[-1] != 0:  # tagged fields present: rebuild the entry rather than guess
        return encode_entity(dataclasses.replace(topic, topic_authorized_operations=ops))
    out = bytearray(raw)
    _I32.pack_into(out, len(out) - (5 if v >= 9 else 4), ops)
    return bytes(out)
