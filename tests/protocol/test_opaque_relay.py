"""What the session lets the IO layer relay without reading (`opaque_ahead` /
`relayed_opaque`, used by proxy/listen/splice.py): exactly the record sets of a Fetch answer
it walks, or all of an answer it relays untouched, and never bytes something must precede."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aclgate.protocol.answerwalk import SCHEMAS, AnswerWalk
from aclgate.protocol.codec import encode_response
from tests.protocol.test_answerwalk import (
    Directory,
    answers,
    chunked,
    fetch_answer,
    fetch_request,
    nodes,
    session,
)


def _opaque_walk(walk: AnswerWalk, data: bytes, cuts: list[int]) -> tuple[bytes, int]:
    """Feed `data` in pieces, skipping whatever the walk says is opaque instead of feeding
    it: (the bytes fed and relayed, the bytes skipped)."""
    relayed, skipped = bytearray(), 0
    for piece in chunked(data, cuts):
        at = 0
        while at < len(piece):
            opaque = walk.opaque()
            if opaque:
                n = min(opaque, len(piece) - at)
                walk.skip(n)
                skipped += n
                at += n
                continue
            # feed up to the next byte the walk would skip (one byte at a time is enough to
            # see every opaque span begin)
            fed = walk.feed(memoryview(piece[at : at + 1]))
            relayed += piece[at : at + fed]
            at += 1
    return bytes(relayed), skipped


@settings(max_examples=200, deadline=None)
@given(answers(), st.lists(st.integers(0, 10_000), max_size=6))
def test_skipping_what_the_walk_calls_opaque_finds_the_same_tail(answer, cuts):
    """Skipped instead of fed, the opaque spans leave the walk where feeding them would:
    the same tagged fields at the end, and every byte either relayed or skipped once."""
    key, version, body = answer
    frame = encode_response(7, body)
    walk = AnswerWalk(SCHEMAS[key, version], len(frame) - 8)
    relayed, skipped = _opaque_walk(walk, frame[8:], cuts)
    tail = bytes(walk.finish())
    assert 8 + len(relayed) + skipped + len(tail) == len(frame)
    assert tail == frame[len(frame) - len(tail) :]


def test_a_walk_refuses_to_skip_what_it_would_read():
    walk = AnswerWalk(SCHEMAS[1, 17], 100)
    assert walk.opaque() == 0  # the header's tagged fields come first
    with pytest.raises(ValueError):
        walk.skip(1)


def test_the_session_offers_exactly_the_record_set_of_a_walked_answer():
    """Fetch v17: the answer is walked for its KIP-951 tagged fields, so only its record
    set is opaque; what the IO layer relays itself is reported and the rest fed as usual,
    and the client gets the broker's answer byte for byte (node endpoints rewritten)."""
    s, io = session(Directory({1: 19001}))
    s.client_data(fetch_request(5))
    records = b"r" * 300_000
    answer = fetch_answer(5, records, nodes((1, "real-broker")))
    at = answer.index(records[:1000])
    s.upstream_data(answer[: at + 10])
    assert s.opaque_ahead() == len(records) - 10
    assert bytes(io.client) == answer[: at + 10]
    io.client += answer[at + 10 : at + 1000]  # what the IO layer moved itself, in order
    s.relayed_opaque(990)
    assert s.opaque_ahead() == len(records) - 1000
    with pytest.raises(ValueError):
        s.relayed_opaque(len(records))  # more than is opaque
    io.client += answer[at + 1000 : at + len(records)]
    s.relayed_opaque(len(records) - 1000)
    assert s.opaque_ahead() == 0  # the partition's tagged fields and the answer's follow
    s.upstream_data(answer[at + len(records) :])
    # the same length (endpoints rewritten in place), the same bytes up to the tagged fields
    assert len(io.client) == len(answer) and io.closed is None and s.in_flight == 0
    assert bytes(io.client)[: at + len(records)] == answer[: at + len(records)]
    assert b"real-broker" not in io.client


def test_an_untouched_answer_is_opaque_to_its_end():
    """Fetch v12 (no KIP-951 fields): relayed untouched, so everything after the first
    bytes read is opaque, and reporting it ends the answer as feeding it would."""
    s, io = session(Directory({}))
    s.client_data(fetch_request(9, version=12))
    answer = fetch_answer(9, b"x" * 200_000, (), version=12)
    s.upstream_data(answer[:50])
    assert s.opaque_ahead() == len(answer) - 50 == s.stream_left
    io.client += answer[50:]
    s.relayed_opaque(len(answer) - 50)
    assert bytes(io.client) == answer and s.in_flight == 0 and s.opaque_ahead() == 0


def test_nothing_is_opaque_while_bytes_wait_for_the_client_or_no_answer_streams():
    s, _ = session(Directory({}))
    assert s.opaque_ahead() == 0
    s.client_data(fetch_request(3, version=12))
    answer = fetch_answer(3, b"y" * 100_000, (), version=12)
    s.upstream_data(answer[:4])  # the head is not complete: nothing is streaming yet
    assert s.opaque_ahead() == 0
    s.upstream_data(answer[4:20])
    s._to_client.append(b"queued")  # something still owed to the client ahead of them
    assert s.opaque_ahead() == 0
