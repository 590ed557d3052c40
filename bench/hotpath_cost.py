"""CPU per request of aclgate's sans-IO hot path, by request type (docs/bench.md).

    python -m bench.hotpath_cost [--out bench/results] [--profile fetch_v17]

A ProxySession with the real API table, the proxy's decision recorder and metrics observer
(as proxy/listen/connection.py builds it, an authorizer allowing everyone) is fed one request and
the broker's answer per round trip, in memory: the Python work aclgate adds to a request
and its answer, without the sockets and the event loop. Each case is timed as the best of
several interleaved runs (the minimum is the cost without the machine's stalls). Warm caches:
a lower bound of what the same code costs between a client's requests in a live proxy,
where the broker and the client evict the CPU caches (bench/latency.py measures that).

Cases: Metadata v12 (one named topic, a cached answer), Produce v9 / v11 (one named topic,
one 100-byte record) and v13 (by topic id, one 15 KiB batch, as ProducerPerformance sends),
Fetch v17 sessionless by topic id (1 KiB of records in the answer), Fetch v17 incremental
in a kept KIP-227 session (no partition added).

`--profile CASE` prints cProfile's top functions for that case instead.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import timeit
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as fetch_req
from kio.schema.fetch.v17 import response as fetch_resp
from kio.schema.metadata.v12 import response as md_resp
from kio.schema.produce.v9 import response as p9_resp
from kio.schema.produce.v11 import response as p11_resp
from kio.schema.produce.v13 import request as p13_req
from kio.schema.produce.v13 import response as p13_resp
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i32, i32Timedelta, i64

from aclgate.authz.authorizer import Authorizer
from aclgate.protocol.codec import encode_response
from aclgate.protocol.enforce.context import AuthContext, Policy
from aclgate.protocol.enforce.table import advertised_versions, handlers
from aclgate.protocol.session import ProxySession, SessionConfig
from aclgate.proxy.audit.decisions import DecisionRecorder
from aclgate.proxy.ops.metrics import ProxyMetrics
from bench.latency import build_requests, encode_request, environment, record_batch
from bench.recording import measured_code, write_results

TOPIC = "bench"
TOPIC_ID = uuid.UUID(int=0xB3C4)
_NO_DELAY = i32Timedelta.parse(timedelta(0))


class Directory:
    """Node id -> a fixed proxy address, as the proxy's NodeDirectory answers."""

    generation = 1

    def learn(self, node_id: int, host: str, port: int) -> None:
        pass

    def advertise(self, node_id: int) -> tuple[str, int]:
        return ("127.0.0.1", 40000 + node_id)


class SinkIO:
    """The IO layer, reduced to counting what it is asked to write."""

    def __init__(self) -> None:
        self.client = 0
        self.upstream = 0
        self.closed: tuple[str, str | None] | None = None

    def write_client(self, data: bytes | memoryview) -> None:
        self.client += 1

    def write_upstream(self, data: bytes | memoryview) -> None:
        self.upstream += 1

    def close(self, reason: str, kind: str | None) -> None:
        self.closed = (reason, kind)

    def pause_client_reading(self) -> None:
        pass

    def resume_client_reading(self) -> None:
        pass

    def perform(self, token: int, effect: object) -> None:
        pass


def new_session() -> tuple[ProxySession, SinkIO, ProxyMetrics]:
    authorizer = Authorizer(allow_everyone_if_no_acl_found=True)
    authorizer.load(())
    metrics = ProxyMetrics()
    policy = Policy(authorizer=authorizer, sink=DecisionRecorder(metrics.hot.decisions, None))
    policy.topic_ids.learn(TOPIC_ID, TOPIC)
    config = SessionConfig(
        handlers=handlers(),
        allowed_versions=advertised_versions(None),
        directory=Directory(),  # type: ignore[arg-type]
    )
    io = SinkIO()
    ctx = AuthContext(policy, "User:ANONYMOUS", "127.0.0.1", "PLAINTEXT")
    return ProxySession(config, io, metrics, ctx), io, metrics


