"""The Fetch peek (protocol/enforce/fetchpeek.py) reads what kio decodes, declines the rest,
and the handler decides the same on both paths.

1. Every Fetch version the proxy serves (v4-18), kio-encoded: the peek's topics, partitions,
   forgotten topics and session fields equal kio's decode.
2. Followers, tagged fields, null and non-UTF-8 strings: declined (None), kio decodes them.
3. Mutated and truncated frames: whenever the peek answers, kio decodes the frame too and
   agrees (the peek never accepts what the full path would refuse).
4. Sans-IO, a session with the real API table fed the same conversation with the peek on and
   off (forced to decline): the same bytes reach the broker and the client, the same
   decisions are counted, the same sessions are kept.
"""

from __future__ import annotations

import dataclasses
import sys
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import i32, i64

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclBinding
from aclgate.protocol.codec import decode_request, encode_request, encode_response
from aclgate.protocol.effects import LookUpTopicIds
from aclgate.protocol.enforce.context import AuthContext, Policy
from aclgate.protocol.enforce.fetchpeek import PeekedFetch, peek_fetch
from aclgate.protocol.enforce.fetchsessions import FetchSessions
from aclgate.protocol.enforce.table import advertised_versions, handlers
from aclgate.protocol.header import MalformedRequest, parse_request_header
from aclgate.protocol.session import ProxySession, SessionConfig
from aclgate.protocol.versions import request_class, response_class
from aclgate.proxy.audit.decisions import DecisionRecorder
from tests.fixtures.scripted_broker import _defaults

VERSIONS = range(4, 19)
IDS = {"ok": uuid.UUID(int=0xA1), "denied": uuid.UUID(int=0xB2), "other": uuid.UUID(int=0xC3)}


def entity(cls: type, **values: Any) -> Any:
    """`_defaults`, but tagged fields keep kio's defaults (a consumer sends none of them)."""
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata and f.name not in values and f.default is not dataclasses.MISSING:
            values[f.name] = f.default
    return _defaults(cls, **values)


def fetch(
    version: int,
    topics: dict[str, list[int]],
    session_id: int = 0,
    epoch: int = -1,
    forgotten: dict[str, list[int]] | None = None,
    rack: str = "",
    **fields: Any,
) -> Any:
    """A consumer's Fetch request of `version` (topics by id from v13, as kio names them)."""
    cls = request_class(1, version)
    mod = sys.modules[cls.__module__]
    by_id = version >= 13
    key = (
        (lambda t: {"topic_id": IDS.get(t, uuid.UUID(int=0xEE))})
        if by_id
        else (lambda t: {"topic": t})
    )
    values: dict[str, Any] = {
        "topics": tuple(
            entity(
                mod.FetchTopic,
                **key(name),
                partitions=tuple(
                    entity(mod.FetchPartition, partition=i32(p), fetch_offset=i64(p * 10))
                    for p in parts
                ),
            )
            for name, parts in topics.items()
        ),
    }
    names = {f.name for f in dataclasses.fields(cls)}
    if "replica_id" in names:
        values["replica_id"] = i32(-1)
    if "replica_state" in names:  # a consumer's: kio's default (replica -1), never on the wire
        values["replica_state"] = mod.ReplicaState()
    if "session_id" in names:
        values.update(session_id=i32(session_id), session_epoch=i32(epoch))
        values["forgotten_topics_data"] = tuple(
            _defaults(mod.ForgottenTopic, **key(name), partitions=tuple(i32(p) for p in parts))
            for name, parts in (forgotten or {}).items()
        )
    if "rack_id" in names:
        values["rack_id"] = rack
    values.update(fields)
    return dataclasses.replace(entity(cls), **values)


def framed(body: Any, corr: int = 1) -> bytes:
    return encode_request(corr, body, client_id="consumer-1")


def summary(request: Any, version: int) -> tuple:
    """What the handler reads of a request: (session id, epoch, topics, forgotten)."""
    key = "topic_id" if version >= 13 else "topic"
    topics = [(getattr(t, key), [int(p.partition) for p in t.partitions]) for t in request.topics]
    if version < 7:
        return (topics,)
    forgotten = [
        (getattr(t, key), [int(p) for p in t.partitions]) for t in request.forgotten_topics_data
    ]
    return (int(request.session_id), int(request.session_epoch), topics, forgotten)


