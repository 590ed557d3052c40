"""Issue 20: cluster-only APIs whose denied answer mirrors the request's nested entries
(ElectLeaders, AlterPartitionReassignments, AlterReplicaLogDirs, AlterClientQuotas, the SCRAM
APIs, ...) are decided on the header and answered with bytes rendered from the request's bytes
(protocol/enforce/denied_bytes.py), never decoding it with kio.

* The answer is byte for byte the one the old path built with kio (`build` on the decoded
  request, and the two hand-written builders it replaces, kept here as the oracle), for every
  version of every such API, over random requests: empty and null arrays, names of every
  length (UTF-8 included), duplicated users, unknown tagged fields.
* A body the walk cannot follow is closed as malformed exactly when kio's decoder refused it
  (the old path's close), over truncated and garbled bodies; otherwise the answers are equal.
* A denied request at its size limit is answered without the body being decoded (spied), and
  builds no kio entity per entry.
* An allowed one is decoded (a malformed one still closed) and forwarded unchanged, its cluster
  check made once.
"""

from __future__ import annotations

import dataclasses
import random
import struct
import types
import typing
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
)

from aclgate.authz.model import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.protocol import codec
from aclgate.protocol.enforce import base
from aclgate.protocol.enforce.base import Whole, error_body
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.denied_bytes import MirroredCheck
from aclgate.protocol.enforce.table import TABLE, request_limits
from aclgate.protocol.header import MalformedRequest, parse_request_header
from aclgate.protocol.versions import KIO_RANGES, request_class, response_module
from tests.protocol.test_request_limits import _session

DENIED = ErrorCode.cluster_authorization_failed
MIRRORED = {
    int(key): row for key, row in TABLE.items() if isinstance(row.header_check, MirroredCheck)
}
VERSIONS = [
    (key, v)
    for key, row in MIRRORED.items()
    for v in range(row.versions[0], min(row.versions[1], KIO_RANGES[key][1]) + 1)
]


# ------------------------------------------------------------------- the old path, as oracle


def _alter_replica_log_dirs_error(header: Any, request: Any, code: ErrorCode) -> Any:
    """protocol/enforce/wholebuilt.py at cf7ac14 (removed by this change)."""
    mod = response_module(header.api_key, header.api_version)
    results = tuple(
        build(
            mod.AlterReplicaLogDirTopicResult,
            code,
            None,
            None,
            {
                "topic_name": topic.name,
                "partitions": tuple(
                    build(
                        mod.AlterReplicaLogDirPartitionResult,
                        code,
                        None,
                        None,
                        {"partition_index": p},
                    )
                    for p in topic.partitions
                ),
            },
        )
        for d in request.dirs
        for topic in d.topics
    )
    return error_body(header, request, code, results=results)


def _alter_user_scram_credentials_error(header: Any, request: Any, code: ErrorCode) -> Any:
    """protocol/enforce/wholebuilt.py at cf7ac14 (removed by this change)."""
    mod = response_module(header.api_key, header.api_version)
    users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
    results = tuple(
        build(mod.AlterUserScramCredentialsResult, code, None, None, {"user": u}) for u in users
    )
    return error_body(header, request, code, results=results)


#: the old rows' `Whole` options (table.py at cf7ac14)
OLD_WHOLE: dict[int, dict[str, Any]] = {
    35: {"overrides": {"results": ()}},
    43: {
        "aliases": {
            "replica_election_results": "topic_partitions",
            "partition_result": "partitions",
        }
    },
    45: {"aliases": {"responses": "topics"}},
    50: {"aliases": {"results": "users"}},
}
OLD_BUILT = {34: _alter_replica_log_dirs_error, 51: _alter_user_scram_credentials_error}


def old_answer(frame: bytes) -> bytes | None:
    """The old path's denied answer to `frame`, or None when it closed (kio refused it)."""
    header = parse_request_header(frame)
    try:
        request = codec.decode_request(frame, header)
    except MalformedRequest:
        return None
    builder = OLD_BUILT.get(header.api_key)
    if builder is not None:
        body = builder(header, request, DENIED)
    else:
        old = Whole((), **OLD_WHOLE.get(header.api_key, {}))
        body = error_body(header, request, DENIED, old.aliases, **old.overrides)
    return codec.encode_response(header.correlation_id, body)