def _with_corr(frame: bytes, corr: int) -> bytes:
    out = bytearray(frame)
    out[8:12] = corr.to_bytes(4, "big", signed=True)
    return bytes(out)


def _produced(mod: Any) -> Any:
    """Partition 0 written at offset 7: the same entry in every Produce answer version."""
    return mod.PartitionProduceResponse(
        index=i32(0),
        error_code=ErrorCode.none,
        base_offset=i64(7),
        log_append_time=None,
        log_start_offset=i64(0),
        record_errors=(),
        error_message=None,
    )


def _answers(corr: int) -> dict[str, bytes]:
    partition = md_resp.MetadataResponsePartition(
        error_code=ErrorCode.none,
        partition_index=i32(0),
        leader_id=BrokerId(1),
        leader_epoch=i32(0),
        replica_nodes=(BrokerId(1),),
        isr_nodes=(BrokerId(1),),
        offline_replicas=(),
    )
    metadata = md_resp.MetadataResponse(
        throttle_time=_NO_DELAY,
        brokers=(
            md_resp.MetadataResponseBroker(
                node_id=BrokerId(1), host="127.0.0.1", port=i32(9092), rack=None
            ),
        ),
        cluster_id="cluster",
        controller_id=BrokerId(1),
        topics=(
            md_resp.MetadataResponseTopic(
                error_code=ErrorCode.none,
                name=TopicName(TOPIC),
                topic_id=TOPIC_ID,
                is_internal=False,
                partitions=(partition,),
                topic_authorized_operations=i32(-2147483648),
            ),
        ),
    )
    out = {"metadata": encode_response(corr, metadata)}
    for key, mod in (("produce", p9_resp), ("produce_v11", p11_resp)):
        out[key] = encode_response(
            corr,
            mod.ProduceResponse(
                responses=(
                    mod.TopicProduceResponse(
                        name=TopicName(TOPIC),
                        partition_responses=(_produced(mod),),
                    ),
                ),
                throttle_time=_NO_DELAY,
            ),
        )
    out["produce_v13"] = encode_response(
        corr,
        p13_resp.ProduceResponse(
            responses=(
                p13_resp.TopicProduceResponse(
                    topic_id=TOPIC_ID,
                    partition_responses=(_produced(p13_resp),),
                ),
            ),
            throttle_time=_NO_DELAY,
        ),
    )
    records = record_batch(b"x" * 1000, 1_700_000_000_000)
    for key, sid in (("fetch_v17", 0), ("fetch_v17_session", 77)):
        out[key] = encode_response(
            corr,
            fetch_resp.FetchResponse(
                throttle_time=_NO_DELAY,
                error_code=ErrorCode.none,
                session_id=i32(sid),
                responses=(
                    fetch_resp.FetchableTopicResponse(
                        topic_id=TOPIC_ID,
                        partitions=(
                            fetch_resp.PartitionData(
                                partition_index=i32(0),
                                error_code=ErrorCode.none,
                                high_watermark=i64(1),
                                aborted_transactions=None,
                                records=records,
                            ),
                        ),
                    ),
                ),
            ),
        )
    return out


def _fetch_session_request(epoch: int) -> bytes:
    fetch = fetch_req.FetchRequest(
        max_wait=i32Timedelta.parse(timedelta(milliseconds=500)),
        min_bytes=i32(1),
        session_id=i32(77 if epoch else 0),
        session_epoch=i32(epoch),
        topics=(
            ()
            if epoch
            else (
                fetch_req.FetchTopic(
                    topic_id=TOPIC_ID,
                    partitions=(
                        fetch_req.FetchPartition(
                            partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)
                        ),
                    ),
                ),
            )
        ),
        forgotten_topics_data=(),
    )
    return encode_request(0, fetch, client_id="perf-consumer-client")


def _produce_v13() -> bytes:
    batch = record_batch(b"x" * 15 * 1024, 1_700_000_000_000)
    body = p13_req.ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(timedelta(seconds=30)),
        topic_data=(
            p13_req.TopicProduceData(
                topic_id=TOPIC_ID,
                partition_data=(p13_req.PartitionProduceData(index=i32(0), records=batch),),
            ),
        ),
    )
    return encode_request(0, body, client_id="perf-producer-client")


