"""The hot-path shortcuts change no answer, no decision count and no audit line.

Sans-IO: a ProxySession with the real API table, a recording IO and the proxy's own decision
recorder, fed hand-built requests and broker answers.
"""

from __future__ import annotations

import json
import struct
import uuid
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclBinding
from aclgate.protocol.codec import decode_request, encode_response
from aclgate.protocol.enforce.context import AuthContext, Policy
from aclgate.protocol.enforce.data import has_transactional_records
from aclgate.protocol.enforce.peek import peek_metadata, peek_produce
from aclgate.protocol.enforce.table import advertised_versions, handlers
from aclgate.protocol.header import parse_request_header
from aclgate.protocol.session import ProxySession, SessionConfig
from aclgate.protocol.versions import request_class, request_module, response_class
from aclgate.proxy.audit.decisions import DecisionRecorder
from aclgate.proxy.audit.log import AuditLog
from bench.latency import encode_request
from tests.protocol.test_session import split_frames

TOPIC_ID = uuid.UUID(int=0x1234)
ALLOW_ORDERS = {
    "resource_type": "TOPIC",
    "resource_name": "orders",
    "pattern_type": "LITERAL",
    "principal": "User:alice",
    "host": "*",
    "operation": "WRITE",
    "permission_type": "ALLOW",
}


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

    def perform(self, token, effect):
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
    policy.topic_ids.clear()  # the replay must feed the id cache again
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


# ------------------------------------------------------------------------ Produce peek


def _records(kind: int, payload: bytes) -> bytes | None:
    """None, opaque bytes, or a batch header (magic 2) with or without the transactional bit."""
    if kind == 0:
        return None
    if kind == 1:
        return payload
    batch = bytearray(payload.ljust(30, b"\0"))
    batch[16] = 2
    batch[22] = 0x10 if kind == 3 else 0
    return bytes(batch)


_names = st.text(st.characters(codec="utf-8"), min_size=0, max_size=140)
_partitions = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(0, 3), st.binary(max_size=300)),
    min_size=0,
    max_size=3,
)


@settings(max_examples=400, deadline=None)
@given(
    version=st.integers(3, 12),
    txn=st.one_of(st.none(), st.text(max_size=150)),
    acks=st.sampled_from([-1, 0, 1]),
    topics=st.lists(st.tuples(_names, _partitions), min_size=0, max_size=2),
    cut=st.one_of(st.none(), st.integers(1, 400)),
)
def test_produce_peek_reads_what_kio_reads_or_declines(version, txn, acks, topics, cut):
    mod = request_module(0, version)
    body = request_class(0, version)(
        transactional_id=txn,
        acks=i16(acks),
        timeout=i32Timedelta.parse(timedelta(seconds=1)),
        topic_data=tuple(
            mod.TopicProduceData(
                name=TopicName(name),
                partition_data=tuple(
                    mod.PartitionProduceData(index=i32(index), records=_records(kind, raw))
                    for index, kind, raw in partitions
                ),
            )
            for name, partitions in topics
        ),
    )
    frame = encode_request(7, body)
    if cut is not None and cut < len(frame) - 20:  # truncated: the size prefix still agrees
        frame = struct.pack(">i", len(frame) - 4 - cut) + frame[4:-cut]
    header = parse_request_header(frame)
    peeked = peek_produce(frame, header)
    if peeked is None:
        return
    request = decode_request(frame, header)  # must not raise: the peek accepted it
    assert len(request.topic_data) == 1 and not has_transactional_records(request.topic_data)
    topic = request.topic_data[0]
    assert peeked == (request.acks, topic.name, len(topic.partition_data))


def test_produce_peek_declines_transactional_and_multi_topic_requests():
    mod = request_module(0, 9)

    def frame(topics, records):
        body = request_class(0, 9)(
            transactional_id="tx",
            acks=i16(1),
            timeout=i32Timedelta.parse(timedelta(seconds=1)),
            topic_data=tuple(
                mod.TopicProduceData(
                    name=TopicName(t),
                    partition_data=(mod.PartitionProduceData(index=i32(0), records=records),),
                )
                for t in topics
            ),
        )
        return encode_request(1, body)

    plain = frame(["a"], _records(2, b"x" * 40))
    assert peek_produce(plain, parse_request_header(plain)) == (1, "a", 1)
    for declined in (frame(["a"], _records(3, b"x" * 40)), frame(["a", "b"], None)):
        assert peek_produce(declined, parse_request_header(declined)) is None