def new_answer(frame: bytes) -> bytes | None:
    """The proxy's answer to `frame` from a principal with no right: None when closed."""
    session, io = _session([])
    session.client_data(frame)
    if io.closed is not None:
        assert io.closed[1] == "malformed_request", io.closed
        assert io.client == b""
        return None
    return bytes(io.client)


# ------------------------------------------------------------------ random requests


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


NAMES = ["", "t", "topic-0", "ünïcode-名前", "x" * 200, "dup", "dup", "a.b_c-d"]


def _value(f: dataclasses.Field[Any], rng: random.Random, depth: int) -> Any:
    kind = classify_field(f)
    kafka_type = f.metadata.get("kafka_type")
    nullable = _is_union(f.type)
    if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
        if nullable and rng.random() < 0.2:
            return None
        n = rng.choice([0, 1, 1, 2, 3, 5]) if depth < 3 else rng.choice([0, 1])
        if isinstance(kind, EntityTupleField):
            return tuple(random_entity(kind.type_, rng, depth + 1) for _ in range(n))
        return tuple(_scalar(kafka_type, rng, False) for _ in range(n))
    if isinstance(kind, EntityField):
        return random_entity(kind.type_, rng, depth + 1)
    return _scalar(kafka_type, rng, nullable)


def _scalar(kafka_type: str | None, rng: random.Random, nullable: bool) -> Any:
    if nullable and rng.random() < 0.25:
        return None
    match kafka_type:
        case "string":
            return rng.choice(NAMES)
        case "bytes":
            return rng.randbytes(rng.choice([0, 3, 40]))
        case "bool":
            return rng.random() < 0.5
        case "int8":
            return rng.randint(-128, 127)
        case "int16":
            return rng.randint(-(2**15), 2**15 - 1)
        case "int32":
            return rng.choice([0, 1, 7, -1, 2**31 - 1, rng.randint(-(2**31), 2**31 - 1)])
        case "int64":
            return rng.randint(-(2**63), 2**63 - 1)
        case "float64":
            return rng.choice([0.0, 1.5, -3.25e10])
        case "uuid":
            return uuid.UUID(int=rng.getrandbits(128))
        case "timedelta_i32" | "timedelta_i64":
            return timedelta(milliseconds=rng.randint(0, 60_000))
    raise AssertionError(kafka_type)


def random_entity(cls: type, rng: random.Random, depth: int = 0) -> Any:
    return cls(**{f.name: _value(f, rng, depth) for f in dataclasses.fields(cls)})


def _with_unknown_tag(frame: bytes) -> bytes:
    """A flexible request's last byte (its top-level tagged fields, none) replaced by one
    unknown tag (Kafka skips it; kio's decoder refuses it)."""
    assert frame[-1] == 0
    body = frame[4:-1] + bytes([1, 42, 3]) + b"abc"
    return struct.pack(">i", len(body)) + body