def cases() -> dict[str, Callable[[], None]]:
    """One round trip per call: the request in, the broker's answer back out."""
    requests = build_requests(TOPIC, TOPIC_ID)
    requests["produce_v13"] = _produce_v13()
    out: dict[str, Callable[[], None]] = {}
    for name in ("metadata", "produce", "produce_v11", "produce_v13", "fetch_v17"):
        out[name] = _case(requests[name], _answers, name)
    out["fetch_v17_session"] = _session_case()
    return out


def _case(request: bytes, answers: Callable[[int], dict[str, bytes]], name: str) -> Any:
    session, io, metrics = new_session()
    frames = [(_with_corr(request, c), answers(c)[name]) for c in (1, 2)]
    turn = [0]

    def round_trip() -> None:
        request, answer = frames[turn[0] & 1]
        turn[0] += 1
        started = metrics.begin_step(metrics.step_requests)
        session.client_data(request)
        metrics.requests_done(started)
        started = metrics.begin_step(metrics.step_responses)
        session.upstream_data(answer)
        metrics.responses_done(started)

    round_trip()
    round_trip()
    assert io.closed is None and io.client == 2 and io.upstream == 2, (name, io.closed)
    return round_trip


def _session_case() -> Any:
    """Fetch v17 in a kept session: epoch 1, 2, ... with no partition added."""
    session, io, metrics = new_session()
    session.client_data(_with_corr(_fetch_session_request(0), 1))
    session.upstream_data(_answers(1)["fetch_v17_session"])
    assert io.closed is None and io.client == 1
    incremental = _fetch_session_request(1)
    answer = _answers(0)["fetch_v17_session"]
    state = {"epoch": 1, "corr": 2}

    def round_trip() -> None:
        corr = state["corr"]
        request = bytearray(incremental)
        request[8:12] = corr.to_bytes(4, "big")
        # session epoch: after the header, replica state is absent in v15+ ... patch by offset
        at = incremental.index(b"\x00\x00\x00\x4d\x00\x00\x00\x01") + 4
        request[at : at + 4] = state["epoch"].to_bytes(4, "big")
        state["epoch"] = state["epoch"] % 0x7FFFFFFF + 1
        state["corr"] = corr + 1
        reply = bytearray(answer)
        reply[4:8] = corr.to_bytes(4, "big")
        started = metrics.begin_step(metrics.step_requests)
        session.client_data(bytes(request))
        metrics.requests_done(started)
        started = metrics.begin_step(metrics.step_responses)
        session.upstream_data(bytes(reply))
        metrics.responses_done(started)

    for _ in range(3):
        round_trip()
    assert io.closed is None and io.upstream == 4, io.closed
    return round_trip


def measure(repeats: int = 9, number: int = 3000) -> dict[str, float]:
    """µs per round trip, the best of `repeats` interleaved runs of `number`."""
    fns = cases()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            best[name] = min(best[name], timeit.timeit(fn, number=number) / number * 1e6)
    return {k: round(v, 2) for k, v in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="write hotpath_cost.json/.md")
    parser.add_argument("--profile", default=None, help="cProfile one case instead")
    args = parser.parse_args()
    if args.profile:
        fn = cases()[args.profile]
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(20000):
            fn()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    load_before = os.getloadavg()[0]
    us = measure()
    env = environment()
    lines = [
        f"aclgate's sans-IO work per request and its answer (bench/hotpath_cost.py), "
        f"{measured_code(env)}, load {load_before:.1f} on {env['cores']} cores; best of 9 "
        "interleaved runs of 3,000 round trips, warm caches:",
        "",
        "| Request | µs per round trip |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in us.items()),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        write_results(
            args.out, "hotpath_cost", {"us": us, "load": load_before, "environment": env}, text
        )


if __name__ == "__main__":
    main()