def produce_request(corr: int, topic: str, acks: int) -> bytes:
    mod = request_module(0, 9)
    batch = _records(2, b"v" * 60)
    body = request_class(0, 9)(
        transactional_id=None,
        acks=i16(acks),
        timeout=i32Timedelta.parse(timedelta(seconds=1)),
        topic_data=(
            mod.TopicProduceData(
                name=TopicName(topic),
                partition_data=tuple(
                    mod.PartitionProduceData(index=i32(i), records=batch) for i in range(2)
                ),
            ),
        ),
    )
    return encode_request(corr, body)


def _outcome(tmp_path, monkeypatch, peek_at: str, peek: bool, mode: str, acl: dict, feed):
    """Bytes out, decision counts and audit events of what `feed(session)` sends, under
    `acl`, with the peek function `peek_at` in use or switched off."""
    if not peek:
        monkeypatch.setattr(peek_at, lambda frame, header: None)
    authorizer = Authorizer()
    authorizer.load([AclBinding.from_dict(acl)])
    audit = AuditLog(tmp_path / f"audit-{peek}.jsonl", "proxy", clock=lambda: 1000.0)
    counts: dict = {}
    policy = Policy(authorizer=authorizer, mode=mode, sink=DecisionRecorder(counts, audit))
    session, io = make(policy)
    feed(session)
    audit.close()
    events = [json.loads(line) for line in audit.path.read_text().splitlines()]
    monkeypatch.undo()
    return io.client, io.upstream, io.closed, counts, events


def _produce_outcome(tmp_path, monkeypatch, peek: bool, mode: str, acks: int):
    """Three Produce requests: orders, secret (denied), orders."""

    def feed(session):
        for corr, topic in ((1, "orders"), (2, "secret"), (3, "orders")):
            if not session.closed and not session.closing:
                session.client_data(produce_request(corr, topic, acks))

    return _outcome(
        tmp_path,
        monkeypatch,
        "aclgate.protocol.enforce.data.peek_produce",
        peek,
        mode,
        ALLOW_ORDERS,
        feed,
    )


@pytest.mark.parametrize(("mode", "acks"), [("enforce", 1), ("enforce", 0), ("dry-run", 1)])
def test_produce_fast_path_answers_counts_and_audits_as_the_full_path(
    tmp_path, monkeypatch, mode, acks
):
    fast = _produce_outcome(tmp_path, monkeypatch, True, mode, acks)
    full = _produce_outcome(tmp_path, monkeypatch, False, mode, acks)
    assert fast == full
    _client, upstream, closed, counts, events = fast
    allowed = 1 if acks == 0 else 2  # acks=0: the denial closes before the third request
    assert [(e["decision"], e["enforced"], e["count"]) for e in events] == [
        ("DENIED", mode == "enforce", 1),
        ("ALLOWED", True, allowed),
    ]
    assert sum(counts.values()) == allowed + 1
    assert len(upstream) == (3 if mode == "dry-run" else allowed)
    assert (closed is not None) == (acks == 0)


# ----------------------------------------------------------------------- Metadata peek


