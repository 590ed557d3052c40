"""The hot-path shortcuts change no answer, no decision count and no audit line.

Sans-IO: a ProxySession with the real API table, a recording IO and the proxy's own decision
recorder, fed hand-built requests and broker answers.
"""

from __future__ import annotations

import struct
import uuid
from datetime import timedelta

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta

from authz.authorizer import Authorizer
from bench.latency import encode_request
from protocol.codec import encode_response
from protocol.enforce.context import AuthContext, Policy
from protocol.enforce.table import advertised_versions, handlers
from protocol.session import ProxySession, SessionConfig
from proxy.decisions import DecisionRecorder

TOPIC_ID = uuid.UUID(int=0x1234)


class Directory:
    """Node id -> a fixed proxy port; `generation` as NodeDirectory has it."""

    def __init__(self, port: int = 40000):
        self.port = port
        self.generation = 1

    def learn(self, node_id, host, port):
        pass

    def advertise(self, node_id):
        return ("proxy.example", self.port + node_id)


class IO:
    def __init__(self):
        self.client: list[bytes] = []
        self.upstream: list[bytes] = []
        self.closed = None

    def write_client(self, data):
        self.client.append(bytes(data))

    def write_upstream(self, data):
        self.upstream.append(bytes(data))

    def close(self, reason, kind):
        self.closed = (reason, kind)

    def pause_client_reading(self):
        pass

    def resume_client_reading(self):
        pass


def make(policy: Policy, directory: Directory | None = None) -> tuple[ProxySession, IO]:
    config = SessionConfig(
        handlers=handlers(),
        allowed_versions=advertised_versions(None),
        directory=directory or Directory(),
    )
    io = IO()
    ctx = AuthContext(policy, "User:alice", "127.0.0.1", "PLAINTEXT")
    return ProxySession(config, io, None, ctx), io


def open_policy() -> tuple[Policy, dict]:
    counts: dict = {}
    authorizer = Authorizer(allow_everyone_if_no_acl_found=True)
    authorizer.load(())
    return Policy(authorizer=authorizer, sink=DecisionRecorder(counts, None)), counts


def metadata_request(corr: int, topics: tuple[str, ...] | None) -> bytes:
    named = (
        None
        if topics is None
        else tuple(md_req.MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics)
    )
    body = md_req.MetadataRequest(
        topics=named, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    return encode_request(corr, body)


def metadata_answer(corr: int, topic: str = "orders") -> bytes:
    partition = md_resp.MetadataResponsePartition(
        error_code=ErrorCode.none,
        partition_index=i32(0),
        leader_id=BrokerId(1),
        leader_epoch=i32(0),
        replica_nodes=(BrokerId(1),),
        isr_nodes=(BrokerId(1),),
        offline_replicas=(),
    )
    body = md_resp.MetadataResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)),
        brokers=(
            md_resp.MetadataResponseBroker(
                node_id=BrokerId(1), host="broker-1", port=i32(9092), rack=None
            ),
        ),
        cluster_id="cluster",
        controller_id=BrokerId(1),
        topics=(
            md_resp.MetadataResponseTopic(
                error_code=ErrorCode.none,
                name=TopicName(topic),
                topic_id=TOPIC_ID,
                is_internal=False,
                partitions=(partition,),
                topic_authorized_operations=i32(-2147483648),
            ),
        ),
    )
    return encode_response(corr, body)


def round_trip(session: ProxySession, io: IO, request: bytes, answer: bytes) -> bytes:
    session.client_data(request)
    session.upstream_data(answer)
    assert io.closed is None
    return io.client[-1]


def test_replayed_metadata_answer_is_byte_identical_and_feeds_the_shared_caches():
    policy, _ = open_policy()
    session, io = make(policy)
    first = round_trip(session, io, metadata_request(1, ("orders",)), metadata_answer(1))
    assert len(session.config.answers) == 1
    policy.topic_ids._names.clear()  # the replay must feed the id cache again
    policy.cluster_view.racks = {}
    second = round_trip(session, io, metadata_request(2, ("orders",)), metadata_answer(2))
    assert len(session.config.answers) == 1  # served from the memo
    fresh_session, fresh_io = make(open_policy()[0])
    fresh = round_trip(
        fresh_session, fresh_io, metadata_request(2, ("orders",)), metadata_answer(2)
    )
    assert second == fresh
    assert first[8:] == second[8:] and struct.unpack_from(">i", second, 4)[0] == 2
    assert b"proxy.example" in second and b"broker-1" not in second
    assert policy.topic_ids.name(TOPIC_ID) == "orders"
    assert policy.cluster_view.racks == {1: None}
    assert policy.cluster_view.cluster_id == "cluster"


def test_memo_misses_when_the_directory_changes():
    policy, _ = open_policy()
    directory = Directory(40000)
    session, io = make(policy, directory)
    round_trip(session, io, metadata_request(1, ("orders",)), metadata_answer(1))
    directory.port, directory.generation = 50000, 2
    out = round_trip(session, io, metadata_request(2, ("orders",)), metadata_answer(2))
    assert struct.pack(">i", 50001) in out and struct.pack(">i", 40001) not in out


def test_named_topics_are_decided_per_request_and_all_topics_answers_are_not_remembered():
    policy, counts = open_policy()
    session, io = make(policy)
    for corr in (1, 2, 3):
        round_trip(session, io, metadata_request(corr, ("orders",)), metadata_answer(corr))
    for corr in (4, 5):  # all topics: each topic is decided while rewriting the answer
        round_trip(session, io, metadata_request(corr, None), metadata_answer(corr))
    assert len(session.config.answers) == 1
    assert sum(counts.values()) == 5
