"""The session id and error code of a Fetch answer read as it streams by, byte by byte,
alone and in front of the KIP-951 endpoint rewrite (protocol/enforce/fetchsessions.py)."""

import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from aclgate.protocol.codec import MalformedResponse, decode_response, encode_response
from aclgate.protocol.enforce.fetchsessions import (
    MAX_SESSIONS,
    FetchSessions,
    Held,
    SessionAnswer,
    answer_head,
)
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.routing import rewriter_for
from aclgate.protocol.session import Slot
from aclgate.protocol.versions import response_class
from tests.fixtures.scripted_broker import _defaults, _mod
from tests.protocol.test_answerwalk import Directory, session


def header(version):
    """The header of the Fetch request answered (correlation id 9)."""
    return RequestHeader(1, version, 9, "c", version >= 12, 0)


def answer(version, error=ErrorCode.none, sid=1234, eps=()):
    m = _mod(1, version)
    part = _defaults(m.PartitionData, records=b"r" * 3000)
    if version >= 13:
        topic = _defaults(m.FetchableTopicResponse, topic_id=uuid.uuid4(), partitions=(part,))
    else:
        topic = _defaults(m.FetchableTopicResponse, topic="t", partitions=(part,))
    fields = {"node_endpoints": eps} if version >= 16 else {}
    body = _defaults(
        response_class(1, version),
        error_code=error,
        session_id=i32(sid),
        responses=(topic,),
        **fields,
    )
    return encode_response(9, body)


def slot(version):
    """The place of that request's answer."""
    return Slot(header(version))


def proxy_session():
    """A session whose directory advertises broker 2 as proxy.example:19002."""
    return session(Directory({2: 19002}, host="proxy.example"))[0]


@pytest.mark.parametrize("version", [7, 11, 12, 15, 17, 18])
def test_the_head_is_read_from_any_cut_and_the_answer_relayed(version):
    eps = ()
    if version >= 16:
        m = _mod(1, version)
        eps = (_defaults(m.NodeEndpoint, node_id=i32(2), host="h", port=i32(9092), rack=None),)
    frame = answer(version, ErrorCode.fetch_session_id_not_found, 77, eps)
    seen = []
    rewrite = SessionAnswer(rewriter_for(header(version)), version >= 12, lambda *h: seen.append(h))
    stream = rewrite.stream(proxy_session(), slot(version), len(frame) - 8)
    out = bytearray(frame[:8])
    for i in range(8, len(frame)):
        out += stream.feed(memoryview(frame)[i : i + 1])
    out += stream.finish()
    assert seen == [(ErrorCode.fetch_session_id_not_found, 77)]
    if version >= 16:  # the endpoint rewrite ran behind it, at the same length
        assert len(out) == len(frame) and b"\x00\x01h" not in out[-40:]
    else:
        assert bytes(out) == frame
    seen.clear()
    whole = rewrite(proxy_session(), slot(version), memoryview(frame))
    assert seen == [(ErrorCode.fetch_session_id_not_found, 77)]
    body = decode_response(bytes(whole), 1, version)
    assert body.session_id == 77
    if version >= 16:
        assert [(e.host, e.port) for e in body.node_endpoints] == [("proxy.example", 19002)]


def test_an_answer_shorter_than_its_head_is_malformed():
    assert answer_head(b"\x00" * 5, True) is None
    rewrite = SessionAnswer(None, True, lambda *h: None)
    stream = rewrite.stream(proxy_session(), slot(12), 5)
    stream.feed(memoryview(b"\x00" * 5))
    with pytest.raises(MalformedResponse):
        stream.finish()


def test_a_connection_remembers_a_bounded_number_of_sessions():
    sessions = FetchSessions()
    for sid in range(1, MAX_SESSIONS + 3):
        sessions.bind(sid, Held())
    assert list(sessions.held) == list(range(3, MAX_SESSIONS + 3))  # the oldest forgotten
    sessions.bind(5, Held())  # the same id again: replaced, nothing else forgotten
    assert len(sessions.held) == MAX_SESSIONS and list(sessions.held)[-1] == 5