@settings(max_examples=400, deadline=None)
@given(
    version=st.integers(9, 13),
    topics=st.one_of(
        st.none(),
        st.lists(
            st.tuples(st.one_of(_names, st.none()), st.sampled_from([None, TOPIC_ID])),
            max_size=3,
        ),
    ),
    flags=st.one_of(
        st.just((False, False, False)), st.tuples(st.booleans(), st.booleans(), st.booleans())
    ),
    cut=st.one_of(st.none(), st.none(), st.integers(1, 60)),
)
def test_metadata_peek_reads_what_kio_reads_or_declines(version, topics, flags, cut):
    mod = request_module(3, version)
    entries = None
    if topics is not None:
        entries = tuple(
            mod.MetadataRequestTopic(name=name, topic_id=topic_id or uuid.UUID(int=0))
            if version >= 10
            else mod.MetadataRequestTopic(name=name or "t")
            for name, topic_id in topics
        )
    fields = {"topics": entries, "allow_auto_topic_creation": flags[0]}
    fields["include_topic_authorized_operations"] = flags[1]
    if version <= 10:
        fields["include_cluster_authorized_operations"] = flags[2]
    frame = encode_request(5, request_class(3, version)(**fields))
    if cut is not None and cut < len(frame) - 20:
        frame = struct.pack(">i", len(frame) - 4 - cut) + frame[4:-cut]
    header = parse_request_header(frame)
    peeked = peek_metadata(frame, header)
    if peeked is None:
        return
    request = decode_request(frame, header)  # must not raise: the peek accepted it
    assert peeked == tuple(t.name for t in request.topics)
    assert not request.allow_auto_topic_creation and not request.include_topic_authorized_operations
    assert not getattr(request, "include_cluster_authorized_operations", False)


ALLOW_DESCRIBE = {**ALLOW_ORDERS, "operation": "DESCRIBE"}


def _metadata_outcome(tmp_path, monkeypatch, peek: bool, mode: str, topics):
    """Two Metadata requests for `topics`, answered by the broker when forwarded."""

    def feed(session):
        for corr in (1, 2):
            session.client_data(metadata_request(corr, topics))
            if session._awaiting:
                session.upstream_data(metadata_answer(corr))

    return _outcome(
        tmp_path,
        monkeypatch,
        "aclgate.protocol.enforce.metadata.peek_metadata",
        peek,
        mode,
        ALLOW_DESCRIBE,
        feed,
    )


@pytest.mark.parametrize("mode", ["enforce", "dry-run"])
@pytest.mark.parametrize(
    "topics", [("orders",), ("secret",), ("orders", "secret", "orders"), ("secret", "secret")]
)
def test_metadata_fast_path_answers_counts_and_audits_as_the_full_path(
    tmp_path, monkeypatch, mode, topics
):
    fast = _metadata_outcome(tmp_path, monkeypatch, True, mode, topics)
    full = _metadata_outcome(tmp_path, monkeypatch, False, mode, topics)
    assert fast == full
    _client, _upstream, closed, counts, events = fast
    assert closed is None and sum(counts.values()) == 2 * len(set(topics))
    assert sum(e["count"] for e in events) == 2 * len(set(topics))


def test_acks0_with_a_denied_topic_closes_once_the_allowed_part_is_in_the_log():
    """Kafka appends the allowed part of an acks=0 Produce with a denied topic, then closes:
    what the client sends after it sees the close comes later in the log. aclgate sends the
    allowed part with acks=1 and closes only on the broker's answer (never relayed): closed at
    once, a client's next connection could overtake it (the equivalence harness saw it)."""
    authorizer = Authorizer()
    authorizer.load([AclBinding.from_dict(ALLOW_ORDERS)])
    session, io = make(Policy(authorizer=authorizer))
    two = request_class(0, 9)(
        transactional_id=None,
        acks=i16(0),
        timeout=i32Timedelta.parse(timedelta(seconds=1)),
        topic_data=tuple(
            request_module(0, 9).TopicProduceData(
                name=TopicName(t),
                partition_data=(
                    request_module(0, 9).PartitionProduceData(
                        index=i32(0), records=_records(1, b"v")
                    ),
                ),
            )
            for t in ("orders", "secret")
        ),
    )
    session.client_data(encode_request(5, two))
    (sent,) = [
        decode_request(f, parse_request_header(f)) for f in split_frames(b"".join(io.upstream))
    ]
    assert [t.name for t in sent.topic_data] == ["orders"] and sent.acks == 1
    assert io.closed is None, "closed before the broker has the allowed part"
    answer = response_class(0, 9)(responses=(), throttle_time=i32Timedelta.parse(timedelta(0)))
    session.upstream_data(encode_response(5, answer))
    assert io.closed is not None and b"".join(io.client) == b""
