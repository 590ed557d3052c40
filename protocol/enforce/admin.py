"""Topic administration and cluster description: CreateTopics, DeleteTopics, DescribeCluster."""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode

from aclgate.authz.model import CLUSTER_NAME, AclOperation, ResourceType
from aclgate.protocol.addresses import rewrite_describe_cluster
from aclgate.protocol.enforce.base import (
    ApiHandler,
    answer,
    error_body,
    forward,
    merged_response,
    reencode_request,
)
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.context import NOT_REQUESTED
from aclgate.protocol.enforce.topics import ZERO, resolve
from aclgate.protocol.framing import Frame
from aclgate.protocol.session import ProxySession, Slot, WithState
from aclgate.protocol.versions import response_module

CREATE, DELETE, DESCRIBE, DESCRIBE_CONFIGS = (
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
)
TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
DENIED = ErrorCode.topic_authorization_failed


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

    def handle(self, session, ctx, header, frame, request):
        mod = response_module(header.api_key, header.api_version)
        seen: dict[str, int] = {}
        for t in request.topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        duplicates = {n for n, c in seen.items() if c > 1}
        candidates = [n for n in seen if n not in duplicates and n != CLUSTER_METADATA_TOPIC]
        if ctx.check_cluster(header, CREATE, log_if_denied=False):
            creatable = set(candidates)
        else:
            creatable = {n for n in candidates if ctx.check(header, CREATE, TOPIC, n)}
        hidden_configs = {
            n for n in candidates if not ctx.check(header, DESCRIBE_CONFIGS, TOPIC, n, False)
        }
        errors = []
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
        errors += [
            self._result(mod, n, DENIED, "Authorization failed.")
            for n in candidates
            if n not in creatable
        ]
        kept = [t for t in request.topics if t.name in creatable]
        if not kept:
            answer(
                session, header, error_body(header, request, ErrorCode.none, topics=tuple(errors))
            )
            return
        body = frame
        if len(kept) != len(request.topics):
            body = reencode_request(frame, header, dataclasses.replace(request, topics=tuple(kept)))
        if not errors and not hidden_configs and header.api_version < 7:
            forward(session, header, body)
            return
        forward(
            session, header, body, WithState(_create_topics_answer, (tuple(errors), hidden_configs))
        )

    @staticmethod
    def _result(mod, name: str, code: ErrorCode, message: str):
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
                "configs": None,
            },
        )


def _create_topics_answer(
    session: ProxySession, slot: Slot, frame: Frame, denied: tuple[tuple[Any, ...], set[str]]
) -> bytes:
    ctx = session.context
    errors, hidden = denied

    def merge(body):
        topics = []
        for t in body.topics:
            ctx.policy.topic_ids.learn(getattr(t, "topic_id", None), t.name)
            if t.name in hidden and t.error_code == ErrorCode.none and slot.api_version >= 5:
                t = dataclasses.replace(
                    t,
                    topic_config_error_code=DENIED,
                    configs=None,
                    num_partitions=-1,
                    replication_factor=-1,
                )
            topics.append(t)
        return dataclasses.replace(body, topics=tuple(topics) + errors)

    return merged_response(frame, slot, merge)


class DeleteTopicsHandler(ApiHandler):
    """As the KRaft controller does it (ControllerApis.deleteTopics)."""

    granularity = "per topic"

    def describe(self) -> str:
        return (
            "`DELETE CLUSTER` (logIfDenied=false) allows all, else `DESCRIBE TOPIC[name]` and "
            "`DELETE TOPIC[name]` per topic: by name without DESCRIBE or DELETE: 29 (name echoed, "
            "zero id); by id: 29 with the name only if DESCRIBE is allowed. Before any check, "
            "as Kafka: entries with neither or both of name and id, and duplicated names or "
            "ids, get 42 INVALID_REQUEST"
        )

    def handle(self, session, ctx, header, frame, request):
        if ctx.check_cluster(header, DELETE, log_if_denied=False):
            forward(session, header, frame)
            return
        mod = response_module(header.api_key, header.api_version)
        entries = request.topic_names if header.api_version < 6 else request.topics
        invalid, names, ids = self._validate(mod, header.api_version, entries)
        id_names = resolve(ctx.policy.topic_ids, ctx.looked_up, ids) if ids else {}
        checked = list(dict.fromkeys([*names, *(n for n in id_names.values() if n is not None)]))
        described = {n: ctx.check(header, DESCRIBE, TOPIC, n) for n in checked}
        deletable = {n: ctx.check(header, DELETE, TOPIC, n) for n in checked}
        errors_list = list(invalid)
        kept_names = set()
        for name in names:
            if described[name] and deletable[name]:
                kept_names.add(name)
            else:
                errors_list.append(self._result(mod, name, None))
        kept_ids = set()
        for topic_id in ids:
            id_name = id_names.get(topic_id)
            if id_name is None:
                errors_list.append(self._result(mod, None, topic_id, ErrorCode.unknown_topic_id))
            elif described[id_name] and deletable[id_name]:
                kept_ids.add(topic_id)
            else:
                shown = id_name if described[id_name] else None
                errors_list.append(self._result(mod, shown, topic_id))
        errors = tuple(errors_list)
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
        if not errors:
            forward(session, header, frame)
            return
        if not next(iter(replace.values())):
            answer(session, header, error_body(header, request, ErrorCode.none, responses=errors))
            return
        stripped = reencode_request(frame, header, dataclasses.replace(request, **replace))
        forward(
            session,
            header,
            stripped,
            lambda s, slot, f: merged_response(
                f, slot, lambda b: dataclasses.replace(b, responses=tuple(b.responses) + errors)
            ),
        )

    @classmethod
    def _validate(cls, mod, version: int, entries) -> tuple[list, list[str], list]:
        """Kafka's checks before authorization: an entry with neither or both of name and
        id, and every duplicated name or id, is INVALID_REQUEST whatever the ACLs say (and
        a duplicated one is not deleted at all). Returns those results and the unique names
        and ids left to authorize."""
        invalid: list = []
        names: dict[str, int] = {}
        ids: dict = {}
        for entry in entries:
            name, topic_id = (entry, None) if version < 6 else (entry.name, entry.topic_id)
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
    def _invalid(mod, name, topic_id, message: str):
        return build(
            mod.DeletableTopicResult,
            ErrorCode.invalid_request,
            None,
            None,
            {"name": name, "topic_id": topic_id, "error_message": message},
        )

    @staticmethod
    def _result(mod, name, topic_id, code: ErrorCode = DENIED):
        return build(
            mod.DeletableTopicResult, code, None, None, {"name": name, "topic_id": topic_id}
        )


class DescribeClusterHandler(ApiHandler):
    def describe(self) -> str:
        return (
            "no check; with include_cluster_authorized_operations: `DESCRIBE CLUSTER`, then the "
            "bitfield for the client (0 if denied)"
        )

    def handle(self, session, ctx, header, frame, request):
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
