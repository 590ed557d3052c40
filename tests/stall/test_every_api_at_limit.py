"""Issue 20: every API the proxy serves, at its request size limit, with its largest array
filled with distinct entries a principal without any right names: the longest turn of the
event loop the proxy's session spends on it (CPU time, in process, no sockets: what one
client's request costs every other client of the worker, before the IO layer's own cost).

This sweep found the requests the loop-stall harness (test_loop_stall.py, through `aclgate
serve`) did not cover: 0.1-1.6 s for DescribeGroups and its KIP-848 siblings, FindCoordinator,
DescribeTopicPartitions, DescribeTransactions, the config APIs, CreatePartitions, Fetch with
many denied topics, and more (docs/design.md, "Deciding a large request a slice per turn").
The budget here is in process, so lower than the harness's 100 ms: the IO layer, the audit
and the machine's load come on top.
"""

from __future__ import annotations

import dataclasses
import gc
import typing
from collections.abc import Iterator
from typing import Any

import pytest

from aclgate.protocol import codec
from aclgate.protocol.enforce.build import _entity_item, _field_info, _unwrap_optional
from aclgate.protocol.enforce.table import TABLE, request_limits
from aclgate.protocol.versions import request_class
from bench.loop_stall import in_process_ms
from tests.protocol.test_denied_entries_as_bytes import _sample

#: CPU time of the longest loop turn, in process (ms)
BUDGET_MS = 80.0
#: APIs still past it: what was measured and why (xfail strict: fixing one says so)
OVER_BUDGET: dict[str, str] = {}
#: the size a request without a limit of its own is measured at (Produce, SyncGroup)
UNLIMITED_AT = 1 << 20
#: the fields entries are named by
NAME_FIELDS = (
    "name",
    "topic",
    "group_id",
    "resource_name",
    "transactional_id",
    "topic_name",
    "key",
)
MAX_ENTRIES = 300_000


def _arrays(cls: type) -> Iterator[tuple[str, Any]]:
    """(field, entry class or str) of each array of entities or strings of a request."""
    for name, tp, _meta, _default in _field_info(cls):
        base = _unwrap_optional(tp)[0]
        item = _entity_item(base)
        if item is not None:
            yield name, item
        elif typing.get_origin(base) is tuple:
            element = typing.get_args(base)[0]
            if isinstance(element, type) and issubclass(element, str):
                yield name, str


def _floats(entity: Any) -> Any:
    """`entity` with its float64 fields (built as int 0 by `_sample`) made floats, nested."""
    if not dataclasses.is_dataclass(entity):
        return entity
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.metadata.get("kafka_type") == "float64":
            changes[f.name] = value if isinstance(value, float) else 0.0
        elif isinstance(value, tuple):
            changes[f.name] = tuple(_floats(v) for v in value)
        elif dataclasses.is_dataclass(value):
            changes[f.name] = _floats(value)
    return dataclasses.replace(entity, **changes)


def _entry(item: Any, i: int) -> Any:
    if item is str:
        return f"n{i:09d}"
    entry = _floats(_sample(item, None))
    named = [f.name for f in dataclasses.fields(item) if f.name in NAME_FIELDS]
    return dataclasses.replace(entry, **{named[0]: f"n{i:09d}"}) if named else entry


def _cases() -> Iterator[Any]:
    limits = request_limits()
    for key, row in TABLE.items():
        version = row.versions[1]
        cls = request_class(int(key), version)
        for field, item in _arrays(cls):
            name = f"{int(key)}v{version}-{field}"
            marks = (
                [pytest.mark.xfail(strict=True, reason=OVER_BUDGET[name])]
                if name in OVER_BUDGET
                else []
            )
            yield pytest.param(
                int(key),
                version,
                field,
                item,
                limits.get(int(key), UNLIMITED_AT),
                id=name,
                marks=marks,
            )


def _frame(api_key: int, version: int, field: str, item: Any, limit: int) -> tuple[bytes, int]:
    base = _sample(request_class(api_key, version), None)

    def make(n: int) -> bytes:
        entries = tuple(_entry(item, i) for i in range(n))
        return codec.encode_request(1, dataclasses.replace(base, **{field: entries}), "c")

    one, two = len(make(1)), len(make(2))
    count = min(MAX_ENTRIES, max(1, (limit - one) // max(two - one, 1)))
    return make(count), count


@pytest.fixture(autouse=True)
def _collector_as_serve_has_it() -> Iterator[None]:
    """The collector set as a proxy process sets it (proxy/process/gctune.py): this test
    process's heap (every test's objects) would make each collection cost what a proxy's
    does not."""
    threshold = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 50)
    yield
    gc.set_threshold(*threshold)
    gc.unfreeze()


@pytest.mark.parametrize("api_key,version,field,item,limit", list(_cases()))
def test_no_request_at_its_limit_holds_the_loop_past_the_budget(
    api_key, version, field, item, limit
) -> None:
    frame, count = _frame(api_key, version, field, item, limit)
    assert len(frame) - 4 <= limit
    # the longest turn, best of 4 runs: under `make test` the other xdist worker's tests share
    # the 2 cores, and CPU time grows with them (a clean clone's CI run measured DescribeGroups
    # v6 at 81.6 ms with 2 runs; 33-39 ms here alone)
    best, _answer = in_process_ms(frame, tries=4, closes=True)
    assert best <= BUDGET_MS, f"{count} entries, {len(frame)} bytes: {best:.1f} ms"
