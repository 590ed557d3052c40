"""Issue 20: per-topic requests of ENTRY_BYTES_FROM bytes or more are walked, split and
answered as bytes (protocol/enforce/entrybytes.py), never decoded whole with kio. Proved
against the decoding path for every version of every row the byte path serves (OffsetCommit,
TxnOffsetCommit, DeleteRecords, OffsetForLeaderEpoch, OffsetDelete, DescribeProducers, the
share group offset APIs), under every policy of test_denied_entries_as_bytes (nothing allowed:
the group or transactional id denied; topics denied; one topic allowed) and with everything
allowed: the same decisions, the same bytes to the broker, the same answer (merged with a
broker's answer).

And at the 1 MiB limit: an OffsetCommit of 35,000 topics whose group is denied, or whose
topics are, is answered without one kio entry per topic, a slice of entries per turn.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from aclgate.authz.model import AclBinding
from aclgate.authz.model import ResourceType as RT
from aclgate.protocol import codec
from aclgate.protocol.effects import LookUpTopicIds
from aclgate.protocol.enforce import base, entrybytes
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.entrybytes import ENTRIES_PER_TURN, EntriesAsBytes, entry_plan
from aclgate.protocol.enforce.table import TABLE
from aclgate.protocol.header import parse_request_header
from aclgate.protocol.versions import response_class, response_module
from tests.fixtures.rawclient import module, request_entity
from tests.protocol.test_denied_entries_as_bytes import (
    GROUPS_ALLOWED,
    POLICIES,
    _cases,
    _counting,
    _request,
)
from tests.protocol.test_slices import _session

EVERYTHING = [
    *GROUPS_ALLOWED,
    *(dataclasses.replace(GROUPS_ALLOWED[0], resource_type=t) for t in (RT.TOPIC, RT.CLUSTER)),
]
POLICIES_AND_ALL = {**POLICIES, "everything allowed": EVERYTHING}


def _byte_cases() -> list[Any]:
    out = []
    for key, version, handler in _cases():
        if isinstance(handler, EntriesAsBytes):
            for policy in POLICIES_AND_ALL:
                out.append(
                    pytest.param(key, version, handler, policy, id=f"{key}v{version}-{policy}")
                )
    return out


def _run(frame: bytes, acls: list[AclBinding], handler: Any, as_bytes: bool, patch) -> Any:
    decoded: list[int] = []
    with patch.context() as m:
        m.setattr(entrybytes, "ENTRY_BYTES_FROM", 0 if as_bytes else 1 << 30)
        dispatch = base.ApiHandler.dispatch
        m.setattr(base.ApiHandler, "dispatch", lambda *a: decoded.append(1) or dispatch(*a))
        session, io, sink = _session(acls, auto_turns=True)
        session.client_data(frame)
        assert bool(decoded) != as_bytes  # the byte path never decodes the request whole
        sent = bytes(io.upstream)
        if sent:
            header = parse_request_header(memoryview(sent))
            request = codec.decode_request(memoryview(sent), header)
            cls = response_class(header.api_key, header.api_version)
            mirrored = build(cls, ErrorCode.none, request, handler.aliases)
            session.upstream_data(codec.encode_response(header.correlation_id, mirrored))
    decisions = [(r.resource_type, r.resource_name, r.outcome.allowed, r.ref_count)
                 for r in sink.records]  # fmt: skip
    return sent, bytes(io.client), io.closed, decisions


def test_every_row_of_the_byte_path_compiles_for_every_version() -> None:
    rows = [(k, r) for k, r in TABLE.items() if isinstance(r.handler, EntriesAsBytes)]
    assert len(rows) >= 6
    for key, version, handler in _cases():
        if isinstance(handler, EntriesAsBytes):
            assert entry_plan(handler, key, version) is not None, (key, version)


@pytest.mark.parametrize("api_key,version,handler,policy", _byte_cases())
def test_the_byte_path_decides_and_answers_as_the_decoding_path(
    api_key, version, handler, policy, monkeypatch
) -> None:
    frame = _request(api_key, version, handler)
    acls = POLICIES_AND_ALL[policy]
    as_bytes = _run(frame, acls, handler, True, monkeypatch)
    assert as_bytes == _run(frame, acls, handler, False, monkeypatch)
    assert as_bytes[0] or as_bytes[1]


def offset_commit(count: int, group: str = "g") -> bytes:
    mod = module(8, 9)
    partition = mod.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=None
    )
    topics = tuple(
        mod.OffsetCommitRequestTopic(name=f"t{i:08d}", partitions=(partition,))
        for i in range(count)
    )
    body = request_entity(8, 9, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                          group_instance_id=None, topics=topics)  # fmt: skip
    return codec.encode_request(1, body, "c")


#: topics of an OffsetCommit v9 at its 1 MiB limit
AT_LIMIT = 34_900


@pytest.mark.parametrize("group_allowed", [False, True], ids=["group denied", "topics denied"])
def test_an_offset_commit_at_its_limit_builds_no_entry_per_topic(group_allowed, monkeypatch):
    """Before: decoded whole, then one kio entry built and encoded per topic: 360 ms."""
    frame = offset_commit(AT_LIMIT)
    assert len(frame) <= 1 << 20
    built = _counting(monkeypatch, response_module(8, 9).OffsetCommitResponseTopic)
    acls = [EVERYTHING[0]] if group_allowed else []
    session, io, _sink = _session(acls, auto_turns=False)
    session.client_data(frame)
    turns = io.run_turns()
    assert turns >= AT_LIMIT // ENTRIES_PER_TURN
    answer = codec.decode_response(bytes(io.client), 8, 9)
    assert len(answer.topics) == AT_LIMIT
    code = (
        ErrorCode.topic_authorization_failed
        if group_allowed
        else ErrorCode.group_authorization_failed
    )
    assert {t.partitions[0].error_code for t in answer.topics} == {code}
    assert answer.topics[-1].name == f"t{AT_LIMIT - 1:08d}"
    assert built[0] <= 2


IDS = {name: uuid.UUID(int=i + 1) for i, name in enumerate(("ok", "no", "gone"))}


def offset_commit_v10(topics: list[tuple[str, list[int]]], group: str = "g") -> bytes:
    mod = module(8, 10)
    entries = tuple(
        mod.OffsetCommitRequestTopic(
            topic_id=IDS[name],
            partitions=tuple(
                mod.OffsetCommitRequestPartition(
                    partition_index=p,
                    committed_offset=1,
                    committed_leader_epoch=-1,
                    committed_metadata=None,
                )
                for p in partitions
            ),
        )
        for name, partitions in topics
    )
    body = request_entity(8, 10, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                          group_instance_id=None, topics=entries)  # fmt: skip
    return codec.encode_request(1, body, "c")


def _run_by_id(frame: bytes, acls: list[AclBinding], as_bytes: bool, patch) -> Any:
    decoded: list[int] = []
    with patch.context() as m:
        m.setattr(entrybytes, "ENTRY_BYTES_FROM", 0 if as_bytes else 1 << 30)
        dispatch = base.ApiHandler.dispatch
        m.setattr(base.ApiHandler, "dispatch", lambda *a: decoded.append(1) or dispatch(*a))
        session, io, sink = _session(acls, auto_turns=True)
        for name in ("ok", "no"):
            session.context.policy.topic_ids.learn(IDS[name], name)
        session.client_data(frame)
        for token, effect in list(io.effects):
            if isinstance(effect, LookUpTopicIds):  # "gone" is unknown to the cluster too
                session.resume(token, {})
        assert bool(decoded) != as_bytes
        sent = bytes(io.upstream)
        if sent:
            header = parse_request_header(memoryview(sent))
            request = codec.decode_request(memoryview(sent), header)
            cls = response_class(header.api_key, header.api_version)
            mirrored = build(cls, ErrorCode.none, request, TABLE[8].handler.aliases)
            session.upstream_data(codec.encode_response(header.correlation_id, mirrored))
    decisions = [(r.resource_type, r.resource_name, r.outcome.allowed) for r in sink.records]
    return sent, bytes(io.client), io.closed, decisions


TOPIC_OK = dataclasses.replace(GROUPS_ALLOWED[0], resource_type=RT.TOPIC, resource_name="ok")


@pytest.mark.parametrize(
    "acls",
    [[], GROUPS_ALLOWED, [*GROUPS_ALLOWED, TOPIC_OK]],
    ids=["group denied", "topics denied", "one topic allowed"],
)
@pytest.mark.parametrize(
    "topics",
    [
        [("ok", [0, 1]), ("no", [2]), ("gone", [0])],
        [("no", [0]), ("gone", [1, 2])],
        [("gone", [0])],
    ],
    ids=["ok-no-gone", "no-gone", "gone"],
)
def test_offset_commit_by_topic_id_takes_the_byte_path_as_the_decoding_one(
    acls, topics, monkeypatch
) -> None:
    """OffsetCommit v10 names topics by id: known ones decided by name, unknown ones
    (looked up first) answered UNKNOWN_TOPIC_ID after the denied ones, on both paths."""
    frame = offset_commit_v10(topics)
    plan = entry_plan(TABLE[8].handler, 8, 10)
    assert plan is not None and plan.by_id
    as_bytes = _run_by_id(frame, acls, True, monkeypatch)
    assert as_bytes == _run_by_id(frame, acls, False, monkeypatch)
    assert as_bytes[2] is None and (as_bytes[0] or as_bytes[1])