@pytest.mark.parametrize("version", VERSIONS)
def test_peek_reads_what_kio_decodes(version):
    many = list(range(130))  # a partition count past one varint byte
    body = fetch(
        version,
        {"ok": [0, 3], "other": many},
        session_id=77,
        epoch=5,
        forgotten={"denied": [1, 2]},
        rack="rack-1",
    )
    frame = framed(body)
    header = parse_request_header(frame)
    peeked = peek_fetch(frame, header)
    assert isinstance(peeked, PeekedFetch)
    assert summary(peeked, version) == summary(decode_request(frame, header), version)
    assert [t.index for t in peeked.topics] == [0, 1]


@pytest.mark.parametrize("version", [4, 11, 12, 13, 17, 18])
def test_empty_incremental_fetch_is_peeked(version):
    frame = framed(fetch(version, {}, session_id=9, epoch=3))
    peeked = peek_fetch(frame, parse_request_header(frame))
    assert peeked is not None and peeked.topics == ()


def _declined(version: int) -> list[tuple[str, Any]]:
    cls = request_class(1, version)
    mod = sys.modules[cls.__module__]
    names = {f.name for f in dataclasses.fields(cls)}
    out: list[tuple[str, Any]] = []
    if "replica_id" in names:
        out.append(("follower", fetch(version, {"ok": [0]}, replica_id=i32(1))))
    if "replica_state" in names:
        state = _defaults(mod.ReplicaState, replica_id=i32(2), replica_epoch=i64(1))
        out.append(("replica state tag", fetch(version, {"ok": [0]}, replica_state=state)))
    if "cluster_id" in names:
        out.append(("cluster id tag", fetch(version, {"ok": [0]}, cluster_id="c1")))
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_peek_declines_what_only_the_full_path_reads(version):
    for what, body in _declined(version):
        frame = framed(body)
        header = parse_request_header(frame)
        assert peek_fetch(frame, header) is None, what
        decode_request(frame, header)  # the full path reads it


@pytest.mark.parametrize("version", [4, 11, 12])  # named topics (v13+ name them by id)
def test_peek_declines_bad_strings(version):
    frame = bytearray(framed(fetch(version, {"okay": [0]})))
    at = frame.index(b"okay")
    frame[at] = 0xFF  # not UTF-8
    header = parse_request_header(bytes(frame))
    assert peek_fetch(bytes(frame), header) is None
    with pytest.raises(MalformedRequest):
        decode_request(bytes(frame), header)


SEEDS = [
    framed(fetch(v, {"ok": [0, 1], "denied": [2]}, 7, 2, {"other": [4]}, "r")) for v in VERSIONS
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.sampled_from(SEEDS),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 10_000),
)
def test_peek_never_accepts_what_kio_refuses(seed, edits, cut):
    frame = bytearray(seed)
    for at, value in edits:
        at = 14 + at % (len(frame) - 14)  # the body: the header stays parseable
        frame[at] = value
    data = bytes(frame[: max(len(seed) - cut % 40, 20)] if cut % 3 == 0 else frame)
    try:
        header = parse_request_header(data)
    except MalformedRequest:
        return
    if header.api_key != 1:
        return
    peeked = peek_fetch(data, header)
    if peeked is None:
        return
    decoded = decode_request(data, header)  # must not raise
    assert summary(peeked, header.api_version) == summary(decoded, header.api_version)


# ---------------------------------------------------------------- the handler on both paths


class IO:
    def __init__(self) -> None:
        self.client: list[bytes] = []
        self.upstream: list[bytes] = []
        self.closed: tuple | None = None
        #: (token, result) of the waits to resume: a topic id lookup finds nothing
        self.waits: list[tuple[int, Any]] = []

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

    def perform(self, token, effect):
        if token:
            self.waits.append((token, {} if isinstance(effect, LookUpTopicIds) else None))


def read_acl(topic: str) -> AclBinding:
    return AclBinding.from_dict(
        {
            "resource_type": "TOPIC",
            "resource_name": topic,
            "pattern_type": "LITERAL",
            "principal": "User:alice",
            "host": "*",
            "operation": "READ",
            "permission_type": "ALLOW",
        }
    )


