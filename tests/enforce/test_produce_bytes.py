"""Issue 20: a Produce request of several topics is walked, split and answered as bytes
(protocol/enforce/producebytes.py), never decoded with kio. Proved against the decoding path
(data.py `ProduceHandler.handle`, itself checked against Kafka by the equivalence harness):

* for every version, acks 0/1/-1, all allowed, some or all denied, duplicates, several
  partitions, a denied transactional id, topics by id (v13) known and unknown: the same
  decisions, the same bytes to the broker, the same answer (merged with the broker's);
* a request of 55,000 denied topics builds no kio entry per topic and is decided a slice
  per turn.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from aclgate.authz.model import AclBinding, AclOperation, AclPermissionType, PatternType
from aclgate.authz.model import ResourceType as RT
from aclgate.protocol import codec
from aclgate.protocol.codec import encode_request
from aclgate.protocol.effects import LookUpTopicIds
from aclgate.protocol.enforce import data
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.producebytes import walk_produce
from aclgate.protocol.enforce.slices import DECISIONS_PER_TURN
from aclgate.protocol.header import MalformedRequest, parse_request_header
from aclgate.protocol.versions import response_module
from tests.fixtures.rawclient import module, request_entity
from tests.protocol.test_denied_entries_as_bytes import _counting
from tests.protocol.test_slices import _session

VERSIONS = range(3, 14)
_MS = timedelta(seconds=30)
IDS = {name: uuid.UUID(int=i + 1) for i, name in enumerate(("ok", "no", "also", "gone"))}
#: a record batch whose header says transactional (magic 2, attributes bit 4); never parsed
TXN_BATCH = bytes(16) + b"\x02" + bytes(4) + b"\x00\x10" + bytes(40)
PLAIN_BATCH = bytes(16) + b"\x02" + bytes(4) + b"\x00\x00" + bytes(40)


def _allow(rtype: RT, name: str, op: AclOperation = AclOperation.WRITE) -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, "User:ANONYMOUS", "*", op,
                      AclPermissionType.ALLOW)  # fmt: skip


def produce(
    version: int,
    topics: list[tuple[str, list[int]]],
    acks: int = 1,
    txn: str | None = None,
    batch: bytes = PLAIN_BATCH,
) -> bytes:
    mod = module(0, version)
    entries = []
    for name, partitions in topics:
        key: dict[str, Any] = {"topic_id": IDS[name]} if version >= 13 else {"name": name}
        parts = tuple(mod.PartitionProduceData(index=i, records=batch) for i in partitions)
        entries.append(mod.TopicProduceData(**key, partition_data=parts))
    body = request_entity(0, version, transactional_id=txn, acks=acks, timeout=_MS,
                          topic_data=tuple(entries))  # fmt: skip
    return encode_request(5, body, "c")


SCENARIOS: dict[str, dict[str, Any]] = {
    "all allowed": {"topics": [("ok", [0]), ("also", [1, 2])]},
    "all denied": {"topics": [("no", [0, 1]), ("gone", [3]), ("no", [2])]},
    "some denied": {"topics": [("no", [0]), ("ok", [0, 1]), ("gone", [5, 6, 7]), ("also", [0])]},
    "acks=0, some denied": {"topics": [("ok", [0]), ("no", [1])], "acks": 0},
    "acks=0, all denied": {"topics": [("no", [0]), ("gone", [1])], "acks": 0},
    "acks=-1, duplicates": {"topics": [("no", [0]), ("ok", [0]), ("no", [1])], "acks": -1},
    "transactional, id denied": {
        "topics": [("ok", [0]), ("no", [1])], "txn": "t-no", "batch": TXN_BATCH,
    },
    "transactional, no id": {"topics": [("ok", [0]), ("also", [1])], "batch": TXN_BATCH},
    "transactional, id allowed": {
        "topics": [("ok", [0]), ("no", [1])], "txn": "t-ok", "batch": TXN_BATCH,
    },
    "transactional, acks=0, id denied": {
        "topics": [("ok", [0]), ("no", [1])], "txn": "t-no", "batch": TXN_BATCH, "acks": 0,
    },
}  # fmt: skip
ACLS = [_allow(RT.TOPIC, "ok"), _allow(RT.TOPIC, "also"), _allow(RT.TRANSACTIONAL_ID, "t-ok")]


def _not_walked(frame: bytes, header: Any) -> Generator[None, None, None]:
    """A walk that leaves every request to the decoding path."""
    return None
    yield


def _run(frame: bytes, walked: bool, monkeypatch, known_ids: bool = True) -> Any:
    with monkeypatch.context() as patch:
        if not walked:
            patch.setattr(data, "walking", _not_walked)
        session, io, sink = _session(ACLS, auto_turns=True)
        if known_ids:
            for name, topic_id in IDS.items():
                if name != "gone":
                    session.context.policy.topic_ids.learn(topic_id, name)
        session.client_data(frame)
        for token, effect in list(io.effects):
            if isinstance(effect, LookUpTopicIds):
                session.resume(
                    token, {i: n for n, i in IDS.items() if i in effect.ids and n != "gone"}
                )
        sent = bytes(io.upstream)
        if sent:  # the broker answers the topics it was sent
            session.upstream_data(_broker_answer(sent))
    decisions = [(r.resource_type, r.resource_name, r.outcome.allowed, r.ref_count)
                 for r in sink.records]  # fmt: skip
    return sent, bytes(io.client), io.closed, decisions


def _broker_answer(sent: bytes) -> bytes:
    header = parse_request_header(sent)
    request = codec.decode_request(sent, header)
    if request.acks == 0:
        return b""
    mod = response_module(0, header.api_version)
    aliases = {"responses": "topic_data", "partition_responses": "partition_data"}
    responses = [
        build(mod.TopicProduceResponse, ErrorCode.none, t, aliases) for t in request.topic_data
    ]
    body = response_module(0, header.api_version).ProduceResponse(responses=tuple(responses))
    return codec.encode_response(header.correlation_id, body)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_walked_request_is_decided_and_answered_as_the_decoded_one(
    version, scenario, monkeypatch
) -> None:
    frame = produce(version, **SCENARIOS[scenario])
    assert walk_produce(frame, parse_request_header(frame)) is not None
    decoded: list[int] = []
    real = data.decode_request
    with monkeypatch.context() as patch:
        patch.setattr(data, "decode_request", lambda *a: decoded.append(1) or real(*a))
        walked = _run(frame, True, monkeypatch)
    assert decoded == []  # never decoded
    assert walked == _run(frame, False, monkeypatch)
    assert walked[0] or walked[1] or walked[2]  # it did something


@pytest.mark.parametrize("scenario", ["some denied", "all denied"])
def test_unknown_topic_ids_are_looked_up_then_answered_as_unknown(scenario, monkeypatch) -> None:
    frame = produce(13, **SCENARIOS[scenario])
    walked = _run(frame, True, monkeypatch, known_ids=False)
    assert walked == _run(frame, False, monkeypatch, known_ids=False)
    assert ErrorCode.unknown_topic_id.value.to_bytes(2, "big") in walked[1]


def test_what_kio_refuses_the_walk_closes_as_malformed_at_once(monkeypatch) -> None:
    """A tagged field (Produce defines none) or a request cut short: kio refuses it, and so
    does the walk, as it finds it (before: decoded whole to find the same, 125 ms for a
    1 MiB request, and Produce has no size limit of its own)."""
    frame = produce(9, [("ok", [0]), ("no", [1])])
    header = parse_request_header(frame)
    assert walk_produce(frame, header) is not None
    tagged = frame[:-1] + b"\x01\x07\x00"  # a tagged field on the request
    with pytest.raises(MalformedRequest, match="tagged field"):
        walk_produce(tagged, header)
    with pytest.raises(MalformedRequest):
        walk_produce(frame[:-20], header)
    for walked in (True, False):  # both paths close it as malformed
        _sent, answer, closed, _decisions = _run(tagged, walked, monkeypatch)
        assert answer == b"" and closed is not None and closed[1] == "malformed_request"


def test_a_request_of_55_000_denied_topics_builds_no_entry_per_topic(monkeypatch) -> None:
    """Before: decoded whole, then one kio TopicProduceResponse built and encoded per denied
    topic: ~1.5 s of the event loop (bench/loop_stall.py produce_many_topics)."""
    from bench.loop_stall import PRODUCE_TOPICS, produce_frame

    frame = produce_frame(PRODUCE_TOPICS)
    built = _counting(monkeypatch, response_module(0, 9).TopicProduceResponse)
    session, io, sink = _session([], auto_turns=False)
    session.client_data(frame)
    made = [len(sink.records)]
    while io.turns:
        session.resume(io.turns.pop(0))
        made.append(len(sink.records) - sum(made))
    assert max(made) == DECISIONS_PER_TURN  # a slice per turn
    assert len(sink.records) == PRODUCE_TOPICS
    answer = codec.decode_response(bytes(io.client), 0, 9)
    assert len(answer.responses) == PRODUCE_TOPICS
    assert answer.responses[-1].name == f"d{PRODUCE_TOPICS - 1:09d}"
    assert {r.partition_responses[0].error_code for r in answer.responses} == {
        ErrorCode.topic_authorization_failed
    }
    assert built[0] <= 2  # the templates, not one per topic


def test_a_zero_topic_id_is_answered_unknown_as_kafka_does(monkeypatch) -> None:
    """Kafka (KafkaApis.handleProduceRequest): a v13 topic whose id is ZERO has the empty
    name, so UNKNOWN_TOPIC_ID. Before: NeedTopicIds, the connection closed as an internal
    error, on both paths."""
    monkeypatch.setitem(IDS, "zero", uuid.UUID(int=0))
    frame = produce(13, [("zero", [0]), ("ok", [0])])
    walked = _run(frame, True, monkeypatch)
    assert walked == _run(frame, False, monkeypatch)
    assert walked[2] is None  # not closed
    answer = codec.decode_response(walked[1], 0, 13)
    codes = {r.topic_id.int if r.topic_id else 0: r.partition_responses[0].error_code
             for r in answer.responses}  # fmt: skip
    assert codes[0] == ErrorCode.unknown_topic_id
