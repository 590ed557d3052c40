"""Produce v13 (topics named by id, what current Java producers send) on the peeked hot path:
the peek reads what kio reads or declines, and a peeked request is answered, counted and
audited as the full path does it (tests/enforce/test_hotpath.py does the same for v3-12)."""

from __future__ import annotations

import json
import struct
import uuid
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.static.primitive import i16, i32, i32Timedelta

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclBinding
from aclgate.protocol.codec import decode_request
from aclgate.protocol.enforce.context import Policy
from aclgate.protocol.enforce.data import has_transactional_records
from aclgate.protocol.enforce.peek import peek_produce
from aclgate.protocol.header import parse_request_header
from aclgate.protocol.versions import request_class, request_module
from aclgate.proxy.audit.decisions import DecisionRecorder
from aclgate.proxy.audit.log import AuditLog
from bench.latency import encode_request
from tests.enforce.test_hotpath import ALLOW_ORDERS, TOPIC_ID, _partitions, _records, make

SECRET_ID = uuid.UUID(int=0x5EC)


def produce_v13(corr: int, topics, acks: int = 1, txn: str | None = None) -> bytes:
    mod = request_module(0, 13)
    body = request_class(0, 13)(
        transactional_id=txn,
        acks=i16(acks),
        timeout=i32Timedelta.parse(timedelta(seconds=1)),
        topic_data=tuple(
            mod.TopicProduceData(
                topic_id=topic_id,
                partition_data=tuple(
                    mod.PartitionProduceData(index=i32(index), records=_records(kind, raw))
                    for index, kind, raw in partitions
                ),
            )
            for topic_id, partitions in topics
        ),
    )
    return encode_request(corr, body)


@settings(max_examples=300, deadline=None)
@given(
    txn=st.one_of(st.none(), st.text(max_size=150)),
    acks=st.sampled_from([-1, 0, 1]),
    topics=st.lists(st.tuples(st.uuids(), _partitions), min_size=0, max_size=2),
    cut=st.one_of(st.none(), st.integers(1, 400)),
)
def test_v13_peek_reads_what_kio_reads_or_declines(txn, acks, topics, cut):
    frame = produce_v13(7, topics, acks, txn)
    if cut is not None and cut < len(frame) - 20:
        frame = struct.pack(">i", len(frame) - 4 - cut) + frame[4:-cut]
    header = parse_request_header(frame)
    peeked = peek_produce(frame, header)
    if peeked is None:
        return
    request = decode_request(frame, header)  # must not raise: the peek accepted it
    assert len(request.topic_data) == 1 and not has_transactional_records(request.topic_data)
    topic = request.topic_data[0]
    assert peeked == (request.acks, topic.topic_id, len(topic.partition_data))


def _outcome(tmp_path, monkeypatch, peek: bool, acks: int, known: bool):
    if not peek:
        monkeypatch.setattr("aclgate.protocol.enforce.data.peek_produce", lambda f, h: None)
    authorizer = Authorizer()
    authorizer.load([AclBinding.from_dict(ALLOW_ORDERS)])
    audit = AuditLog(tmp_path / f"audit-{peek}.jsonl", "proxy", clock=lambda: 1000.0)
    counts: dict = {}
    policy = Policy(authorizer=authorizer, sink=DecisionRecorder(counts, audit))
    if known:
        policy.topic_ids.learn(TOPIC_ID, "orders")
        policy.topic_ids.learn(SECRET_ID, "secret")
    session, io = make(policy)
    one = [(0, 0, b"x" * 40)]
    for corr, topic_id in ((1, TOPIC_ID), (2, SECRET_ID), (3, TOPIC_ID)):
        if not session.closed and not session.closing:
            session.client_data(produce_v13(corr, [(topic_id, one)], acks))
    audit.close()
    events = [json.loads(line) for line in audit.path.read_text().splitlines()]
    monkeypatch.undo()
    return io.client, io.upstream, io.closed, counts, events


@pytest.mark.parametrize("acks", [1, 0])
def test_v13_fast_path_answers_counts_and_audits_as_the_full_path(tmp_path, monkeypatch, acks):
    fast = _outcome(tmp_path, monkeypatch, True, acks, known=True)
    full = _outcome(tmp_path, monkeypatch, False, acks, known=True)
    assert fast == full
    _client, upstream, closed, _counts, events = fast
    allowed = 1 if acks == 0 else 2
    assert [(e["decision"], e["count"]) for e in events] == [("DENIED", 1), ("ALLOWED", allowed)]
    assert len(upstream) == allowed and (closed is not None) == (acks == 0)


def test_v13_with_an_unknown_id_takes_the_full_path(tmp_path, monkeypatch):
    """The peek cannot name the topic: the full path looks the id up (nothing forwarded)."""
    _client, upstream, closed, counts, _events = _outcome(
        tmp_path, monkeypatch, True, 1, known=False
    )
    assert upstream == [] and closed is None and counts == {}
