"""The offset walk of Produce v10+ / Fetch v16+ answers against kio's full decode, and the
streamed relay of such answers through the session (docs/design.md, "Hot path")."""

import dataclasses
import itertools
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from aclgate.protocol import answerwalk
from aclgate.protocol.addresses import (
    PAD_TAG,
    rewrite_node_endpoints,
    tagged_entries,
    tagged_section,
)
from aclgate.protocol.answerwalk import SCHEMAS, AnswerWalk, tail_offset
from aclgate.protocol.codec import (
    DECODE_ERRORS,
    MalformedResponse,
    decode_response,
    encode_request,
    encode_response,
)
from aclgate.protocol.routing import allowed_versions, transparent_handlers
from aclgate.protocol.session import ProxySession, SessionConfig
from aclgate.protocol.versions import request_class, response_class
from tests.fixtures.scripted_broker import _defaults, _mod
from tests.protocol.test_apiversions_addresses import Directory
from tests.protocol.test_session import FakeIO, anonymous_context, correlation_ids

VERSIONS = sorted(SCHEMAS)
I32 = st.integers(-(2**31), 2**31 - 1).map(i32)
I64 = st.integers(-(2**63), 2**63 - 1).map(i64)
ERRORS = st.sampled_from(
    [ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch]
)
#: record sets around the one- and two-byte length varint boundaries
RECORDS = st.one_of(st.none(), st.binary(max_size=200), st.integers(120, 140).map(bytes))
TEXT = st.text(max_size=20)


def _maybe(m, name, draw, **fields):
    """A nested tagged struct: its default (not sent) or random values."""
    cls = getattr(m, name)
    if draw(st.booleans()):
        return _defaults(cls)
    return _defaults(cls, **{k: draw(v) for k, v in fields.items()})


@st.composite
def fetch_partition(draw, m):
    return _defaults(
        m.PartitionData,
        partition_index=draw(I32),
        error_code=draw(ERRORS),
        high_watermark=draw(I64),
        last_stable_offset=draw(I64),
        log_start_offset=draw(I64),
        aborted_transactions=draw(
            st.one_of(
                st.none(),
                st.lists(
                    st.builds(
                        lambda p, o: _defaults(m.AbortedTransaction, producer_id=p, first_offset=o),
                        I64,
                        I64,
                    ),
                    max_size=3,
                ).map(tuple),
            )
        ),
        preferred_read_replica=draw(I32),
        records=draw(RECORDS),
        diverging_epoch=_maybe(m, "EpochEndOffset", draw, epoch=I32, end_offset=I64),
        current_leader=_maybe(m, "LeaderIdAndEpoch", draw, leader_id=I32, leader_epoch=I32),
        snapshot_id=_maybe(m, "SnapshotId", draw, end_offset=I64, epoch=I32),
    )


@st.composite
def produce_partition(draw, m):
    errors = st.builds(
        lambda i, msg: _defaults(
            m.BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=msg
        ),
        I32,
        st.one_of(st.none(), TEXT),
    )
    return _defaults(
        m.PartitionProduceResponse,
        index=draw(I32),
        error_code=draw(ERRORS),
        base_offset=draw(I64),
        log_start_offset=draw(I64),
        record_errors=tuple(draw(st.lists(errors, max_size=3))),
        error_message=draw(st.one_of(st.none(), TEXT)),
        current_leader=_maybe(m, "LeaderIdAndEpoch", draw, leader_id=I32, leader_epoch=I32),
    )


@st.composite
def endpoints(draw, m):
    node = st.builds(
        lambda n, h, p, r: _defaults(m.NodeEndpoint, node_id=n, host=h, port=p, rack=r),
        st.integers(0, 5).map(i32),
        st.text(min_size=1, max_size=30),
        st.integers(1, 65535).map(i32),
        st.one_of(st.none(), TEXT),
    )
    return tuple(draw(st.lists(node, max_size=4)))


