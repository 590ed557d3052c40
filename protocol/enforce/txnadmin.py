"""Transaction administration: DescribeTransactions and ListTransactions (KIP-664).

Both are answered by the transaction coordinator and filtered by Kafka's broker after the
fact, so the proxy filters the coordinator's answer the same way:

* DescribeTransactions: DESCRIBE on each transactional id (denied: {53, id, zeros}); the
  topics inside each returned state are dropped unless the principal may DESCRIBE them.
* ListTransactions: states whose transactional id the principal may not DESCRIBE are
  dropped. Never an error.

Kafka makes these checks with the default log flags (denials are logged), so they are
audited as any other denial.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict, deque
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import TypeVar

from kio.schema.describe_transactions.v0 import request as dt_request
from kio.schema.describe_transactions.v0 import response as dt_response
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v0 import response as lt_v0
from kio.schema.list_transactions.v1 import response as lt_v1
from kio.schema.list_transactions.v2 import response as lt_v2
from kio.static.primitive import TZAware, i16, i32Timedelta, i64

from aclgate.authz.model import AclOperation, ResourceType
from aclgate.protocol.enforce.base import (
    ApiHandler,
    answer,
    error_body,
    forward,
    merged_response,
    reencode_request,
)
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.context import AuthContext
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.session import ProxySession, Slot, WithState
from aclgate.protocol.versions import response_module

DESCRIBE = AclOperation.DESCRIBE
TOPIC, TXN = ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID
DENIED = ErrorCode.transactional_id_authorization_failed
_EPOCH = datetime.fromtimestamp(0, UTC)

#: DescribeTransactions has one version (v0); a new one needs these types widened
DescribeTransactionsRequest = dt_request.DescribeTransactionsRequest
DescribeTransactionsResponse = dt_response.DescribeTransactionsResponse
TransactionState = dt_response.TransactionState
#: what a DescribeTransactions handler decided: (request header, ids asked, allowed per id)
Decided = tuple[RequestHeader, tuple[str, ...], list[bool]]
#: a ListTransactions answer of any version (each is filtered into its own class)
ListTransactionsResponse = TypeVar(
    "ListTransactionsResponse",
    lt_v0.ListTransactionsResponse,
    lt_v1.ListTransactionsResponse,
    lt_v2.ListTransactionsResponse,
)


def _denied_state(mod: ModuleType, transactional_id: str) -> TransactionState:
    """KafkaApis' denied TransactionState: the id and the error, every other field its Java
    default (zeros, empty state, no topics)."""
    state: TransactionState = build(
        mod.TransactionState,
        DENIED,
        None,
        None,
        {
            "transactional_id": transactional_id,
            "transaction_state": "",
            "transaction_timeout": i32Timedelta.parse(timedelta(0)),
            "transaction_start_time": TZAware.parse(_EPOCH),
            "producer_id": i64(0),
            "producer_epoch": i16(0),
            "topics": (),
        },
    )
    return state


class DescribeTransactionsHandler(ApiHandler):
    granularity = "per transactional id; topic filtering silent"

    def describe(self) -> str:
        return (
            "`DESCRIBE TRANSACTIONAL_ID[id]` per id (53); topics inside each returned state "
            "dropped unless `DESCRIBE TOPIC[topic]`; answers in request order"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: DescribeTransactionsRequest,
    ) -> None:
        ids = tuple(request.transactional_ids)
        verdict = [ctx.check(header, DESCRIBE, TXN, t) for t in ids]
        allowed = tuple(t for t, ok in zip(ids, verdict, strict=True) if ok)
        if not allowed and ids:
            mod = response_module(header.api_key, header.api_version)
            states = tuple(_denied_state(mod, t) for t in ids)
            answer(
                session,
                header,
                error_body(header, request, ErrorCode.none, transaction_states=states),
            )
            return
        body: Frame = frame
        if len(allowed) != len(ids):
            body = reencode_request(
                frame, header, dataclasses.replace(request, transactional_ids=allowed)
            )
        forward(
            session, header, body, WithState(_describe_transactions_answer, (header, ids, verdict))
        )


def _describe_transactions_answer(
    session: ProxySession, slot: Slot, frame: Frame, decided: Decided
) -> bytes:
    ctx = session.context
    header, ids, verdict = decided
    mod = response_module(slot.api_key, slot.api_version)

    def visible(state: TransactionState) -> TransactionState:
        topics = tuple(t for t in state.topics if ctx.check(header, DESCRIBE, TOPIC, t.topic))
        return (
            state if len(topics) == len(state.topics) else dataclasses.replace(state, topics=topics)
        )

    def merge(body: DescribeTransactionsResponse) -> DescribeTransactionsResponse:
        by_id: dict[str, deque[TransactionState]] = defaultdict(deque)
        for state in body.transaction_states:
            by_id[state.transactional_id].append(state)
        out: list[TransactionState] = []
        for transactional_id, ok in zip(ids, verdict, strict=True):
            if not ok:
                out.append(_denied_state(mod, transactional_id))
            elif by_id[transactional_id]:
                out.append(visible(by_id[transactional_id].popleft()))
        leftovers = [visible(s) for queue in by_id.values() for s in queue]
        return dataclasses.replace(body, transaction_states=tuple(out + leftovers))

    return merged_response(frame, slot, merge)


__all__ = ["DescribeTransactionsHandler"]
