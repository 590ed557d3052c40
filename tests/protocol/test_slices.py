"""Issue 20: a request naming more than DECISIONS_PER_TURN resources is decided a slice per
turn of the event loop (protocol/enforce/slices.py, the NextTurn effect), and OffsetFetch
v8+ reads its group ids in place (protocol/enforce/peek.py `peek_offset_fetch_groups`).

* The first turn makes at most DECISIONS_PER_TURN decisions; the answer comes after the last
  slice, byte for byte the answer of the request decided at once; the requests behind it
  wait, so answers keep their order.
* OffsetFetch v8-v10: a request of denied groups is answered without being decoded, byte for
  byte as the decoding path answers it; with an allowed group, each group is decided once and
  the same stripped request goes to the broker.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclBinding, AclOperation, AclPermissionType, PatternType
from aclgate.authz.model import ResourceType as RT
from aclgate.protocol import codec
from aclgate.protocol.codec import encode_request
from aclgate.protocol.effects import LookUpTopicIds
from aclgate.protocol.enforce import groups, peek
from aclgate.protocol.enforce.context import AuthContext, DecisionRecord, Policy
from aclgate.protocol.enforce.slices import DECISIONS_PER_TURN
from aclgate.protocol.enforce.table import advertised_versions, handlers
from aclgate.protocol.header import parse_request_header
from aclgate.protocol.session import ProxySession, SessionConfig
from tests.fixtures.rawclient import module, request_entity
from tests.protocol.test_session import FakeIO, correlation_ids


class Sink:
    def __init__(self) -> None:
        self.records: list[DecisionRecord] = []

    def decided(self, record: DecisionRecord) -> None:
        self.records.append(record)


def _session(acls: list[AclBinding], auto_turns: bool) -> tuple[ProxySession, FakeIO, Sink]:
    authorizer = Authorizer(allow_everyone_if_no_acl_found=False)
    authorizer.load(acls)
    sink = Sink()
    config = SessionConfig(handlers=handlers(), allowed_versions=advertised_versions())
    ctx = AuthContext(
        Policy(authorizer=authorizer, sink=sink), "User:ANONYMOUS", "127.0.0.1", "PLAINTEXT"
    )
    io = FakeIO()
    io.auto_turns = auto_turns
    session = io.session = ProxySession(config, io, context=ctx)
    return session, io, sink


def _allow_group(name: str) -> AclBinding:
    return AclBinding(RT.GROUP, name, PatternType.LITERAL, "User:ANONYMOUS", "*",
                      AclOperation.DESCRIBE, AclPermissionType.ALLOW)  # fmt: skip


def delete_groups(count: int, corr: int = 7) -> bytes:
    names = tuple(f"g{i:06d}" for i in range(count))
    return encode_request(corr, request_entity(42, 2, groups_names=names), "c")


def api_versions(corr: int) -> bytes:
    body = request_entity(18, 3, client_software_name="c", client_software_version="1")
    return encode_request(corr, body, "c")


def test_a_request_of_many_names_is_decided_a_slice_per_turn() -> None:
    """Before: 23,829 decisions (and their records) in the turn that read the request."""
    count = 3 * DECISIONS_PER_TURN + 5
    session, io, sink = _session([], auto_turns=False)
    session.client_data(delete_groups(count))
    assert len(sink.records) == DECISIONS_PER_TURN
    assert io.client == b""  # not answered yet
    assert io.run_turns() == 4  # three more slices, then the answer in a turn of its own
    assert len(sink.records) == count
    assert [r.resource_name for r in sink.records] == [f"g{i:06d}" for i in range(count)]
    at_once, io_at_once, _ = _session([], auto_turns=True)
    at_once.client_data(delete_groups(count))
    assert bytes(io.client) == bytes(io_at_once.client)


def test_the_requests_behind_wait_for_the_last_slice() -> None:
    session, io, _ = _session([], auto_turns=False)
    session.client_data(delete_groups(DECISIONS_PER_TURN + 1, corr=7) + api_versions(8))
    assert io.upstream == b""  # ApiVersions waits behind the DeleteGroups being decided
    io.run_turns()
    assert correlation_ids(bytes(io.client)) == [7]
    assert io.upstream != b""  # then forwarded


def test_a_request_within_one_slice_is_decided_at_once() -> None:
    session, io, sink = _session([], auto_turns=False)
    session.client_data(delete_groups(DECISIONS_PER_TURN))
    assert io.turns == []
    assert len(sink.records) == DECISIONS_PER_TURN
    assert correlation_ids(bytes(io.client)) == [7]


# ------------------------------------------------------------------------ OffsetFetch v8+


def offset_fetch(version: int, groups_spec: list[tuple[str, Any]], corr: int = 9) -> bytes:
    """OffsetFetch of groups (id, topics: None or [(name or id, partitions)])."""
    mod = module(9, version)
    entries = []
    for group_id, topics in groups_spec:
        fields: dict[str, Any] = {"group_id": group_id}
        if version >= 9:
            fields |= {"member_id": None, "member_epoch": -1}
        if topics is None:
            fields["topics"] = None
        else:
            key = "topic_id" if version >= 10 else "name"
            fields["topics"] = tuple(
                mod.OffsetFetchRequestTopics(**{key: t}, partition_indexes=tuple(p))
                for t, p in topics
            )
        entries.append(mod.OffsetFetchRequestGroup(**fields))
    body = request_entity(9, version, groups=tuple(entries), require_stable=True)
    return encode_request(corr, body, "c")


def _spec(version: int) -> list[tuple[str, Any]]:
    def topic(i: int) -> Any:
        return uuid.UUID(int=i + 1) if version >= 10 else f"t{i}"

    return [
        ("a", None),
        ("b", [(topic(0), [0, 1]), (topic(1), [2])]),
        ("ü-group", [(topic(2), [])]),
        ("a", None),  # a duplicate: decided twice, as Kafka does
        *((f"many-{i}", None) for i in range(40)),
    ]


def _answer(frame: bytes, acls: list[AclBinding], peeked: bool, monkeypatch) -> Any:
    with monkeypatch.context() as patch:
        if not peeked:
            patch.setattr(groups, "peek_offset_fetch_groups", lambda frame, header: None)
        session, io, sink = _session(acls, auto_turns=True)
        session.client_data(frame)
        for token, effect in list(io.effects):
            if isinstance(effect, LookUpTopicIds):  # ids the cluster does not know
                session.resume(token, {})
    return io, sink


@pytest.mark.parametrize("version", [8, 9, 10])
def test_offset_fetch_of_denied_groups_is_answered_as_the_decoding_path_answers(
    version, monkeypatch
) -> None:
    frame = offset_fetch(version, _spec(version))
    assert peek.peek_offset_fetch_groups(frame, parse_request_header(frame)) is not None
    decoded: list[Any] = []
    real = codec.decode_request
    monkeypatch.setattr(groups, "decode_request", lambda *a: decoded.append(1) or real(*a))
    io, sink = _answer(frame, [], True, monkeypatch)
    assert decoded == []  # never decoded
    io_full, sink_full = _answer(frame, [], False, monkeypatch)
    assert io.client and bytes(io.client) == bytes(io_full.client)
    assert [r.resource_name for r in sink.records] == [r.resource_name for r in sink_full.records]
    assert len(sink.records) == len(_spec(version))


@pytest.mark.parametrize("version", [8, 9])
def test_offset_fetch_with_an_allowed_group_decides_each_group_once(version, monkeypatch) -> None:
    frame = offset_fetch(version, _spec(version))
    acls = [_allow_group("b"), _allow_group("a")]
    io, sink = _answer(frame, acls, True, monkeypatch)
    io_full, sink_full = _answer(frame, acls, False, monkeypatch)
    assert io.upstream and bytes(io.upstream) == bytes(io_full.upstream)
    assert io.client == io_full.client == b""
    key = [(r.resource_type, r.resource_name, r.outcome.allowed) for r in sink.records]
    assert sorted(key) == sorted(
        (r.resource_type, r.resource_name, r.outcome.allowed) for r in sink_full.records
    )
    assert sum(1 for r in sink.records if r.resource_type == RT.GROUP) == len(_spec(version))


def test_the_peek_leaves_tagged_fields_and_empty_ids_to_the_decoding_path() -> None:
    frame = offset_fetch(9, [("g", None)])
    header = parse_request_header(frame)
    assert peek.peek_offset_fetch_groups(frame, header) == ["g"]
    tagged = frame[:-3] + b"\x01\x07\x00" + frame[-2:]  # a tag on the group
    assert peek.peek_offset_fetch_groups(tagged, header) is None
    empty = offset_fetch(9, [("", None)])
    assert peek.peek_offset_fetch_groups(empty, parse_request_header(empty)) is None
    cut = frame[:-3]
    assert peek.peek_offset_fetch_groups(cut, header) is None
