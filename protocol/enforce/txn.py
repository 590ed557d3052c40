"""Idempotence and transactions: InitProducerId and AddPartitionsToTxn."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kio.schema.errors import ErrorCode

from aclgate.authz.model import AclOperation, ResourceType
from aclgate.protocol.codec import encode_response
from aclgate.protocol.effects import LookUpPartitionCounts
from aclgate.protocol.enforce.base import (
    ApiHandler,
    KioBody,
    answer,
    error_body,
    forward,
    forward_if_cluster,
)
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.context import AuthContext
from aclgate.protocol.enforce.metadata import INTERNAL_TOPICS
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.session import ProxySession
from aclgate.protocol.shapes.requests import (
    BrokerAddPartitionsToTxn,
    InitProducerIdRequest,
    ProducerAddPartitionsToTxn,
    ProducerAddPartitionsToTxnV3AndBelowTopics,
)
from aclgate.protocol.versions import response_module

WRITE, IDEMPOTENT_WRITE, CLUSTER_ACTION = (
    AclOperation.WRITE,
    AclOperation.IDEMPOTENT_WRITE,
    AclOperation.CLUSTER_ACTION,
)
TOPIC, TXN = ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID


#: a partition's error code in a denied AddPartitionsToTxn: code_for(topic, partition)
CodeFor = Callable[[str, int], ErrorCode]


class InitProducerIdHandler(ApiHandler):
    def describe(self) -> str:
        return (
            "with a transactional id: `WRITE TRANSACTIONAL_ID[transactional_id]` (53); without: "
            "`IDEMPOTENT_WRITE CLUSTER` (logIfDenied=false) or authorizeByResourceType(WRITE, TOPIC) "
            "(KIP-679), else 31"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: InitProducerIdRequest,
    ) -> None:
        txn = request.transactional_id
        if txn is not None:
            if ctx.check(header, WRITE, TXN, txn):
                forward(session, header, frame)
            else:
                answer(
                    session,
                    header,
                    error_body(header, request, ErrorCode.transactional_id_authorization_failed),
                )
            return
        if ctx.check_cluster(header, IDEMPOTENT_WRITE, log_if_denied=False) or ctx.by_resource_type(
            header, WRITE, TOPIC
        ):
            forward(session, header, frame)
        else:
            answer(
                session, header, error_body(header, request, ErrorCode.cluster_authorization_failed)
            )


class AddPartitionsToTxnHandler(ApiHandler):
    """v0-3 come from producers; v4+ (batched) only from brokers and need CLUSTER_ACTION."""

    granularity = "transaction, then per topic (all-or-nothing)"

    def describe(self) -> str:
        return (
            "v0-3: `WRITE TRANSACTIONAL_ID[transactional_id]` (every partition 53), then `WRITE "
            "TOPIC[name]` per topic (internal topics always 29); any denied partition fails the "
            "whole request: denied 29, partitions the cluster does not have 3 (asked upstream), "
            "the others 55 (OPERATION_NOT_ATTEMPTED). v4+: `CLUSTER_ACTION CLUSTER` (31)"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: ProducerAddPartitionsToTxn | BrokerAddPartitionsToTxn,
    ) -> None:
        if header.api_version >= 4:
            forward_if_cluster(
                session, ctx, header, frame, request, CLUSTER_ACTION, results_by_transaction=()
            )
            return
        # v0-3: the version tells the shape (mypy cannot narrow on it)
        producer: ProducerAddPartitionsToTxn = request  # type: ignore[assignment]
        txn = producer.v3_and_below_transactional_id
        topics = producer.v3_and_below_topics
        if not ctx.check(header, WRITE, TXN, txn):
            self._answer(
                session,
                header,
                producer,
                topics,
                lambda name, partition: ErrorCode.transactional_id_authorization_failed,
            )
            return
        counts: dict[str, int] = {}
        for t in topics:
            if t.name not in INTERNAL_TOPICS:
                counts[t.name] = counts.get(t.name, 0) + len(t.partitions)
        allowed = {n for n, c in counts.items() if ctx.check(header, WRITE, TOPIC, n, True, c)}
        if all(t.name in allowed for t in topics):
            forward(session, header, frame)
            return
        # Nothing is added: denied topics get 29; of the allowed ones, partitions the cluster
        # does not have get 3 and the rest 55, so the proxy asks which exist (Kafka reads its
        # metadata cache). The answer keeps its place in the response order meanwhile.
        if not allowed:
            self._answer(session, header, producer, topics, _partition_codes(allowed, None))
            return

        def answer_with(partitions: dict[str, int] | None) -> bytes:
            body = self._body(header, producer, topics, _partition_codes(allowed, partitions))
            return encode_response(header.correlation_id, body)

        session.answer_later(header, LookUpPartitionCounts(frozenset(allowed)), answer_with)

    @classmethod
    def _answer(
        cls,
        session: ProxySession,
        header: RequestHeader,
        request: ProducerAddPartitionsToTxn,
        topics: Sequence[ProducerAddPartitionsToTxnV3AndBelowTopics],
        code_for: CodeFor,
    ) -> None:
        answer(session, header, cls._body(header, request, topics, code_for))

    @staticmethod
    def _body(
        header: RequestHeader,
        request: ProducerAddPartitionsToTxn,
        topics: Sequence[ProducerAddPartitionsToTxnV3AndBelowTopics],
        code_for: CodeFor,
    ) -> KioBody:
        """`code_for(topic, partition)` gives each partition's error; a topic's own error is
        that of its first partition (v3 and below have no topic-level code)."""
        mod = response_module(header.api_key, header.api_version)
        results = tuple(
            build(
                mod.AddPartitionsToTxnTopicResult,
                code_for(t.name, t.partitions[0] if t.partitions else 0),
                None,
                None,
                {
                    "name": t.name,
                    "results_by_partition": tuple(
                        build(
                            mod.AddPartitionsToTxnPartitionResult,
                            code_for(t.name, p),
                            None,
                            None,
                            {"partition_index": p},
                        )
                        for p in t.partitions
                    ),
                },
            )
            for t in topics
        )
        return error_body(header, request, ErrorCode.none, results_by_topic_v3_and_below=results)


def _partition_codes(allowed: set[str], partitions: dict[str, int] | None) -> CodeFor:
    """Kafka's codes when any partition fails: 29 denied, 3 not in the cluster, else 55.
    `partitions` None: the cluster could not be asked; every allowed partition gets 55."""

    def code_for(name: str, partition: int) -> ErrorCode:
        if name not in allowed:
            return ErrorCode.topic_authorization_failed
        if partitions is not None and not 0 <= partition < partitions.get(name, 0):
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.operation_not_attempted

    return code_for