@st.composite
def answers(draw):
    """(api_key, version, body) for a random Produce v10-13 or Fetch v16-18 answer."""
    key, version = draw(st.sampled_from(VERSIONS))
    m = _mod(key, version)
    cls = response_class(key, version)
    if key == 1:
        topics = st.builds(
            lambda parts: _defaults(
                m.FetchableTopicResponse, topic_id=uuid.uuid4(), partitions=parts
            ),
            st.lists(fetch_partition(m), max_size=3).map(tuple),
        )
        body = _defaults(
            cls,
            session_id=draw(I32),
            responses=tuple(draw(st.lists(topics, max_size=3))),
            node_endpoints=draw(endpoints(m)),
        )
    else:
        key_field = {"topic_id": uuid.uuid4()} if version >= 13 else {"name": "t"}
        topics = st.builds(
            lambda parts, name: _defaults(
                m.TopicProduceResponse,
                partition_responses=parts,
                **({"name": name} if version < 13 else key_field),
            ),
            st.lists(produce_partition(m), max_size=3).map(tuple),
            st.text(max_size=20),
        )
        body = _defaults(
            cls,
            responses=tuple(draw(st.lists(topics, max_size=3))),
            node_endpoints=draw(endpoints(m)),
        )
    return key, version, body


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=300, deadline=None)
@given(answers(), st.lists(st.integers(0, 10_000), max_size=8))
def test_the_walk_finds_the_tagged_fields_where_kio_writes_them(answer, cuts):
    key, version, body = answer
    frame = encode_response(7, body)
    without = encode_response(7, dataclasses.replace(body, node_endpoints=()))
    start = len(without) - 1  # everything before the tagged fields is the same bytes
    assert frame[4:start] == without[4:start]
    assert tail_offset(SCHEMAS[key, version], frame) == start
    # both whole-answer walks, whichever this build runs: the generated Python (pure) and the
    # flat program (mypyc-compiled)
    program = answerwalk._program(SCHEMAS[key, version])
    assert answerwalk._run_program(program, 0, len(program), frame, 8) == start
    assert answerwalk._compile(SCHEMAS[key, version])(frame, 8) == start
    walk = AnswerWalk(SCHEMAS[key, version], len(frame) - 8)
    relayed = bytearray()
    for piece in chunked(frame[8:], cuts):
        relayed += piece[: walk.feed(memoryview(piece))]
    assert 8 + len(relayed) == start and bytes(walk.finish()) == frame[start:]
    d = Directory({0: 19000, 2: 19002}, host="p")
    out = decode_response(rewrite_node_endpoints(frame, key, version, d), key, version)
    assert out == dataclasses.replace(
        body,
        node_endpoints=tuple(
            dataclasses.replace(e, host="p", port=i32(19000 + e.node_id))
            for e in body.node_endpoints
            if e.node_id in (0, 2)
        ),
    )


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_truncated_or_overlong_answers_are_malformed(key, version):
    body = _defaults(response_class(key, version))
    frame = encode_response(1, body)
    for bad in (frame[:-1], frame + b"\x00"):
        bad = struct.pack(">i", len(bad) - 4) + bad[4:]
        with pytest.raises(MalformedResponse):
            rewrite_node_endpoints(bad, key, version, Directory({}))


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_both_whole_answer_walks_agree_on_every_cut(key, version):
    """The flat program (the compiled build's walk) ends, or fails, where the generated
    Python (the pure build's) does, on an answer cut at every byte."""
    m = _mod(key, version)
    if key == 1:
        topic = _defaults(m.FetchableTopicResponse, partitions=(_defaults(m.PartitionData),))
    else:
        topic = _defaults(
            m.TopicProduceResponse, partition_responses=(_defaults(m.PartitionProduceResponse),)
        )
    frame = encode_response(1, _defaults(response_class(key, version), responses=(topic,)))
    ops = SCHEMAS[key, version]
    program = answerwalk._program(ops)
    generated = answerwalk._compile(ops)
    for cut in range(8, len(frame) + 1):
        outcomes = []
        for walk in (
            generated,
            lambda b, p: answerwalk._run_program(program, 0, len(program), b, p),
        ):
            try:
                outcomes.append(walk(frame[:cut], 8))
            except DECODE_ERRORS:  # kio's BufferUnderflow or an IndexError: both malformed
                outcomes.append("malformed")
        assert outcomes[0] == outcomes[1], (cut, outcomes)


# ------------------------------------------------------------------ through the session


def fetch_request(corr: int, version: int = 17) -> bytes:
    return encode_request(corr, _defaults(request_class(1, version)))


