"""Issue 20: a ListOffsets request whose topics are all denied is answered from its bytes,
read in place (protocol/enforce/peek.py `peek_list_offsets`, enforce/offsets.py), not decoded
by kio: at its 1 MiB limit (34,951 topics) the decode and array check cost ~160 ms of the loop.

* The answer is byte for byte the one the decoding path builds entry by entry with kio, for
  every served version, all topics denied or one allowed (then the decoding path runs).
* Whatever the peek accepts kio decodes, to the same names and partitions; whatever it does
  not accept takes the decoding path, which closes what kio cannot parse.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.protocol import codec
from aclgate.protocol.apikeys import ApiKey
from aclgate.protocol.enforce import base, offsets, peek
from aclgate.protocol.enforce.table import TABLE
from aclgate.protocol.header import parse_request_header
from bench.loop_stall import entries_at_limit, list_offsets_frame
from tests.fixtures.rawclient import module, request_entity
from tests.protocol.test_denied_entries_as_bytes import _answers
from tests.protocol.test_request_limits import _session

T1_ALLOWED = AclBinding(ResourceType.TOPIC, "t1", PatternType.LITERAL, "User:ANONYMOUS", "*",
                        AclOperation.ALL, AclPermissionType.ALLOW)  # fmt: skip
POLICIES = {"nothing allowed": [], "one topic allowed": [T1_ALLOWED]}
#: (name, partition indexes): duplicates, an internal topic, a long name, no partitions,
#: partitions shared by several topics and partitions of one topic only
TOPICS = (
    ("t0", (0, 1)),
    ("__consumer_offsets", (0,)),
    ("t1", (0, 1)),
    ("t0", (2,)),
    ("ünïcode-topic", ()),
    ("x" * 200, tuple(range(130))),
)


def _request(version: int, topics: Any = TOPICS, corr: int = 11) -> bytes:
    mod = module(2, version)
    fields: dict[str, Any] = {"current_leader_epoch": 5} if version >= 4 else {}
    entries = tuple(
        mod.ListOffsetsTopic(
            name=name,
            partitions=tuple(
                mod.ListOffsetsPartition(partition_index=p, timestamp=-1 - p, **fields)
                for p in parts
            ),
        )
        for name, parts in topics
    )
    extra: dict[str, Any] = {"isolation_level": 1} if version >= 2 else {}
    if version >= 10:
        from datetime import timedelta

        from kio.static.primitive import i32Timedelta

        extra["timeout"] = i32Timedelta.parse(timedelta(seconds=3))
    return codec.encode_request(
        corr, request_entity(2, version, replica_id=-1, topics=entries, **extra)
    )


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("version", range(1, 12))
def test_peeked_list_offsets_answer_is_the_one_kio_builds(version, policy, monkeypatch):
    """The peeked answer against the decoding path building each denied entry with kio."""
    frame, acls, handler = _request(version), POLICIES[policy], TABLE[ApiKey.LIST_OFFSETS].handler
    assert isinstance(handler, base.PerEntry)
    now, _bytes_path = _answers(frame, acls, monkeypatch, handler)
    with monkeypatch.context() as m:
        m.setattr(offsets, "peek_list_offsets", lambda *_: None)
        _now, entry_by_entry = _answers(frame, acls, m, handler)
    assert now == entry_by_entry and now


def test_denied_list_offsets_at_its_limit_is_answered_without_decoding_it(monkeypatch):
    """Before: the 34,951 topics checked by protocol/arrays.py and decoded by kio (~160 ms of
    the loop in-process) to be answered; now not decoded at all."""
    decoded: list[int] = []

    def spy(frame: Any, header: Any) -> Any:
        decoded.append(header.api_key)
        return codec.decode_request(frame, header)

    monkeypatch.setattr(base, "decode_request", spy)
    monkeypatch.setattr(offsets, "decode_request", spy, raising=False)
    n = entries_at_limit(list_offsets_frame, 2)
    session, io = _session([])
    session.client_data(list_offsets_frame(n))
    assert decoded == []
    assert io.closed is None
    answer = codec.decode_response(bytes(io.client), 2, 9)
    assert len(answer.topics) == n


def _names_and_partitions(request: Any) -> list[tuple[str, tuple[tuple[int, int, int], ...]]]:
    return [
        (
            t.name,
            tuple((p.partition_index, p.current_leader_epoch, p.timestamp) for p in t.partitions),
        )
        for t in request.topics
    ]


def _peeked(found: list[tuple[str, bytes]]) -> list[tuple[str, tuple[tuple[int, int, int], ...]]]:
    mod = module(2, 9)
    return [
        (name, tuple((p.partition_index, p.current_leader_epoch, p.timestamp)
                     for p in offsets._partitions(mod, shape)))
        for name, shape in found
    ]  # fmt: skip


@pytest.mark.parametrize("version", range(6, 12))
def test_what_the_peek_accepts_kio_decodes_alike(version):
    """Cut short at every length, and 3,000 bytes flipped at random: whenever the peek reads
    a request, kio decodes it to the same topics and partitions (a request kio refuses is
    never answered from the peek, it goes the decoding path and is closed there)."""
    whole = _request(version, TOPICS[:5])
    header = parse_request_header(memoryview(whole))
    start = header.body_offset
    rng = random.Random(version)
    cases = [whole[:n] for n in range(start, len(whole))] + [whole]
    for _ in range(3000):
        b = bytearray(whole)
        for _flip in range(rng.randint(1, 3)):
            b[rng.randrange(start, len(b))] = rng.choice(
                (0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256))
            )
        cases.append(bytes(b))
    read = 0
    for case in cases:
        frame = memoryview(case)
        found = peek.peek_list_offsets(frame, header)
        if found is None:
            continue
        read += 1
        assert _peeked(found) == _names_and_partitions(codec.decode_request(frame, header))
    assert read > 1  # the whole request, and some flipped ones


def test_malformed_list_offsets_is_closed_not_answered():
    """A topic array that claims more than the frame holds: closed, as before."""
    whole = bytearray(_request(9, TOPICS[:2]))
    header = parse_request_header(memoryview(bytes(whole)))
    at = header.body_offset + 5
    whole[at] = 0x7F  # 126 topics
    session, io = _session([])
    session.client_data(bytes(whole))
    assert io.closed is not None
    assert not io.client and not io.upstream