def random_frames(key: int, version: int, count: int, seed: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    cls = request_class(key, version)
    for i in range(count):
        frame = codec.encode_request(i + 1, random_entity(cls, rng), "c")
        yield _with_unknown_tag(frame) if cls.__flexible__ and i % 4 == 3 else frame


# ------------------------------------------------------------------------------ the tests


@pytest.mark.parametrize("key, version", VERSIONS, ids=[f"{k}v{v}" for k, v in VERSIONS])
def test_denied_answer_is_the_one_kio_built(key, version):
    frames = list(random_frames(key, version, 60, seed=key * 100 + version))
    for i, frame in enumerate(frames):
        expected = old_answer(frame)
        # an unknown tag: kio's decoder refuses it, so the proxy closes, as before
        assert (expected is None) == (request_class(key, version).__flexible__ and i % 4 == 3)
        assert new_answer(frame) == expected


@pytest.mark.parametrize("key, version", VERSIONS, ids=[f"{k}v{v}" for k, v in VERSIONS])
def test_garbled_body_closed_exactly_when_kio_refused_it(key, version):
    """Truncated bodies, flipped bytes and raised counts: closed as malformed where the old
    decoder refused the body, otherwise answered as the old path answered."""
    rng = random.Random(key * 7 + version)
    closed = answered = 0
    for frame in random_frames(key, version, 25, seed=key + version):
        header = parse_request_header(frame)
        for _ in range(12):
            body = bytearray(frame[4:])
            start = header.body_offset - 4
            kind = rng.randrange(3)
            if kind == 0 and len(body) > start:
                body = body[: rng.randrange(start, len(body))]
            elif len(body) > start:
                at = rng.randrange(start, len(body))
                body[at] = rng.choice([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, rng.randrange(256)])
            garbled = struct.pack(">i", len(body)) + bytes(body)
            expected = old_answer(garbled)
            assert new_answer(garbled) == expected, garbled.hex()
            closed += expected is None
            answered += expected is not None
    assert closed and answered  # both outcomes were exercised


ALTER_CLUSTER = [
    AclBinding(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, "User:ANONYMOUS", "*",
               op, AclPermissionType.ALLOW)
    for op in (AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.ALTER_CONFIGS,
               AclOperation.DESCRIBE_CONFIGS)
]  # fmt: skip


@pytest.fixture
def decodes(monkeypatch) -> list[int]:
    """The API keys of every request body decoded with kio from now on."""
    seen: list[int] = []
    real = codec.decode_request

    def spy(frame: Any, header: Any) -> Any:
        seen.append(header.api_key)
        return real(frame, header)

    monkeypatch.setattr(base, "decode_request", spy)
    return seen


def _elect_leaders_at_limit(topics: int, partitions: int) -> bytes:
    """ElectLeaders v2 of `topics` topics of `partitions` partitions each, within 1 MiB."""
    from tests.fixtures.rawclient import module, request_entity

    m = module(43, 2)
    body = request_entity(
        43,
        2,
        election_type=0,
        timeout=timedelta(seconds=1),
        topic_partitions=tuple(
            m.TopicPartitions(topic=f"t{i:06d}", partitions=tuple(range(partitions)))
            for i in range(topics)
        ),
    )
    frame = codec.encode_request(1, body, "c")
    assert len(frame) - 4 <= request_limits()[43]
    return frame


def test_denied_at_the_limit_is_answered_unread_building_no_entry(decodes, monkeypatch):
    """Before: the body decoded and one kio PartitionResult built per partition (262,000)."""
    frame = _elect_leaders_at_limit(1, 262_000)
    built: list[int] = []
    mod = response_module(43, 2)
    real = mod.PartitionResult.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(mod.PartitionResult, "__init__", counting)
    session, io = _session([])
    session.client_data(frame)
    assert io.closed is None
    assert decodes == []
    assert len(built) <= 2  # the shape's compilation, once per version
    answer = codec.decode_response(bytes(io.client), 43, 2)
    (topic,) = answer.replica_election_results
    assert len(topic.partition_result) == 262_000
    assert topic.partition_result[-1].partition_id == 261_999
    assert {p.error_code for p in topic.partition_result} == {DENIED}


@pytest.mark.pure_python  # `decodes` counts calls through base.decode_request
@pytest.mark.parametrize("key", sorted(MIRRORED))
def test_allowed_is_decoded_once_and_forwarded_unchanged(key, decodes):
    version = MIRRORED[key].versions[1]
    (frame,) = random_frames(key, version, 1, seed=key)
    session, io = _session(ALTER_CLUSTER)
    session.client_data(frame)
    assert io.closed is None and io.client == b""
    assert decodes == [key]
    assert bytes(io.upstream)[8:] == frame[8:]  # the correlation id is the proxy's own


def test_allowed_malformed_is_still_closed():
    """An allowed request kio cannot decode is closed, as before (Kafka closes on it)."""
    (frame,) = random_frames(45, 1, 1, seed=1)
    body = frame[4:] + b""
    body = body[: parse_request_header(frame).body_offset - 4 + 6]  # cut inside the topics
    session, io = _session(ALTER_CLUSTER)
    session.client_data(struct.pack(">i", len(body)) + body)
    assert io.closed is not None and io.closed[1] == "malformed_request"
    assert io.upstream == b""


def test_quota_credential_and_feature_apis_are_limited_to_256_kib():
    """Their entries are few in real requests and cost the most to answer when denied
    (45-50 ms of CPU for 50,000-80,000 at 1 MiB): 256 KiB, as Metadata's."""
    limits = request_limits()
    assert {limits[k] for k in (48, 49, 50, 51, 57, 64, 74)} == {256 * 1024}
    assert {limits[k] for k in (35, 43, 45, 46)} == {1024 * 1024}  # partition lists
    assert limits[34] == 256 * 1024  # AlterReplicaLogDirs: topics in dirs, 88 ms at 1 MiB
