"""Topic administration and cluster description: CreateTopics, DeleteTopics, DescribeCluster."""

from __future__ import annotations

import dataclasses

from kio.schema.errors import ErrorCode

from authz.model import CLUSTER_NAME, AclOperation, ResourceType
from protocol.addresses import rewrite_describe_cluster
from protocol.enforce.base import (
    ApiHandler,
    answer,
    error_body,
    forward,
    merged_response,
    reencode_request,
)
from protocol.enforce.build import build
from protocol.enforce.context import NOT_REQUESTED
from protocol.enforce.topics import ZERO, resolve
from protocol.session import ProxySession, Slot
from protocol.versions import response_module

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
        forward(session, header, body, _create_topics_answer, (tuple(errors), hidden_configs))

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


def _create_topics_answer(session: ProxySession, slot: Slot, frame) -> bytes:
    ctx = session.context
    errors, hidden = slot.state

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
            "zero id); by id: 29 with the name only if DESCRIBE is allowed"
        )

    def handle(self, session, ctx, header, frame, request):
        if ctx.check_cluster(header, DELETE, log_if_denied=False):
            forward(session, header, frame)
            return
        mod = response_module(header.api_key, header.api_version)
        if header.api_version < 6:
            names = list(request.topic_names)
            described = {n: ctx.check(header, DESCRIBE, TOPIC, n) for n in dict.fromkeys(names)}
            deletable = {n: ctx.check(header, DELETE, TOPIC, n) for n in dict.fromkeys(names)}
            kept = [n for n in names if described[n] and deletable[n]]
            errors = tuple(
                self._result(mod, n, None) for n in dict.fromkeys(names) if n not in kept
            )
            replace = {"topic_names": tuple(kept)}
        else:
            by_id = [
                t.topic_id
                for t in request.topics
                if t.name is None and t.topic_id not in (None, ZERO)
            ]
            id_names = resolve(ctx.policy.topic_ids, ctx.looked_up, by_id) if by_id else {}
            entries = []
            for t in request.topics:
                name = t.name if t.name is not None else id_names.get(t.topic_id)
                entries.append((t, name))
            names = [n for _, n in entries if n is not None]
            described = {n: ctx.check(header, DESCRIBE, TOPIC, n) for n in dict.fromkeys(names)}
            deletable = {n: ctx.check(header, DELETE, TOPIC, n) for n in dict.fromkeys(names)}
            kept, errors_list = [], []
            for t, name in entries:
                if name is None and t.name is None and t.topic_id not in (None, ZERO):
                    errors_list.append(
                        self._result(mod, None, t.topic_id, ErrorCode.unknown_topic_id)
                    )
                elif name is None or (described[name] and deletable[name]):
                    kept.append(t)  # malformed entries are the broker's to reject
                elif t.name is not None:
                    errors_list.append(self._result(mod, t.name, None))
                else:
                    errors_list.append(
                        self._result(mod, name if described[name] else None, t.topic_id)
                    )
            errors = tuple(errors_list)
            replace = {"topics": tuple(kept)}
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
        forward(session, header, frame, _describe_cluster_answer, ops)


def _describe_cluster_answer(session: ProxySession, slot: Slot, frame) -> bytes:
    ops = slot.state
    if ops is not None:
        frame = merged_response(
            frame, slot, lambda b: dataclasses.replace(b, cluster_authorized_operations=ops)
        )
    return rewrite_describe_cluster(frame, slot.api_version, session.config.directory)


__all__ = ["NOT_REQUESTED", "CreateTopicsHandler", "DeleteTopicsHandler", "DescribeClusterHandler"]
