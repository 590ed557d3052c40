"""Issue 20: a request whose entries are all denied is answered with its entries rendered as
bytes, not built and encoded one by one with kio (protocol/enforce/build.py `NamedEntry`).

* The answer is byte for byte the one kio builds entry by entry (the path kept for entries
  without a plain name), for every version of every per-entry API and for Metadata.
* A denied request at its 1 MiB limit builds a constant number of kio entries, not one per
  denied entry (counted by spying on the response entry's class; before: one per entry).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.protocol import codec
from aclgate.protocol.enforce import base, metadata
from aclgate.protocol.enforce.admin import CreateTopicsHandler
from aclgate.protocol.enforce.build import _entity_item, _field_info, _unwrap_optional, build
from aclgate.protocol.enforce.table import TABLE, request_limits
from aclgate.protocol.header import parse_request_header
from aclgate.protocol.versions import request_class, response_class, response_module
from bench.loop_stall import entries_at_limit, list_offsets_frame, metadata_frame
from tests.protocol.test_request_limits import _session

#: the per-entry APIs' `pre` resources (groups, transactional ids) allowed, topics denied
GROUPS_ALLOWED = [
    AclBinding(
        rtype,
        "*",
        PatternType.LITERAL,
        "User:ANONYMOUS",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )
    for rtype in (ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)
]
T1_ALLOWED = AclBinding(ResourceType.TOPIC, "t1", PatternType.LITERAL, "User:ANONYMOUS", "*",
                        AclOperation.ALL, AclPermissionType.ALLOW)  # fmt: skip
POLICIES = {
    "nothing allowed": [],
    "topics denied": GROUPS_ALLOWED,
    "one topic allowed": [*GROUPS_ALLOWED, T1_ALLOWED],
}
NAMES = ("t0", "__consumer_offsets", "t1", "t0", "ünïcode-topic")
#: the fields a per-entry request names its resource in (by id: tests/enforce)
NAME_FIELDS = {"name", "topic"}


def _sample(cls: type, name: str | None) -> Any:
    """An entity of `cls` with two entries in each nested array and `name` as its name."""
    overrides: dict[str, Any] = {}
    for field, tp, _meta, _default in _field_info(cls):
        base_tp, _nullable = _unwrap_optional(tp)
        item = _entity_item(base_tp)
        if item is not None:
            overrides[field] = (_sample(item, None), _sample(item, None))
        elif typing.get_origin(base_tp) is tuple:
            (element, *_rest) = typing.get_args(base_tp)
            if isinstance(element, type) and issubclass(element, int):
                overrides[field] = (element(0), element(1))
    named = [f for f, *_ in _field_info(cls) if f in NAME_FIELDS]
    if name is not None and named:
        overrides[named[0]] = name
    entity = build(cls, ErrorCode.none, overrides=overrides)
    # strings of kio's own str types (group ids, member ids) that `build` leaves None
    unset = {
        f: "g"
        for f, tp, *_ in _field_info(cls)
        if getattr(entity, f) is None and not _unwrap_optional(tp)[1]
    }
    return dataclasses.replace(entity, **unset)


def _item(api_key: int, version: int, handler: base.PerEntry) -> type | None:
    """The class of the request's per-entry array (None: plain names)."""
    array = next(
        tp for f, tp, *_ in _field_info(request_class(api_key, version)) if f == handler.array
    )
    return _entity_item(_unwrap_optional(array)[0])


def _cases() -> Iterator[tuple[int, int, base.PerEntry]]:
    """Every version whose entries are named (by-id versions resolve ids: tests/enforce)."""
    for key, row in TABLE.items():
        if isinstance(row.handler, base.PerEntry):
            for version in range(row.versions[0], row.versions[1] + 1):
                item = _item(int(key), version, row.handler)
                if item is None or NAME_FIELDS & {f.name for f in dataclasses.fields(item)}:
                    yield int(key), version, row.handler


def _request(api_key: int, version: int, handler: base.PerEntry) -> bytes:
    cls = request_class(api_key, version)
    item = _item(api_key, version, handler)
    entries = tuple(_sample(item, n) if item is not None else n for n in NAMES)
    request = dataclasses.replace(_sample(cls, None), **{handler.array: entries})
    return codec.encode_request(11, request)


def _not_rendered(*_: Any) -> Iterator[None]:
    """PerEntry.rendering that renders nothing: the answer is built entry by entry."""
    return None
    yield


