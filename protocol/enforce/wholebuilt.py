"""Whole-request checks whose error answer mirrors a request array of another shape.

AlterReplicaLogDirs and AlterUserScramCredentials are whole-request ALTER CLUSTER checks (the
rows in protocol/enforce/table.py): when denied, every part of the request fails, and the
answer has one entry per part of the request, built the way the request's getErrorResponse
builds it in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from aclgate.protocol.enforce.base import (
    KioBody,
    Whole,
    answer,
    error_body,
    first_denied,
    forward,
)
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.context import AuthContext
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.session import ProxySession
from aclgate.protocol.versions import response_module

if TYPE_CHECKING:
    from kio.schema.alter_replica_log_dirs.v1 import request as alter_dirs_v1
    from kio.schema.alter_replica_log_dirs.v2 import request as alter_dirs_v2
    from kio.schema.alter_user_scram_credentials.v0 import request as alter_scram_v0

    AlterReplicaLogDirsRequest: TypeAlias = (
        alter_dirs_v1.AlterReplicaLogDirsRequest | alter_dirs_v2.AlterReplicaLogDirsRequest
    )
    AlterUserScramCredentialsRequest: TypeAlias = alter_scram_v0.AlterUserScramCredentialsRequest


@dataclass
class WholeBuilt(Whole):
    """A Whole whose error answer mirrors a request array of another shape: `builder(header,
    request, code)` builds it, as the request's getErrorResponse does in Kafka."""

    #: (header, request, code) -> the error answer; the request is the row's own API, any
    #: version (the builders below take their API's requests)
    builder: Callable[[RequestHeader, KioBody, ErrorCode], KioBody] = field(kw_only=True)

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: KioBody,
    ) -> None:
        denied = first_denied(ctx, header, request, self.checks)
        if denied is None:
            forward(session, header, frame)
        else:
            answer(session, header, self.builder(header, request, denied.error))


def alter_replica_log_dirs_error(
    header: RequestHeader, request: AlterReplicaLogDirsRequest, code: ErrorCode
) -> KioBody:
    """AlterReplicaLogDirsRequest.getErrorResponse: one topic result per (dir, topic), every
    partition carrying the error."""
    mod = response_module(header.api_key, header.api_version)
    results = tuple(
        build(
            mod.AlterReplicaLogDirTopicResult,
            code,
            None,
            None,
            {
                "topic_name": topic.name,
                "partitions": tuple(
                    build(
                        mod.AlterReplicaLogDirPartitionResult,
                        code,
                        None,
                        None,
                        {"partition_index": p},
                    )
                    for p in topic.partitions
                ),
            },
        )
        for d in request.dirs
        for topic in d.topics
    )
    return error_body(header, request, code, results=results)


def alter_user_scram_credentials_error(
    header: RequestHeader, request: AlterUserScramCredentialsRequest, code: ErrorCode
) -> KioBody:
    """AlterUserScramCredentialsRequest.getErrorResponse: one result per distinct user of
    deletions and upsertions, sorted by name."""
    mod = response_module(header.api_key, header.api_version)
    users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
    results = tuple(
        build(mod.AlterUserScramCredentialsResult, code, None, None, {"user": u}) for u in users
    )
    return error_body(header, request, code, results=results)


__all__ = ["WholeBuilt", "alter_replica_log_dirs_error", "alter_user_scram_credentials_error"]
