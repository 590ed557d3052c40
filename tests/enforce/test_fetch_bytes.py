"""Issue 20: a Fetch with denied (or unknown) topics, of ENTRY_BYTES_FROM bytes or more, is
answered and stripped from its bytes (data.py `FetchHandler._full_as_bytes`), not decoded
and rebuilt with kio. Proved against the decoding path, for every version the table serves:
the same decisions, the same request to the broker (allowed topics, no forgotten topics,
the session closed), the same answer merged with the broker's."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from aclgate.authz.model import AclBinding, AclOperation, AclPermissionType, PatternType
from aclgate.authz.model import ResourceType as RT
from aclgate.protocol import codec
from aclgate.protocol.effects import LookUpTopicIds
from aclgate.protocol.enforce import data
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.table import TABLE
from aclgate.protocol.header import parse_request_header
from aclgate.protocol.versions import response_class
from tests.fixtures.rawclient import module
from tests.protocol.test_denied_entries_as_bytes import _sample
from tests.protocol.test_slices import _session

IDS = {name: uuid.UUID(int=i + 1) for i, name in enumerate(("ok", "no", "gone"))}
OK = AclBinding(RT.TOPIC, "ok", PatternType.LITERAL, "User:ANONYMOUS", "*", AclOperation.READ,
                AclPermissionType.ALLOW)  # fmt: skip
VERSIONS = range(TABLE[1].versions[0], TABLE[1].versions[1] + 1)


def fetch(version: int, topics: list[tuple[str, list[int]]], epoch: int) -> bytes:
    mod = module(1, version)
    request = _sample(mod.FetchRequest, None)
    partition = _sample(mod.FetchPartition, None)
    entries = []
    for name, partitions in topics:
        key: dict[str, Any] = {"topic_id": IDS[name]} if version >= 13 else {"topic": name}
        parts = tuple(dataclasses.replace(partition, partition=p) for p in partitions)
        entries.append(mod.FetchTopic(**key, partitions=parts))
    changes: dict[str, Any] = {"topics": tuple(entries)}
    if version >= 7:
        forgotten = _sample(mod.ForgottenTopic, None)
        if version >= 13:
            forgotten = dataclasses.replace(forgotten, topic_id=IDS["ok"])
        changes |= {"session_id": 0, "session_epoch": epoch, "forgotten_topics_data": (forgotten,)}
    if version >= 15:
        changes["replica_state"] = dataclasses.replace(request.replica_state, replica_id=-1)
    elif hasattr(request, "replica_id"):
        changes["replica_id"] = -1
    return codec.encode_request(9, dataclasses.replace(request, **changes), "c")


def _run(frame: bytes, acls: list[AclBinding], as_bytes: bool, patch) -> Any:
    rebuilt: list[int] = []
    with patch.context() as m:
        m.setattr(data, "ENTRY_BYTES_FROM", 0 if as_bytes else 1 << 30)
        decoded = data.FetchHandler._full_decoded
        m.setattr(data.FetchHandler, "_full_decoded", lambda *a: rebuilt.append(1) or decoded(*a))
        session, io, sink = _session(acls, auto_turns=True)
        for name in ("ok", "no"):
            session.context.policy.topic_ids.learn(IDS[name], name)
        session.client_data(frame)
        for token, effect in list(io.effects):
            if isinstance(effect, LookUpTopicIds):
                session.resume(token, {})
        assert bool(rebuilt) != as_bytes  # the byte path never rebuilds the request with kio
        sent = bytes(io.upstream)
        if sent:
            header = parse_request_header(memoryview(sent))
            request = codec.decode_request(memoryview(sent), header)
            cls = response_class(header.api_key, header.api_version)
            aliases = {"partition_index": "partition", "responses": "topics"}
            mirrored = build(cls, ErrorCode.none, request, aliases, {"session_id": 0})
            session.upstream_data(codec.encode_response(header.correlation_id, mirrored))
    decisions = [(r.resource_name, r.outcome.allowed) for r in sink.records]
    return sent, bytes(io.client), io.closed, decisions


SCENARIOS = {
    "all denied": [("no", [0, 1]), ("no", [2])],
    "some denied": [("ok", [0]), ("no", [1, 2]), ("ok", [3])],
    "unknown id": [("ok", [0]), ("gone", [1])],
}


def _cases() -> list[Any]:
    """Every version, scenario and session form that applies (ids from v13, sessions v7)."""
    return [
        pytest.param(
            v, scenario, epoch, id=f"v{v}-{scenario}-{'opening' if epoch == 0 else 'sessionless'}"
        )
        for v in VERSIONS
        for scenario in SCENARIOS
        for epoch in (-1, 0)
        if not (scenario == "unknown id" and v < 13) and not (epoch == 0 and v < 7)
    ]


@pytest.mark.pure_python  # sets data.ENTRY_BYTES_FROM, counts data.FetchHandler._full_decoded
@pytest.mark.parametrize("version,scenario,epoch", _cases())
def test_the_byte_path_answers_as_the_decoding_path(version, scenario, epoch, monkeypatch):
    frame = fetch(version, SCENARIOS[scenario], epoch)
    as_bytes = _run(frame, [OK], True, monkeypatch)
    assert as_bytes == _run(frame, [OK], False, monkeypatch)
    assert as_bytes[1] or as_bytes[0]


@pytest.mark.pure_python  # sets data.ENTRY_BYTES_FROM, counts data.FetchHandler._full_as_bytes
def test_the_byte_path_is_taken(monkeypatch) -> None:
    taken: list[int] = []
    real = data.FetchHandler._full_as_bytes
    monkeypatch.setattr(data.FetchHandler, "_full_as_bytes", lambda *a: taken.append(1) or real(*a))
    monkeypatch.setattr(data, "ENTRY_BYTES_FROM", 0)
    session, io, _sink = _session([OK], auto_turns=True)
    session.client_data(fetch(12, SCENARIOS["some denied"], -1))
    assert taken and io.upstream