def _answers(
    frame: bytes, acls: list[AclBinding], patch: pytest.MonkeyPatch, handler: base.PerEntry
) -> list[bytes]:
    """(the answer now, the answer of the kio path entry by entry); what is forwarded is
    answered by a broker that mirrors it with no error."""
    out = []
    for kio_path in (False, True):
        with patch.context() as m:
            if kio_path:
                m.setattr(base.PerEntry, "denied_items", lambda *_: None)
                m.setattr(base.PerEntry, "rendering", _not_rendered)
            session, io = _session(acls)
            session.client_data(frame)
            if io.upstream:
                forwarded = bytes(io.upstream)
                header = parse_request_header(memoryview(forwarded))
                request = codec.decode_request(memoryview(forwarded), header)
                cls = response_class(header.api_key, header.api_version)
                mirrored = build(cls, ErrorCode.none, request, handler.aliases)
                broker = codec.encode_response(header.correlation_id, mirrored)
                session.upstream_data(broker)
            assert io.closed is None
            out.append(bytes(io.client))
    return out


def _with_policies() -> Iterator[Any]:
    """Every case under every policy that denies some of its entries: a per-group API
    (DescribeGroups) is denied only under "nothing allowed", the other two allow every group."""
    for key, version, handler in _cases():
        for policy in POLICIES:
            if handler.resource_type != ResourceType.GROUP or policy == "nothing allowed":
                yield pytest.param(key, version, handler, policy, id=f"{key}v{version}-{policy}")


@pytest.mark.parametrize("api_key,version,handler,policy", list(_with_policies()))
def test_denied_per_entry_answer_is_the_one_kio_builds(api_key, version, handler, policy):
    now, entry_by_entry = _answers(
        _request(api_key, version, handler), POLICIES[policy], pytest.MonkeyPatch(), handler
    )
    assert now == entry_by_entry


GROUP_T1_ALLOWED = AclBinding(ResourceType.GROUP, "t1", PatternType.LITERAL, "User:ANONYMOUS",
                              "*", AclOperation.ALL, AclPermissionType.ALLOW)  # fmt: skip


@pytest.mark.parametrize(
    "api_key,version,handler",
    [
        pytest.param(k, v, h, id=f"{k}v{v}")
        for k, v, h in _cases()
        if h.resource_type == ResourceType.GROUP
    ],
)
def test_denied_groups_beside_an_allowed_one_are_the_entries_kio_builds(api_key, version, handler):
    """The describe-group APIs with one group allowed: the broker's answer for it merged with
    the denied groups' entries rendered as bytes (base.splice_marked), as kio builds them."""
    frame = _request(api_key, version, handler)
    out = []
    for kio_path in (False, True):
        with pytest.MonkeyPatch().context() as m:
            if kio_path:
                m.setattr(base.PerEntry, "rendering", _not_rendered)
            session, io = _session([GROUP_T1_ALLOWED])
            session.client_data(frame)
            forwarded = bytes(io.upstream)
            header = parse_request_header(memoryview(forwarded))
            item = base._array_item(response_class(api_key, version), handler.response_array)
            entry = dataclasses.replace(
                _sample(item, None), **{handler.entry_key: "t1", "error_code": ErrorCode.none}
            )
            body = dataclasses.replace(
                _sample(response_class(api_key, version), None),
                **{handler.response_array: (entry,)},
            )
            session.upstream_data(codec.encode_response(header.correlation_id, body))
            out.append(bytes(io.client))
    assert out[0] == out[1]
    entries = getattr(codec.decode_response(out[0], api_key, version), handler.response_array)
    assert [getattr(e, handler.entry_key) for e in entries].count("t1") == 1
    assert len(entries) == len(NAMES)


def _metadata(version: int, names: tuple[str, ...]) -> bytes:
    from tests.fixtures.rawclient import module, request_entity

    topic = module(3, version).MetadataRequestTopic
    fields = {"topic_id": None} if version >= 10 else {}
    topics = tuple(topic(name=n, **fields) for n in names)
    extra = {"allow_auto_topic_creation": False} if version >= 4 else {}
    if version >= 8:
        extra["include_topic_authorized_operations"] = False
    if 8 <= version <= 10:
        extra["include_cluster_authorized_operations"] = False
    return codec.encode_request(11, request_entity(3, version, topics=topics, **extra))


