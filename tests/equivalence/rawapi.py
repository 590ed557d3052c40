"""Any Kafka request as plain data, and any answer back as comparable plain data.

The admin, share and streams scenarios send requests that no Python client library offers
(OffsetDelete, DescribeProducers, ShareGroupHeartbeat, ...). Rather than one hand-written
method per API, a step writes the request as nested dicts and lists with kio's field names,

    c.raw(61, 0, topics=[{"name": c.t("orders"), "partition_indexes": [0]}])

`build` turns that into kio's entity by reading the entity's type hints (ints become the
field's i8/i16/i32/i64, ints for durations become milliseconds, dicts become the nested
entity, a missing field takes its schema default), and `normalize` turns the answer into
JSON-able data with the harness's normalizations applied by field name, so one code path
serves every API and a scenario states only what it sends.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kio.static._phantom import PhantomMeta

#: answer fields not compared, each with the harness normalization (NORMALIZATIONS) it
#: belongs to: "messages" (message strings), "addresses" (hosts, ports, cluster and topic
#: ids, log directory paths and their sizes), "timing" (throttle times, member and producer
#: ids and epochs, timestamps, coordinator-assigned values). "timing" fields are compared in
#: an entry carrying an error (and below it): there they are Kafka's error defaults, which
#: the proxy must give too when it answers by itself.
DROPPED_FIELDS: dict[str, str] = {
    "throttle_time": "timing",
    "error_message": "messages",
    "message": "messages",
    "host": "addresses",
    "port": "addresses",
    "rack": "addresses",
    "cluster_id": "addresses",
    "topic_id": "addresses",
    "log_dir": "addresses",
    "total_bytes": "addresses",
    "usable_bytes": "addresses",
    "partition_size": "addresses",
    "member_id": "timing",
    "member_epoch": "timing",
    "group_epoch": "timing",
    "assignment_epoch": "timing",
    "heartbeat_interval": "timing",
    "client_id": "timing",
    "client_host": "timing",
    "instance_id": "timing",
    "producer_id": "timing",
    "producer_epoch": "timing",
    "last_timestamp": "timing",
    "last_sequence": "timing",
    "current_txn_start_offset": "timing",
    "coordinator_epoch": "timing",
    "transaction_start_time_ms": "timing",
    "transaction_timeout_ms": "timing",
    "transaction_start_time": "timing",
    "transaction_timeout": "timing",
    "duration_filter": "timing",
    "leader_epoch": "timing",
    "acquisition_lock_timeout": "timing",
    "acquisition_lock_timeout_ms": "timing",
    "node_endpoints": "addresses",
    "endpoints": "addresses",
    "leader_id": "addresses",
    "leader_endpoints": "addresses",
    "current_leader": "addresses",
    "subscribed_topic_regex": "timing",
    "active_tasks": "timing",
    "standby_tasks": "timing",
    "warmup_tasks": "timing",
    "status_detail": "messages",
}

#: fields holding a topic, group or transactional-id name: entries of answer arrays naming
#: something outside the run's namespace are left out (normalization "foreign")
NAME_FIELDS = ("name", "topic", "topic_name", "group_id", "transactional_id")


def build(cls: type, spec: Mapping[str, Any]) -> Any:
    """kio entity `cls` from plain data; a missing field takes the schema's default."""
    hints = typing.get_type_hints(cls)
    unknown = set(spec) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(f"{cls.__qualname__} has no field(s) {sorted(unknown)}")
    return cls(**{name: _convert(hints[name], value) for name, value in spec.items()})


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(inner, value)
    if origin is tuple:
        (item, *_) = typing.get_args(tp)
        return tuple(_convert(item, v) for v in value)
    if dataclasses.is_dataclass(tp) and isinstance(value, Mapping):
        return build(tp, value)  # type: ignore[arg-type]
    if tp is uuid.UUID and isinstance(value, str):
        return uuid.UUID(value)
    if tp is bool:
        return bool(value)
    if isinstance(tp, PhantomMeta):
        if isinstance(value, int) and tp.__name__.endswith("Timedelta"):  # milliseconds
            return tp.parse(datetime.timedelta(milliseconds=value))
        return tp(value)  # i8 .. i64, TopicName, GroupId, ...: checked by kio
    return value


def normalize(
    value: Any,
    owns: Callable[[str], bool],
    *,
    drop: frozenset[str] = frozenset(),
    keep: frozenset[str] = frozenset(),
    foreign: bool = True,
    unordered: frozenset[str] = frozenset(),
    in_error: bool = False,
) -> Any:
    """The answer as JSON-able data: error codes as names, bitfields as operation names,
    records decoded, DROPPED_FIELDS (but those in `keep`) and `drop` left out, entries naming
    another run's or test's topic, group or transactional id left out (unless
    `foreign=False`), lists under the field names in `unordered` sorted."""
    from tests.equivalence.harness import _decode_records, authorized_ops, error_name

    def again(inner: Any) -> Any:
        """The same normalization one level down (`in_error` as it stands then)."""
        return normalize(
            inner,
            owns,
            drop=drop,
            keep=keep,
            foreign=foreign,
            unordered=unordered,
            in_error=in_error,
        )

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        in_error = in_error or bool(getattr(value, "error_code", 0))
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            name = f.name
            kind = None if name in keep else DROPPED_FIELDS.get(name)
            if name in drop or (kind is not None and not (kind == "timing" and in_error)):
                continue
            v = getattr(value, name)
            if name.endswith("error_code") or name == "error":
                out[name] = error_name(int(v)) if v is not None else None
            elif name.endswith("authorized_operations") and isinstance(v, int):
                out[name] = authorized_ops(v)
            elif name == "records" and isinstance(v, bytes | None):
                out[name] = _decode_records(v)
            else:
                v = again(v)
                if name in unordered and isinstance(v, list):
                    v = sorted(v, key=lambda i: json.dumps(i, sort_keys=True))
                out[name] = v
        return out
    if isinstance(value, tuple | list):
        items = [again(v) for v in value]
        return [i for i in items if not (foreign and _foreign(i, owns))]
    if isinstance(value, uuid.UUID):
        return "zero-uuid" if value.int == 0 else "uuid"  # normalization "addresses"
    if isinstance(value, datetime.timedelta):
        return value.total_seconds() if in_error else None  # normalization "timing"
    if isinstance(value, datetime.datetime):
        return value.isoformat() if in_error else None
    if isinstance(value, bytes):
        return value.hex()
    return value


def _foreign(item: Any, owns: Callable[[str], bool]) -> bool:
    if not isinstance(item, dict):
        return False
    for key in NAME_FIELDS:
        name = item.get(key)
        if isinstance(name, str) and name and not owns(name):
            return True
    return False


__all__ = ["DROPPED_FIELDS", "NAME_FIELDS", "build", "normalize"]
