"""Whole-request checks whose error answer mirrors a request array of another shape.

AlterReplicaLogDirs and AlterUserScramCredentials are whole-request ALTER CLUSTER checks (the
rows in protocol/enforce/table.py): when denied, every part of the request fails, and the
answer has one entry per part of the request, built the way the request's getErrorResponse
builds it in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from aclgate.protocol.enforce.base import Whole, answer, error_body, first_denied, forward
from aclgate.protocol.enforce.build import build
from aclgate.protocol.versions import response_module


@dataclass
class WholeBuilt(Whole):
    """A Whole whose error answer mirrors a request array of another shape: `builder(header,
    request, code)` builds it, as the request's getErrorResponse does in Kafka."""

    builder: Callable[[Any, Any, ErrorCode], Any] = field(kw_only=True)

    def handle(self, session, ctx, header, frame, request):
        denied = first_denied(ctx, header, request, self.checks)
        if denied is None:
            forward(session, header, frame)
        else:
            answer(session, header, self.builder(header, request, denied.error))


def alter_replica_log_dirs_error(header, request, code: ErrorCode) -> Any:
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


def alter_user_scram_credentials_error(header, request, code: ErrorCode) -> Any:
    """AlterUserScramCredentialsRequest.getErrorResponse: one result per distinct user of
    deletions and upsertions, sorted by name."""
    mod = response_module(header.api_key, header.api_version)
    users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
    results = tuple(
        build(mod.AlterUserScramCredentialsResult, code, None, None, {"user": u}) for u in users
    )
    return error_body(header, request, code, results=results)


__all__ = ["WholeBuilt", "alter_replica_log_dirs_error", "alter_user_scram_credentials_error"]