@pytest.mark.parametrize("seen", [False, True], ids=["forwarded", "answered alone"])
@pytest.mark.parametrize("version", range(1, 14))
def test_denied_metadata_topics_are_the_entries_kio_builds(version, seen, monkeypatch):
    """Named denied topics, an internal one among them: each entry as `_topic_error_entity`
    builds and kio encodes it, whether the proxy answers alone (a cluster view) or appends
    them to the broker's answer (no view yet: an empty request is forwarded)."""
    session, io = _session([])
    if seen:
        session.context.policy.cluster_view.racks = {1: None}
    session.client_data(_metadata(version, NAMES))
    mod = response_module(3, version)
    expected = [
        codec.encode_entity(
            metadata._topic_error_entity(mod, ErrorCode.topic_authorization_failed, n, None)
        )
        for n in NAMES
    ]
    if not seen:  # the broker answers the empty request the proxy forwarded
        correlation = int.from_bytes(io.upstream[8:12], "big")
        empty = build(response_module(3, version).MetadataResponse, ErrorCode.none)
        session.upstream_data(codec.encode_response(correlation, empty))
    assert io.closed is None
    body = bytes(io.client)
    assert b"".join(expected) in body
    decoded = codec.decode_response(body, 3, version)
    assert [t.name for t in decoded.topics] == list(NAMES)