def fetch_answer(corr, records, eps, version=17) -> bytes:
    m = _mod(1, version)
    partition = _defaults(m.PartitionData, records=records)
    topic = _defaults(m.FetchableTopicResponse, topic_id=uuid.uuid4(), partitions=(partition,))
    return encode_response(
        corr, _defaults(response_class(1, version), responses=(topic,), node_endpoints=eps)
    )


def session(directory):
    allowed = allowed_versions()
    cfg = SessionConfig(
        handlers=transparent_handlers(allowed), allowed_versions=allowed, directory=directory
    )
    io = FakeIO()
    return ProxySession(cfg, io, context=anonymous_context()), io


def nodes(*specs):
    m = _mod(1, 17)
    return tuple(
        _defaults(m.NodeEndpoint, node_id=i32(n), host=h, port=i32(9092), rack=None)
        for n, h in specs
    )


def test_a_big_fetch_answer_is_relayed_as_it_streams_in():
    s, io = session(Directory({1: 19001}))
    s.client_data(fetch_request(5))
    answer = fetch_answer(5, b"r" * 300_000, ())
    s.upstream_data(answer[:100_000])
    assert len(io.client) == 100_000  # relayed at once, nothing kept back yet
    s.upstream_data(answer[100_000:-1])
    s.upstream_data(answer[-1:])
    assert bytes(io.client) == answer and io.closed is None


@pytest.mark.parametrize(
    ("host", "kept"),
    [("longer-than-the-proxy-host.example", 2), ("10.0.0.1", 1), ("h", 1), ("", 0)],
)
def test_streamed_endpoints_are_rewritten_in_place_at_the_same_length(host, kept):
    """The answer's size has gone out first: the endpoints keep the tail's length, padded
    with a tag clients skip, or dropped (never relayed real) when the proxy's are longer."""
    d = Directory({1: 19001, 2: 19002}, host="proxy.example")
    s, io = session(d)
    s.client_data(fetch_request(5))
    answer = fetch_answer(5, b"r" * 50_000, nodes((1, host), (2, host)))
    for at in range(0, len(answer), 7_000):
        s.upstream_data(answer[at : at + 7_000])
    assert io.closed is None and correlation_ids(bytes(io.client)) == [5]
    relayed = bytes(io.client)
    assert len(relayed) == len(answer)
    start = tail_offset(SCHEMAS[1, 17], relayed)
    assert relayed[:start] == answer[:start]  # only the tagged fields differ
    entries = dict(tagged_entries(relayed[start:]))
    assert set(entries) <= {0, PAD_TAG}  # kio (unlike Kafka's clients) rejects unknown tags:
    assert set(entries.get(PAD_TAG, b"")) <= {0}  # so the test reads tag 0 alone
    rest = relayed[4:start] + tagged_section([(0, entries[0])])
    out = decode_response(struct.pack(">i", len(rest)) + rest, 1, 17)
    assert out.responses[0].partitions[0].records == b"r" * 50_000
    assert [(e.node_id, e.host, e.port) for e in out.node_endpoints] == [
        (n, "proxy.example", 19000 + n) for n in (1, 2)[:kept]
    ]
    # the real host is nowhere in the tagged fields (the body before them is the broker's
    # own, and a random topic id there may hold the bytes of a one-letter host)
    assert not host or host.encode() not in relayed[start:]


def test_a_whole_answer_is_rewritten_to_its_new_length():
    d = Directory({1: 19001}, host="proxy.example")
    s, io = session(d)
    s.client_data(fetch_request(5))
    s.upstream_data(fetch_answer(5, b"r" * 10, nodes((1, "h"))))
    out = decode_response(bytes(io.client), 1, 17)
    assert [(e.host, e.port) for e in out.node_endpoints] == [("proxy.example", 19001)]


def test_a_streamed_answer_that_ends_inside_its_structure_closes():
    s, io = session(Directory({}))
    s.client_data(fetch_request(5))
    answer = bytearray(fetch_answer(5, b"r" * 20_000, ()))
    struct.pack_into(">i", answer, 0, len(answer) - 4 - 2)  # the size cuts the tail off
    s.upstream_data(bytes(answer[:10_000]))
    s.upstream_data(bytes(answer[10_000:-2]))
    assert io.closed is not None and io.closed[1] == "bad_upstream_response"