def fetch_answer(version: int, corr: int, session_id: int) -> bytes:
    cls = response_class(1, version)
    body = _defaults(cls)
    if "session_id" in {f.name for f in dataclasses.fields(cls)}:
        body = dataclasses.replace(body, session_id=i32(session_id))
    return encode_response(corr, body)


def converse(version: int, peek: bool, monkeypatch) -> tuple:
    """One connection's conversation; returns everything observable."""
    if not peek:
        monkeypatch.setattr("aclgate.protocol.enforce.data.peek_fetch", lambda f, h: None)
    counts: dict = {}
    authorizer = Authorizer(allow_everyone_if_no_acl_found=False)
    authorizer.load([read_acl("ok"), read_acl("other")])
    policy = Policy(authorizer=authorizer, sink=DecisionRecorder(counts, None))
    for name in ("ok", "denied", "other"):
        policy.topic_ids.learn(IDS[name], name)
    config = SessionConfig(handlers=handlers(), allowed_versions=advertised_versions(None))
    io = IO()
    session = ProxySession(config, io, None, AuthContext(policy, "User:alice", "::1", "PLAINTEXT"))
    corr = 0

    def exchange(body: Any, sid: int = 0) -> None:
        nonlocal corr
        corr += 1
        before = len(io.upstream)
        session.client_data(framed(body, corr))
        while io.waits:  # a topic id lookup: nothing more is known afterwards
            session.resume(*io.waits.pop(0))
        if len(io.upstream) > before:
            session.upstream_data(fetch_answer(version, corr, sid))

    exchange(fetch(version, {"ok": [0, 1]}))  # sessionless, allowed
    exchange(fetch(version, {"ok": [0], "denied": [1]}))  # one topic stripped
    exchange(fetch(version, {"denied": [0]}))  # answered alone
    if version >= 13:
        exchange(fetch(version, {"unknown": [0]}))  # an id nobody knows
    if version >= 7:
        exchange(fetch(version, {"ok": [0]}, session_id=0, epoch=0), sid=41)  # opens 41
        exchange(fetch(version, {"other": [2]}, 41, 1, {"ok": [0]}), sid=41)  # adds, forgets
        exchange(fetch(version, {}, 41, 2), sid=41)  # nothing new
        exchange(fetch(version, {"denied": [0]}, 41, 3), sid=41)  # asks a denied one: ended
        exchange(fetch(version, {"ok": [0]}, session_id=0, epoch=0), sid=42)  # opens 42
        authorizer.load([read_acl("other")])  # "ok" revoked
        exchange(fetch(version, {}, 42, 1), sid=42)  # ended: holds a revoked partition
    held = sessions.held if (sessions := session.state(FetchSessions)) else {}
    kept = {sid: (h.topics, h.version) for sid, h in held.items()}
    return io.upstream, io.client, io.closed, dict(counts), kept


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 15, 17, 18])
def test_handler_decides_the_same_on_the_peeked_and_the_full_path(version, monkeypatch):
    peeked = converse(version, True, monkeypatch)
    full = converse(version, False, monkeypatch)
    assert peeked[2] is None
    assert peeked == full


@pytest.mark.pure_python  # counts calls through base.decode_request and data.decode_request
def test_the_peek_is_taken(monkeypatch):
    """The equivalence above compares two paths: the peeked one must really be the peek."""
    calls = []
    real = decode_request

    def counting(frame, header):
        calls.append(header.api_key)
        return real(frame, header)

    monkeypatch.setattr("aclgate.protocol.enforce.base.decode_request", counting)
    monkeypatch.setattr("aclgate.protocol.enforce.data.decode_request", counting)
    upstream, *_ = converse(17, True, monkeypatch)
    # decoded only to strip "denied", to answer it alone, to answer the unknown id (after
    # its lookup, as the full path does) and to end the two sessions
    assert calls.count(1) == 5, calls
    assert len(upstream) >= 8


def test_zero_topic_id_is_left_to_the_full_path():
    """Found by the fuzz test above: kio reads the all-zero topic id as null."""
    IDS["zero"] = uuid.UUID(int=0)
    try:
        frame = framed(fetch(17, {"zero": [0]}))
    finally:
        del IDS["zero"]
    header = parse_request_header(frame)
    assert peek_fetch(frame, header) is None
    assert decode_request(frame, header).topics[0].topic_id is None
