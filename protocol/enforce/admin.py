"""Topic administration and cluster description: CreateTopics, DeleteTopics, DescribeCluster."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from aclgate.authz.model import CLUSTER_NAME, AclOperation, ResourceType
from aclgate.protocol.addresses import rewrite_describe_cluster
from aclgate.protocol.codec import encode_entity
from aclgate.protocol.enforce.base import (
    ApiHandler,
    KioBody,
    error_body,
    forward,
    merged_response,
    reencode_request,
    spliced_answer,
    spliced_merge_rewriter,
)
from aclgate.protocol.enforce.build import NAME_MARK, NamedEntry, build
from aclgate.protocol.enforce.context import NOT_REQUESTED, AuthContext
from aclgate.protocol.enforce.protected import cluster_grant_excludes
from aclgate.protocol.enforce.slices import decide_each
from aclgate.protocol.enforce.topics import ZERO
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.session import ProxySession, Slot, WithState
from aclgate.protocol.shapes.requests import CreateTopicsRequest, DescribeClusterRequest
from aclgate.protocol.versions import response_module

if TYPE_CHECKING:  # the shapes that dataclasses.replace changes: kio's frozen dataclasses
    from _typeshed import DataclassInstance

    class CreatedTopic(DataclassInstance, Protocol):
        @property
        def name(self) -> str: ...
        @property
        def error_code(self) -> ErrorCode: ...

    class CreateTopicsAnswer(DataclassInstance, Protocol):
        @property
        def topics(self) -> Sequence[CreatedTopic]: ...


#: a DeleteTopics entry as (name, id): v1-5 name topics only, v6 either
TopicRef = tuple[str | None, uuid.UUID | None]

CREATE, DELETE, DESCRIBE, DESCRIBE_CONFIGS = (
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
)
TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
DENIED = ErrorCode.topic_authorization_failed


def _protected(ctx: AuthContext, names: Iterable[str | None]) -> bool:
    """A cluster-wide grant does not reach these topics (protocol/enforce/protected.py)."""
    policy = ctx.policy
    return cluster_grant_excludes(
        policy.protected_topics, policy.authorizer.super_users, ctx.principal, names, ctx.groups
    )


class CreateTopicsHandler(ApiHandler):
    """As the KRaft controller does it (ControllerApis.createTopics)."""

    granularity = "per topic"

    def describe(self) -> str:
        return (
            "`CREATE CLUSTER` (logIfDenied=false) allows all, else `CREATE TOPIC[name]` per topic "
            '(29, "Authorization failed."); independently `DESCRIBE_CONFIGS TOPIC[name]` '
            "(logIfDenied=false): if denied the topic is created but its configs are withheld "
            "(topic_config_error_code 29, partitions and replication factor -1); duplicate names "
            "and __cluster_metadata are INVALID_REQUEST before authorization"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: CreateTopicsRequest,
    ) -> None:
        mod = response_module(header.api_key, header.api_version)
        seen: dict[str, int] = {}
        for t in request.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        duplicates = {n for n, c in seen.items() if c > 1}
        candidates = [n for n in seen if n not in duplicates and n != CLUSTER_METADATA_TOPIC]
        if ctx.check_cluster(header, CREATE, log_if_denied=False):
            # ... but not a protected topic (protocol/enforce/protected.py)
            creatable = {n for n in candidates if not _protected(ctx, (n,))}
        else:
            creatable = {n for n in candidates if ctx.check(header, CREATE, TOPIC, n)}
        hidden_configs = {
            n for n in candidates if not ctx.check(header, DESCRIBE_CONFIGS, TOPIC, n, False)
        }
        errors: list[KioBody] = []
        for name in sorted(duplicates):
            errors.append(
                self._result(mod, name, ErrorCode.invalid_request, "Duplicate topic name.")
            )
        if CLUSTER_METADATA_TOPIC in seen and CLUSTER_METADATA_TOPIC not in duplicates:
            errors.append(
                self._result(
                    mod,
                    CLUSTER_METADATA_TOPIC,
                    ErrorCode.invalid_request,
                    f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.",
                )
            )
        refused = [n for n in candidates if n not in creatable]
        kept = [t for t in request.topics if t.name in creatable]
        if not kept:
            # the refused topics' results rendered as bytes from one (issue 20)
            marked = self._result(mod, NAME_MARK, DENIED, "Authorization failed.")
            template = NamedEntry(marked)
            items = [encode_entity(e) for e in errors] + [template.render(n) for n in refused]
            empty = dataclasses.replace(request, topics=())  # not mirrored for nothing
            one = error_body(header, empty, ErrorCode.none, topics=(marked,))
            session.respond(
                header,
                spliced_answer(header.correlation_id, one, marked, len(items), b"".join(items)),
            )
            return
        errors += [self._result(mod, n, DENIED, "Authorization failed.") for n in refused]
        body: Frame = frame
        if len(kept) != len(request.topics):
            body = reencode_request(frame, header, dataclasses.replace(request, topics=tuple(kept)))
        if not errors and not hidden_configs and header.api_version < 7:
            forward(session, header, body)
            return
        forward(
            session, header, body, WithState(_create_topics_answer, (tuple(errors), hidden_configs))
        )

    @staticmethod
    def _result(mod: ModuleType, name: str, code: ErrorCode, message: str) -> KioBody:
        return build(
            mod.CreatableTopicResult,
            code,
            None,
            None,
            {
                "name": name,
                "error_message": message,
                "num_partitions": -1,
                "replication_factor": -1,
                "configs": (),  # CreatableTopicResult's default: [], not null
            },
        )


def _create_topics_answer(
    session: ProxySession, slot: Slot, frame: Frame, denied: tuple[tuple[KioBody, ...], set[str]]
) -> bytes:
    ctx = session.context
    errors, hidden = denied

    def merge(body: CreateTopicsAnswer) -> CreateTopicsAnswer:
        topics: list[CreatedTopic] = []
        for t in body.topics:
            ctx.policy.topic_ids.learn(getattr(t, "topic_id", None), t.name)
            if t.name in hidden and t.error_code == ErrorCode.none and slot.api_version >= 5:
                t = dataclasses.replace(
                    t,
                    topic_config_error_code=DENIED,
                    configs=(),  # as the controller withholds them: [], not null
                    num_partitions=-1,
                    replication_factor=-1,
                )
            topics.append(t)
        return dataclasses.replace(body, topics=tuple(topics) + errors)

    return merged_response(frame, slot, merge)


class DeleteTopicsHandler(ApiHandler):
    """As the KRaft controller does it (ControllerApis.deleteTopics)."""

    granularity = "per topic"
    topic_id_paths = (("topics",),)  # v6+ by name or id

    def describe(self) -> str:
        return (
            "`DELETE CLUSTER` (logIfDenied=false) allows all, else `DESCRIBE TOPIC[name]` and "
            "`DELETE TOPIC[name]` per topic: by name without DESCRIBE or DELETE: 29 (name echoed, "
            "zero id); by id: 29 with the name only if DESCRIBE is allowed. Before any check, "
            "as Kafka: entries with neither or both of name and id, and duplicated names or "
            "ids, get 42 INVALID_REQUEST"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: KioBody,  # v1-5 list `topic_names`, v6 `topics`: typed below by version
    ) -> None:
        entries = request.topic_names if header.api_version < 6 else request.topics
        refs: list[TopicRef] = (
            [(name, None) for name in entries]
            if header.api_version < 6
            else [(t.name, t.topic_id) for t in entries]
        )
        cluster = ctx.check_cluster(header, DELETE, log_if_denied=False)
        if cluster and not _protected(ctx, (name for name, _ in refs)):
            forward(session, header, frame)
            return
        mod = response_module(header.api_key, header.api_version)
        invalid, names, ids = self._validate(mod, refs)
        id_names = ctx.topic_names_of(ids) if ids else {}
        checked = list(dict.fromkeys([*names, *(n for n in id_names.values() if n is not None)]))
        # DELETE CLUSTER still covers every topic but a protected one
        covered = {n for n in checked if cluster and not _protected(ctx, (n,))}
        asked = [n for n in checked if n not in covered]

        def decided(may_describe: list[bool], may_delete: list[bool]) -> None:
            described = dict.fromkeys(covered, True) | dict(zip(asked, may_describe, strict=True))
            deletable = dict.fromkeys(covered, True) | dict(zip(asked, may_delete, strict=True))
            self._decided(
                session, header, frame, request, entries, invalid, names, ids, id_names,
                described, deletable,
            )  # fmt: skip

        # every DESCRIBE, then every DELETE (as Kafka asks them), a slice per turn
        decide_each(
            session, ctx, header, DESCRIBE, TOPIC, asked, True,
            lambda may_describe: decide_each(
                session, ctx, header, DELETE, TOPIC, asked, True,
                lambda may_delete: decided(may_describe, may_delete),
            ),
        )  # fmt: skip

    def _decided(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        request: KioBody,
        entries: Sequence[Any],
        invalid: list[KioBody],
        names: list[str],
        ids: list[uuid.UUID],
        id_names: Mapping[uuid.UUID, str | None],
        described: dict[str, bool],
        deletable: dict[str, bool],
    ) -> None:
        mod = response_module(header.api_key, header.api_version)
        kept_names = {name for name in names if described[name] and deletable[name]}
        refused = [name for name in names if name not in kept_names]
        by_id: list[KioBody] = []
        kept_ids: set[uuid.UUID] = set()
        for topic_id in ids:
            id_name = id_names.get(topic_id)
            if id_name is None:
                by_id.append(self._result(mod, None, topic_id, ErrorCode.unknown_topic_id))
            elif described[id_name] and deletable[id_name]:
                kept_ids.add(topic_id)
            else:
                shown = id_name if described[id_name] else None
                by_id.append(self._result(mod, shown, topic_id))
        if header.api_version < 6:
            replace = {"topic_names": tuple(n for n in entries if n in kept_names)}
        else:
            replace = {
                "topics": tuple(
                    t
                    for t in entries
                    if (t.name in kept_names and t.topic_id in (None, ZERO))
                    or (t.name is None and t.topic_id in kept_ids)
                )
            }
        if not (invalid or refused or by_id):
            forward(session, header, frame)
            return
        # the refused names' results rendered as bytes from one (issue 20)
        marked = self._result(mod, NAME_MARK, None)
        template = NamedEntry(marked)
        items = b"".join(
            [
                *map(encode_entity, invalid),
                *(template.render(n) for n in refused),
                *map(encode_entity, by_id),
            ]
        )
        count = len(invalid) + len(refused) + len(by_id)
        if not next(iter(replace.values())):
            one = error_body(header, request, ErrorCode.none, responses=(marked,))
            session.respond(
                header, spliced_answer(header.correlation_id, one, marked, count, items)
            )
            return
        stripped = reencode_request(frame, header, dataclasses.replace(request, **replace))
        spliced = ("responses", marked, items, count)
        forward(session, header, stripped, WithState(spliced_merge_rewriter, spliced))

    @classmethod
    def _validate(
        cls, mod: ModuleType, refs: Sequence[TopicRef]
    ) -> tuple[list[KioBody], list[str], list[uuid.UUID]]:
        """Kafka's checks before authorization: an entry with neither or both of name and
        id, and every duplicated name or id, is INVALID_REQUEST whatever the ACLs say (and
        a duplicated one is not deleted at all). Returns those results and the unique names
        and ids left to authorize."""
        invalid: list[KioBody] = []
        names: dict[str, int] = {}
        ids: dict[uuid.UUID, int] = {}
        for name, topic_id in refs:
            has_id = topic_id not in (None, ZERO)
            if name is None and not has_id:
                invalid.append(
                    cls._invalid(mod, None, None, "Neither topic name nor id were specified.")
                )
            elif name is not None and has_id:
                invalid.append(
                    cls._invalid(
                        mod, name, topic_id, "You may not specify both topic name and topic id."
                    )
                )
            elif name is not None:
                names[name] = names.get(name, 0) + 1
            else:
                assert topic_id is not None  # has_id
                ids[topic_id] = ids.get(topic_id, 0) + 1
        invalid += [
            cls._invalid(mod, n, None, "Duplicate topic name.") for n, c in names.items() if c > 1
        ]
        invalid += [
            cls._invalid(mod, None, i, "Duplicate topic id.") for i, c in ids.items() if c > 1
        ]
        return (
            invalid,
            [n for n, c in names.items() if c == 1],
            [i for i, c in ids.items() if c == 1],
        )

    @staticmethod
    def _invalid(
        mod: ModuleType, name: str | None, topic_id: uuid.UUID | None, message: str
    ) -> KioBody:
        return build(
            mod.DeletableTopicResult,
            ErrorCode.invalid_request,
            None,
            None,
            {"name": name, "topic_id": topic_id, "error_message": message},
        )

    @staticmethod
    def _result(
        mod: ModuleType,
        name: str | None,
        topic_id: uuid.UUID | None,
        code: ErrorCode = DENIED,
    ) -> KioBody:
        return build(
            mod.DeletableTopicResult, code, None, None, {"name": name, "topic_id": topic_id}
        )


class DescribeClusterHandler(ApiHandler):
    def describe(self) -> str:
        return (
            "no check; with include_cluster_authorized_operations: `DESCRIBE CLUSTER`, then the "
            "bitfield for the client (0 if denied)"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: DescribeClusterRequest,
    ) -> None:
        ops: int | None
        if request.include_cluster_authorized_operations and ctx.enforcing:
            if ctx.check_cluster(header, DESCRIBE):
                ops = ctx.authorized_operations(CLUSTER, CLUSTER_NAME)
            else:
                ops = 0
        else:
            ops = None
        forward(session, header, frame, WithState(_describe_cluster_answer, ops))


def _describe_cluster_answer(
    session: ProxySession, slot: Slot, frame: Frame, ops: int | None
) -> bytes:
    ops = ops
    if ops is not None:
        frame = merged_response(
            frame, slot, lambda b: dataclasses.replace(b, cluster_authorized_operations=ops)
        )
    return rewrite_describe_cluster(frame, slot.api_version, session.config.brokers)


__all__ = ["NOT_REQUESTED", "CreateTopicsHandler", "DeleteTopicsHandler", "DescribeClusterHandler"]
