"""The event-loop cost of the worst all-topics DescribeTopicPartitions a client can send.

    python -m bench.dtp_pages [--runs 20]

A principal who may DESCRIBE almost nothing asks for all topics with the largest limit
(2,000, Kafka's max.request.partition.size.limit default): aclgate reads the first broker page
and EXTRA_PAGES more, 2,000 partitions each (3 replicas, 3 in-sync), all of them hidden, and
answers an empty page with a sealed cursor. Measured in process, without sockets: decoding
each page as the control connection does (codec.decode_response), the session's work on it
(the AskCluster resume: DESCRIBE checks, filtering) and the answer. Each page is one event-
loop callback, so the longest stall is one page; the total is the CPU one request costs.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import timedelta

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.protocol import codec
from aclgate.protocol.apiversions import unsupported_version_response
from aclgate.protocol.effects import AskCluster
from aclgate.protocol.enforce.context import AuthContext, Policy
from aclgate.protocol.enforce.cursor import KEY_SIZE, CursorSeal
from aclgate.protocol.enforce.partitions import EXTRA_PAGE_LIMIT, EXTRA_PAGES
from aclgate.protocol.enforce.table import advertised_versions, handlers
from aclgate.protocol.session import ProxySession, SessionConfig
from aclgate.protocol.versions import request_class, response_class, response_module

ALLOWED = advertised_versions()
CONFIG = SessionConfig(
    handlers=handlers(),
    allowed_versions=ALLOWED,
    unsupported_api_versions=lambda corr: unsupported_version_response(corr, ALLOWED[18][1]),
)
PARTITIONS_PER_TOPIC = 10


class _IO:
    def __init__(self) -> None:
        self.effects: list[tuple[int, object]] = []
        self.client = bytearray()

    def write_client(self, data: bytes | memoryview) -> None:
        self.client += data

    def write_upstream(self, data: bytes | memoryview) -> None:
        raise AssertionError("nothing goes up the client's connection")

    def close(self, reason: str, kind: str | None) -> None:
        raise AssertionError(reason)

    def pause_client_reading(self) -> None:
        pass

    def resume_client_reading(self) -> None:
        pass

    def perform(self, token: int, effect: object) -> None:
        self.effects.append((token, effect))


def page_frame(page: int) -> bytes:
    """A broker page of EXTRA_PAGE_LIMIT partitions of hidden topics, with a next cursor."""
    mod = response_module(75, 0)
    topics = []
    for t in range(EXTRA_PAGE_LIMIT // PARTITIONS_PER_TOPIC):
        name = f"hidden-{page:02}-{t:04}"
        partitions = tuple(
            mod.DescribeTopicPartitionsResponsePartition(
                error_code=ErrorCode.none,
                partition_index=i32(p),
                leader_id=i32(p % 3),
                leader_epoch=i32(7),
                replica_nodes=(i32(0), i32(1), i32(2)),
                isr_nodes=(i32(0), i32(1), i32(2)),
                eligible_leader_replicas=(),
                last_known_elr=(),
                offline_replicas=(),
            )
            for p in range(PARTITIONS_PER_TOPIC)
        )
        topics.append(
            mod.DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.none,
                name=name,
                topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name),
                is_internal=False,
                partitions=partitions,
                topic_authorized_operations=i32(-2147483648),
            )
        )
    cursor = mod.Cursor(topic_name=f"hidden-{page + 1:02}-0000", partition_index=i32(0))
    body = response_class(75, 0)(
        throttle_time=i32Timedelta.parse(timedelta(0)),
        topics=tuple(topics),
        next_cursor=cursor,
    )
    return codec.encode_response(0, body)


def one_request(frames: list[bytes]) -> tuple[float, float, int]:
    """(total seconds, longest page seconds, answer bytes) for one client request."""
    authorizer = Authorizer()
    authorizer.load(
        [
            AclBinding(ResourceType.TOPIC, "visible", PatternType.LITERAL, "User:ANONYMOUS",
                       "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        ]
    )  # fmt: skip
    policy = Policy(authorizer=authorizer, cursors=CursorSeal(bytes(KEY_SIZE)))
    io = _IO()
    session = ProxySession(
        CONFIG, io, context=AuthContext(policy, "User:ANONYMOUS", "127.0.0.1", "PLAINTEXT")
    )
    request = request_class(75, 0)(
        topics=(), response_partition_limit=i32(EXTRA_PAGE_LIMIT), cursor=None
    )
    started = time.perf_counter()
    session.client_data(codec.encode_request(1, request, "bench"))
    longest, pages = 0.0, 0
    while io.effects:
        token, effect = io.effects.pop(0)
        assert isinstance(effect, AskCluster)
        t0 = time.perf_counter()
        page = codec.decode_response(frames[pages], 75, 0)  # as the control connection does
        session.resume(token, page)
        longest = max(longest, time.perf_counter() - t0)
        pages += 1
    total = time.perf_counter() - started
    assert pages == 1 + EXTRA_PAGES and io.client, pages
    return total, longest, len(io.client)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    frames = [page_frame(i) for i in range(1 + EXTRA_PAGES)]
    one_request(frames)  # warm up
    runs = [one_request(frames) for _ in range(args.runs)]
    totals = sorted(r[0] for r in runs)
    longest = sorted(r[1] for r in runs)
    print(
        f"{1 + EXTRA_PAGES} broker pages x {EXTRA_PAGE_LIMIT} partitions "
        f"({len(frames[0]):,} bytes each), {args.runs} runs: "
        f"total per client request min {totals[0] * 1000:.1f} ms, median "
        f"{statistics.median(totals) * 1000:.1f} ms, max {totals[-1] * 1000:.1f} ms; longest "
        f"single page min {longest[0] * 1000:.1f} ms, median "
        f"{statistics.median(longest) * 1000:.1f} ms, max {longest[-1] * 1000:.1f} ms; "
        f"answer {runs[0][2]} bytes"
    )


if __name__ == "__main__":
    main()
