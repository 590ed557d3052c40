"""Issue 20: DeleteTopics, DescribeConfigs, OffsetFetch (v8+, groups batched) and DeleteGroups
whose every entry is denied are answered with the entries rendered as bytes from one built
entry (build.py `NamedEntry`), not built and encoded by kio one by one.

* The answer is byte for byte the one built entry by entry with the handlers' own builders
  (the old path), at every version, names repeated and UTF-8 ones included.
* At the size limit a constant number of result entities is built (before: one per entry).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from aclgate.protocol import codec
from aclgate.protocol.enforce import base
from aclgate.protocol.enforce.admin import DeleteTopicsHandler
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.configs import _describe_error
from aclgate.protocol.enforce.groups import OffsetFetchHandler
from aclgate.protocol.enforce.table import request_limits
from aclgate.protocol.versions import response_class, response_module
from bench.loop_stall import entries_at_limit
from tests.fixtures.rawclient import module, request_entity
from tests.protocol.test_denied_entries_as_bytes import _counting, _not_rendered
from tests.protocol.test_request_limits import _session

NAMES = ("t0", "t1", "t0", "ünïcode-名前", "x" * 200)
ZERO = uuid.UUID(int=0)
SECOND = timedelta(seconds=1)


def _answer(frame: bytes) -> bytes:
    session, io = _session([])
    session.client_data(frame)
    assert io.closed is None and not io.upstream
    return bytes(io.client)


def _expected(key: int, version: int, request: Any, **array: Sequence[Any]) -> bytes:
    """The old path's answer: the response built around `array`'s entries, built one by one."""
    body = build(response_class(key, version), ErrorCode.none, request, None, array)
    return codec.encode_response(7, body)


def delete_topics(version: int, names: Sequence[str | None]) -> Any:
    if version < 6:
        return request_entity(20, version, topic_names=tuple(names), timeout=SECOND)
    m = module(20, version)
    topics = tuple(m.DeleteTopicState(name=n, topic_id=ZERO) for n in names)
    return request_entity(20, version, topics=topics, timeout=SECOND)


@pytest.mark.parametrize("version", range(1, 7))
def test_denied_delete_topics_answer_is_the_one_built_entry_by_entry(version):
    names: list[str | None] = [*NAMES, "t2"] + ([None] if version >= 6 else [])
    request = delete_topics(version, names)
    mod = response_module(20, version)
    h = DeleteTopicsHandler
    responses = [
        *([h._invalid(mod, None, None, "Neither topic name nor id were specified.")]
          if version >= 6 else []),
        h._invalid(mod, "t0", None, "Duplicate topic name."),
        *(h._result(mod, n, None) for n in ("t1", "ünïcode-名前", "x" * 200, "t2")),
    ]  # fmt: skip
    expected = _expected(20, version, request, responses=tuple(responses))
    assert _answer(codec.encode_request(7, request)) == expected


def describe_configs(version: int, names: Sequence[str]) -> Any:
    m = module(32, version)
    resources = tuple(
        m.DescribeConfigsResource(
            resource_type=(2, 32)[i % 2], resource_name=n, configuration_keys=None
        )
        for i, n in enumerate(names)
    )
    extra = {"include_documentation": False} if version >= 3 else {}
    return request_entity(32, version, resources=resources, include_synonyms=False, **extra)


@pytest.mark.parametrize("version", range(1, 5))
def test_denied_describe_configs_answer_is_the_one_built_entry_by_entry(version):
    request = describe_configs(version, NAMES)
    mod = response_module(32, version)
    code = {2: ErrorCode.topic_authorization_failed, 32: ErrorCode.group_authorization_failed}
    results = tuple(_describe_error(mod, r, code[r.resource_type]) for r in request.resources)
    assert _answer(codec.encode_request(7, request)) == _expected(
        32, version, request, results=results
    )


def offset_fetch(version: int, names: Sequence[str]) -> Any:
    m = module(9, version)
    topic = m.OffsetFetchRequestTopics
    topics = (topic(name="a", partition_indexes=(0, 1)),) if version < 10 else None
    extra = {"member_id": None, "member_epoch": -1} if version >= 9 else {}
    groups = tuple(
        m.OffsetFetchRequestGroup(group_id=n, topics=topics if i % 2 else None, **extra)
        for i, n in enumerate(names)
    )
    return request_entity(9, version, groups=groups, require_stable=False)


@pytest.mark.parametrize("version", range(8, 11))
def test_denied_offset_fetch_groups_answer_is_the_one_built_entry_by_entry(version):
    request = offset_fetch(version, NAMES)
    mod = response_module(9, version)
    groups = tuple(OffsetFetchHandler._group_error(mod, n) for n in NAMES)
    assert _answer(codec.encode_request(7, request)) == _expected(
        9, version, request, groups=groups
    )


@pytest.mark.parametrize("version", range(0, 3))
def test_denied_delete_groups_answer_is_the_one_built_entry_by_entry(version, monkeypatch):
    frame = codec.encode_request(7, request_entity(42, version, groups_names=NAMES))
    now = _answer(frame)
    monkeypatch.setattr(base.PerEntry, "denied_items", lambda *_: None)  # entry by entry
    monkeypatch.setattr(base.PerEntry, "rendering", _not_rendered)
    assert now == _answer(frame)


def _frame(make: Callable[[int, Sequence[str]], Any], version: int) -> Callable[[int], bytes]:
    return lambda count: codec.encode_request(7, make(version, [f"d{i:09d}" for i in range(count)]))


AT_LIMIT = {
    "delete_topics": (20, 6, _frame(delete_topics, 6), "DeletableTopicResult", "responses"),
    "describe_configs": (32, 4, _frame(describe_configs, 4), "DescribeConfigsResult", "results"),
    "offset_fetch": (9, 9, _frame(offset_fetch, 9), "OffsetFetchResponseGroup", "groups"),
    "delete_groups": (
        42, 2, lambda n: codec.encode_request(
            7, request_entity(42, 2, groups_names=tuple(f"d{i:09d}" for i in range(n)))
        ), "DeletableGroupResult", "results",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(AT_LIMIT))
def test_denied_at_the_limit_builds_no_entry_per_name(name, monkeypatch):
    """Before: one result entity built (and kio-encoded) per denied name: 37,000-95,000 at
    1 MiB, 0.5-1 s of CPU."""
    key, version, make, entry, array = AT_LIMIT[name]
    count = entries_at_limit(make, key)
    assert count > 5_000
    built = _counting(monkeypatch, getattr(response_module(key, version), entry))
    answer = codec.decode_response(_answer(make(count)), key, version)
    assert len(getattr(answer, array)) == count
    assert built[0] <= 2


def test_admin_apis_naming_entries_one_by_one_are_limited_to_256_kib():
    """Their denied entries cost decoding and one authorization each (DeleteTopics two):
    260-460 ms of CPU at 1 MiB; 256 KiB holds some 9,000 names. OffsetFetch, whose batched
    groups a monitoring tool may send by the thousand, keeps 1 MiB."""
    limits = request_limits()
    assert {limits[k] for k in (20, 32, 42)} == {256 * 1024}
    assert limits[9] == 1024 * 1024
