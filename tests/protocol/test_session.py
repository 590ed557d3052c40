"""The sans-IO session: ordering, streaming, acks=0, backpressure and failures."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aclgate.authz.authorizer import Authorizer
from aclgate.protocol.apiversions import unsupported_version_response
from aclgate.protocol.effects import LookUpTopicIds, NextTurn
from aclgate.protocol.enforce.context import AuthContext, Policy
from aclgate.protocol.routing import allowed_versions, transparent_handlers
from aclgate.protocol.session import ProxySession, SessionConfig


class FakeIO:
    def __init__(self):
        self.client = bytearray()
        self.upstream = bytearray()
        self.closed = None
        self.paused = False
        self.pauses = 0
        self.effects = []
        #: tokens of NextTurn effects not resumed yet (`run_turns`)
        self.turns = []
        #: the session `run_turns` resumes (set by the test that needs it)
        self.session = None
        #: resume each NextTurn at once, as if no other client were waiting
        self.auto_turns = False

    def run_turns(self):
        """Resume the NextTurn effects as the event loop's later turns would, until the
        session asks for no more; how many turns that took."""
        turns = 0
        while self.turns:
            turns += 1
            self.session.resume(self.turns.pop(0))
        return turns

    def write_client(self, data):
        self.client += data

    def write_upstream(self, data):
        self.upstream += data

    def close(self, reason, kind):
        self.closed = (reason, kind)

    def pause_client_reading(self):
        self.paused = True
        self.pauses += 1

    def resume_client_reading(self):
        self.paused = False

    def perform(self, token, effect):
        self.effects.append((token, effect))
        if isinstance(effect, NextTurn):
            self.turns.append(token)
            if self.auto_turns:
                self.run_turns()


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def request(api_key, version, corr, body=b"") -> bytes:
    return frame(struct.pack(">hhih", api_key, version, corr, 1) + b"c" + body)


def produce_v3(corr, acks) -> bytes:
    # transactional_id null (int16 -1), acks, timeout, empty topic array
    return request(0, 3, corr, struct.pack(">hhii", -1, acks, 1000, 0))


def response(corr, payload=b"") -> bytes:
    return frame(struct.pack(">i", corr) + payload)


def split_frames(data: bytes):
    out, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos)[0]
        out.append(data[pos : pos + 4 + size])
        pos += 4 + size
    return out


def correlation_ids(data: bytes):
    """Of responses: right after the size."""
    return [struct.unpack_from(">i", f, 4)[0] for f in split_frames(data)]


def request_ids(data: bytes):
    """Of requests: after size, api_key and api_version."""
    return [struct.unpack_from(">i", f, 8)[0] for f in split_frames(data)]


def local_handler(session, header, frame_):
    session.respond(header, response(header.correlation_id, b"local"))


def anonymous_context() -> AuthContext:
    """Who the session serves, as every session has one (the IO layer makes it): here an
    anonymous client under an authorizer without ACLs that allows everyone."""
    authorizer = Authorizer(allow_everyone_if_no_acl_found=True)
    authorizer.load(())
    return AuthContext(Policy(authorizer=authorizer), "User:ANONYMOUS", "127.0.0.1", "PLAINTEXT")


def make(max_in_flight=100, handlers=None):
    allowed = allowed_versions()
    h = transparent_handlers(allowed)
    h.update(handlers or {})
    cfg = SessionConfig(
        handlers=h,
        allowed_versions=allowed,
        max_in_flight=max_in_flight,
        unsupported_api_versions=lambda corr: unsupported_version_response(corr, 4),
    )
    io = FakeIO()
    return ProxySession(cfg, io, context=anonymous_context()), io


def test_local_answer_never_overtakes_an_earlier_upstream_response():
    s, io = make(handlers={12: local_handler})  # Heartbeat answered locally
    s.client_data(request(8, 2, 1) + request(12, 0, 2) + request(8, 2, 3))
    assert request_ids(bytes(io.upstream)) == [1, 3]
    assert io.client == b""  # the local answer for 2 waits for 1
    s.upstream_data(response(1, b"one"))
    assert correlation_ids(bytes(io.client)) == [1, 2]
    s.upstream_data(response(3))
    assert correlation_ids(bytes(io.client)) == [1, 2, 3]


def test_acks0_produce_has_no_slot():
    s, io = make()
    s.client_data(produce_v3(1, 0) + produce_v3(2, 1))
    assert request_ids(bytes(io.upstream)) == [1, 2]
    s.upstream_data(response(2))
    assert correlation_ids(bytes(io.client)) == [2] and io.closed is None


def test_close_after_flush_writes_earlier_responses_first():
    def deny_and_close(session, header, frame_):
        session.close_after_flush("denied acks=0 produce")

    s, io = make(handlers={12: deny_and_close})
    s.client_data(request(8, 2, 1) + request(12, 0, 2) + request(8, 2, 3))
    assert request_ids(bytes(io.upstream)) == [1]  # nothing after the close is processed
    assert io.closed is None
    s.upstream_data(response(1))
    assert correlation_ids(bytes(io.client)) == [1]
    assert io.closed == ("denied acks=0 produce", None)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=8),
    cuts=st.lists(st.integers(1, 700), max_size=40),
    local_at=st.sets(st.integers(0, 7)),
)
def test_responses_arrive_whole_and_in_order_under_any_chunking(sizes, cuts, local_at):
    s, io = make(handlers={12: local_handler})
    reqs, expected, upstream = [], [], []
    for i, size in enumerate(sizes):
        corr = 100 + i
        if i in local_at:
            reqs.append(request(12, 0, corr))
            expected.append(response(corr, b"local"))
        else:
            reqs.append(request(8, 2, corr))
            r = response(corr, bytes([i]) * size)
            expected.append(r)
            upstream.append(r)
    s.client_data(b"".join(reqs))
    stream, pos = b"".join(upstream), 0
    for cut in [*cuts, len(stream)]:
        if pos >= len(stream):
            break
        s.upstream_data(stream[pos : pos + cut])
        pos += cut
    assert bytes(io.client) == b"".join(expected)
    assert io.closed is None


def test_rewritten_responses_are_buffered_even_when_split():
    def rewrite(session, slot, frame_):
        return response(slot.correlation_id, b"REWRITTEN:" + bytes(frame_[8:]))

    def handler(session, header, frame_):
        session.forward(header, frame_, rewrite)

    s, io = make(handlers={8: handler})
    s.client_data(request(8, 2, 1))
    r = response(1, b"x" * 1000)
    for i in range(0, len(r), 7):
        s.upstream_data(r[i : i + 7])
    assert bytes(io.client) == response(1, b"REWRITTEN:" + b"x" * 1000)


def test_in_flight_bound_pauses_and_resumes_reading():
    s, io = make(max_in_flight=2)
    s.client_data(b"".join(request(8, 2, c) for c in (1, 2, 3, 4)))
    assert request_ids(bytes(io.upstream)) == [1, 2]
    assert io.paused and s.in_flight == 2
    s.upstream_data(response(1))
    assert request_ids(bytes(io.upstream)) == [1, 2, 3]
    s.upstream_data(response(2) + response(3))
    assert request_ids(bytes(io.upstream)) == [1, 2, 3, 4]
    assert not io.paused
    s.upstream_data(response(4))
    assert correlation_ids(bytes(io.client)) == [1, 2, 3, 4]


def test_many_local_answers_in_backlog_do_not_recurse():
    s, io = make(max_in_flight=1, handlers={12: local_handler})
    s.client_data(request(8, 2, 0) + b"".join(request(12, 0, c) for c in range(1, 5000)))
    s.upstream_data(response(0))
    assert correlation_ids(bytes(io.client)) == list(range(5000))


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (request(10000, 0, 1), "unsupported_api"),
        (request(3, 99, 1), "unsupported_api"),
        (request(38, 1, 1), "unsupported_api"),  # CreateDelegationToken: never forwarded
        (frame(b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x63"), "malformed_request"),
        (struct.pack(">i", 200_000_000), "frame_too_large"),
    ],
)
def test_bad_requests_close_the_connection(data, kind):
    s, io = make()
    s.client_data(data)
    assert io.closed is not None and io.closed[1] == kind
    assert io.upstream == b""


def test_api_versions_newer_than_kio_gets_unsupported_version():
    s, io = make()
    s.client_data(request(18, 9, 77))
    frames = split_frames(bytes(io.client))
    assert correlation_ids(bytes(io.client)) == [77]
    assert struct.unpack_from(">h", frames[0], 8)[0] == 35 and io.closed is None


def test_upstream_protocol_violations_close():
    s, io = make()
    s.client_data(request(8, 2, 1))
    s.upstream_data(response(2))
    assert io.closed[1] == "bad_upstream_response"
    s, io = make()
    s.upstream_data(response(1))
    assert io.closed[1] == "bad_upstream_response"


def test_a_handler_bug_closes_the_connection_and_forwards_nothing():
    def broken(session, header, frame_):
        raise KeyError("a bug")

    session, io = make(handlers={3: broken})
    session.client_data(request(3, 1, 7))
    reason, kind = io.closed
    first, trace = reason.split("\n", 1)
    assert (first, kind) == (
        "internal error handling api_key=3 v1 request: KeyError('a bug')",
        "internal_error",
    )
    assert not io.upstream and not io.client
    assert trace.startswith("Traceback") and "KeyError: 'a bug'" in trace  # for a bug report


def test_a_handler_bug_after_a_wait_closes_too():
    """A request waiting for the IO layer continues when it is resumed: a bug there must
    close the connection, not leave the client waiting for ever."""

    def breaks(_result):
        raise RuntimeError("after the lookup")

    def waits_then_breaks(session, header, frame_):
        session.wait(LookUpTopicIds(frozenset()), breaks)

    session, io = make(handlers={3: waits_then_breaks})
    session.client_data(request(3, 1, 7) + request(3, 1, 8))
    assert io.closed is None
    ((token, _effect),) = io.effects  # the second request waits behind the first
    session.resume(token)
    assert io.closed[1] == "internal_error"
    assert "RuntimeError('after the lookup')" in io.closed[0]
    assert not io.upstream and not io.client