def _counting(monkeypatch: pytest.MonkeyPatch, cls: type) -> list[int]:
    """How many `cls` are built from now on."""
    built = [0]
    real: Callable[..., None] = cls.__init__  # type: ignore[misc]

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        built[0] += 1
        real(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", counted)
    return built


def test_denied_list_offsets_at_its_limit_builds_no_entry_per_topic(monkeypatch):
    """Before: one ListOffsetsTopicResponse (and one per partition) built and encoded per
    denied topic, 34,951 of them, about 1 s of loop time; now a template per shape."""
    n = entries_at_limit(list_offsets_frame, 2)
    frame = list_offsets_frame(n)
    assert len(frame) - 4 <= request_limits()[2]
    built = _counting(monkeypatch, response_module(2, 9).ListOffsetsTopicResponse)
    session, io = _session([])
    session.client_data(frame)
    answer = codec.decode_response(bytes(io.client), 2, 9)
    assert len(answer.topics) == n
    assert {(t.partitions[0].error_code, len(t.partitions)) for t in answer.topics} == {
        (ErrorCode.topic_authorization_failed, 1)
    }
    assert answer.topics[-1].name == f"d{n - 1:09d}"
    assert built[0] <= 2  # before: n


def test_denied_metadata_at_its_limit_builds_no_entry_per_topic(monkeypatch):
    """Before: one MetadataResponseTopic built and encoded per denied topic (37,448)."""
    n = entries_at_limit(metadata_frame, 3)
    # cold caches, whichever test ran before (alone, this test built 3; after others, 1)
    metadata._named_topic_error.cache_clear()
    metadata._topic_error_template.cache_clear()
    built = _counting(monkeypatch, response_module(3, 12).MetadataResponseTopic)
    session, io = _session([])
    session.context.policy.cluster_view.racks = {1: None}
    session.client_data(metadata_frame(n))
    answer = codec.decode_response(bytes(io.client), 3, 12)
    assert len(answer.topics) == n
    assert {t.error_code for t in answer.topics} == {ErrorCode.topic_authorization_failed}
    # the template, the named entry made from it, the answer's marked entry; before: n
    assert built[0] == 3


def test_denied_metadata_at_its_limit_is_answered_without_decoding_it(monkeypatch):
    """Every named topic denied and the cluster seen: answered from the peeked names
    (before: the 37,448 topics decoded by kio, ~30-45 ms of the loop, to be answered)."""
    decoded: list[int] = []

    def spy(frame: Any, header: Any) -> Any:
        decoded.append(header.api_key)
        return codec.decode_request(frame, header)

    monkeypatch.setattr(base, "decode_request", spy)
    monkeypatch.setattr(metadata, "decode_request", spy)
    session, io = _session([])
    session.context.policy.cluster_view.racks = {1: None}
    session.client_data(metadata_frame(entries_at_limit(metadata_frame, 3)))
    assert decoded == []
    assert io.closed is None and io.client


@pytest.mark.parametrize("count", [1, 126, 127, 300])
def test_peeked_denied_metadata_is_answered_as_the_decoded_path(count, monkeypatch):
    """The answer from peeked names is the full path's, byte for byte (counts of one and
    two varint bytes)."""
    frame = metadata_frame(count)
    out = []
    for peek in (True, False):
        with monkeypatch.context() as m:
            if not peek:
                m.setattr(metadata, "peek_metadata", lambda *_: None)
            session, io = _session([])
            session.context.policy.cluster_view.racks = {1: None}
            session.client_data(frame)
            out.append(bytes(io.client))
    assert out[0] == out[1] and out[0]


def _create_topics(version: int, names: Sequence[str]) -> bytes:
    from kio.static.primitive import i32Timedelta

    from tests.fixtures.rawclient import module, request_entity

    topic = module(19, version).CreatableTopic
    topics = tuple(
        topic(name=n, num_partitions=1, replication_factor=1, assignments=(), configs=())
        for n in names
    )
    timeout = i32Timedelta.parse(timedelta(seconds=1))
    return codec.encode_request(
        11, request_entity(19, version, topics=topics, timeout=timeout, validate_only=False)
    )


@pytest.mark.parametrize("version", range(2, 8))
def test_denied_create_topics_answer_is_the_one_kio_builds(version):
    """Every topic refused (duplicates and __cluster_metadata first, as Kafka orders them):
    the results kio builds and encodes one by one."""
    session, io = _session([])
    session.client_data(_create_topics(version, ("t0", "t1", "t0", "__cluster_metadata", "ü")))
    mod = response_module(19, version)
    result = CreateTopicsHandler._result
    topics = (
        result(mod, "t0", ErrorCode.invalid_request, "Duplicate topic name."),
        result(mod, "__cluster_metadata", ErrorCode.invalid_request,
               "Creation of internal topic __cluster_metadata is prohibited."),
        result(mod, "t1", ErrorCode.topic_authorization_failed, "Authorization failed."),
        result(mod, "ü", ErrorCode.topic_authorization_failed, "Authorization failed."),
    )  # fmt: skip
    body = build(response_class(19, version), ErrorCode.none, overrides={"topics": topics})
    assert bytes(io.client) == codec.encode_response(11, body)


def test_denied_create_topics_at_its_limit_builds_no_result_per_topic(monkeypatch):
    """Before: one CreatableTopicResult built per refused topic, and the request mirrored
    once more (52,426 topics: ~760 ms in-process at 1 MiB; CreateTopics' limit is now
    256 KiB, 13,000 topics)."""
    count = 13_000
    frame = _create_topics(7, [f"d{i:09d}" for i in range(count)])
    assert len(frame) - 4 <= request_limits()[19]
    built = _counting(monkeypatch, response_module(19, 7).CreatableTopicResult)
    session, io = _session([])
    session.client_data(frame)
    answer = codec.decode_response(bytes(io.client), 19, 7)
    assert len(answer.topics) == count
    assert built[0] <= 2  # before: 13,000


def test_one_allowed_topic_does_not_bring_back_an_entry_per_denied_one(monkeypatch):
    """A client allowed one topic names it among 34,950 denied ones: the denied entries are
    spliced into the broker's answer as bytes (before: one kio entry built per denied topic
    and the whole answer encoded by kio)."""
    n = entries_at_limit(list_offsets_frame, 2)
    frame = bytearray(list_offsets_frame(n))
    first = b"d000000000"
    frame[frame.index(first) : frame.index(first) + len(first)] = b"t000000001"
    allowed = AclBinding(ResourceType.TOPIC, "t000000001", PatternType.LITERAL,
                         "User:ANONYMOUS", "*", AclOperation.ALL, AclPermissionType.ALLOW)  # fmt: skip
    built = _counting(monkeypatch, response_module(2, 9).ListOffsetsTopicResponse)
    session, io = _session([allowed])
    session.client_data(bytes(frame))
    sent = bytes(io.upstream)
    forwarded = codec.decode_request(memoryview(sent), parse_request_header(memoryview(sent)))
    assert [t.name for t in forwarded.topics] == ["t000000001"]
    broker = build(response_class(2, 9), ErrorCode.none, forwarded)
    session.upstream_data(codec.encode_response(int.from_bytes(io.upstream[8:12], "big"), broker))
    answer = codec.decode_response(bytes(io.client), 2, 9)
    assert [t.name for t in answer.topics[:2]] == ["t000000001", "d000000001"]
    assert len(answer.topics) == n
    assert built[0] <= 4  # before: n + 2
