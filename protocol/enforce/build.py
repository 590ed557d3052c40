"""Build response entities the proxy answers by itself: Kafka's getErrorResponse, generically.

`build(cls, code, source)` fills a kio response entity: every error_code field gets `code`;
the identifying fields that also exist in the request entry `source` are copied (names,
partition indexes, topic ids: IDENTITY_FIELDS), and nested arrays mirror the request's arrays,
so a denied request gets one error entry per topic and partition it named; everything else
takes the schema default, or -1 for offsets, epochs and timestamps (Kafka's INVALID_*
constants; not the group protocols' member, group and assignment epochs, which Kafka leaves at
0), or an empty value.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import struct
import types
import typing
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import Records, i32Timedelta, i64Timedelta

from aclgate.protocol.codec import encode_entity
from aclgate.protocol.enforce.messages import DEFAULT_MESSAGES
from aclgate.protocol.lengths import uvarint

#: numeric fields Kafka fills with -1 in error entries (INVALID_OFFSET, UNKNOWN_EPOCH, ...)
_MINUS_ONE = re.compile(r"offset|timestamp|epoch|watermark|time$|replica$|_id$|_index$|count$")
#: the group protocols' epochs (KIP-848, 932, 1071): Kafka's getErrorResponse leaves them at
#: the schema's 0 (heartbeats' member_epoch, described groups' group and assignment epochs)
_ZERO_EPOCHS = frozenset(
    {"member_epoch", "group_epoch", "assignment_epoch", "endpoint_information_epoch"}
)
#: response field name -> request field name, where an entry's identity is named differently
Aliases = dict[str, str]
#: the only scalar fields copied from the request: those that identify an entry. Kafka's
#: getErrorResponse copies nothing else; results that the request happens to name too
#: (timestamps, leader epochs, log start offsets, producer ids, member ids, protocol names)
#: take their defaults, never the client's values.
IDENTITY_FIELDS = frozenset(
    {
        "name",
        "topic",
        "topic_name",
        "topic_id",
        "index",
        "partition",
        "partition_index",
        "partition_id",
        "group_id",
        "key",
        "transactional_id",
        "resource_type",
        "resource_name",
        "entity_type",
        "entity_name",
        "user",
    }
)


@functools.cache
def _field_info(cls: type) -> tuple[tuple[str, Any, dict[str, Any], Any], ...]:
    """(name, type hint, field metadata, default) per field: hints and defaults are any type."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append((f.name, hints[f.name], dict(f.metadata), default))
    return tuple(out)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if len(args) == 1 else tp), True
    return tp, False


def _entity_item(tp: Any) -> type | None:
    """The entity class of a `tuple[Entity, ...]` annotation, else None."""
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
            return args[0]
    return None


def item_alias_fallback(source: Any, name: str) -> str | None:
    """Response arrays of per-partition results often mirror a request list of numbers under
    another name (`partitions` <- `partition_indexes`); find it when unambiguous."""
    if source is None or name != "partitions":
        return None
    for candidate in ("partition_indexes", "partition_ids"):
        if hasattr(source, candidate):
            return candidate
    return None


def _zero(name: str, tp: Any, nullable: bool, kafka_type: str | None) -> Any:
    if tp is Records or tp is bytes:
        return b""
    if typing.get_origin(tp) is tuple:
        return None if nullable else ()
    if tp is bool:
        return False
    if tp is uuid.UUID:
        return None if nullable else uuid.UUID(int=0)
    if tp is i32Timedelta or kafka_type == "timedelta_i32":
        return i32Timedelta.parse(timedelta(0))
    if tp is i64Timedelta or kafka_type == "timedelta_i64":
        return i64Timedelta.parse(timedelta(0))
    if tp is str:
        return None if nullable else ""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build(tp, ErrorCode.none)
    if isinstance(tp, type) and issubclass(tp, int):
        return tp(-1 if _MINUS_ONE.search(name) and name not in _ZERO_EPOCHS else 0)
    return None


def _index_field(cls: type) -> str | None:
    """The field that identifies an entry built from a bare number (a partition index)."""
    for name, _tp, meta, _default in _field_info(cls):
        if meta.get("kafka_type") == "int32" and (
            name.endswith("index") or name in ("partition", "partition_id")
        ):
            return name
    return None


def _mirror(item: type, code: ErrorCode, source: Any, aliases: Aliases | None) -> Any:
    """One response entry for one request entry, which may be a plain partition number."""
    if isinstance(source, int):
        index = _index_field(item)
        return build(item, code, None, aliases, {index: source} if index else None)
    return build(item, code, source, aliases)


def build(
    cls: type,
    code: ErrorCode,
    source: Any = None,
    aliases: Aliases | None = None,
    overrides: dict[str, Any] | None = None,
) -> Any:
    """An entity of `cls` answering `source` (a request entity or entry) with `code`."""
    values: dict[str, Any] = {}
    for name, tp, meta, default in _field_info(cls):
        if overrides and name in overrides:
            values[name] = overrides[name]
            continue
        kafka_type = meta.get("kafka_type")
        if kafka_type == "error_code":
            values[name] = code
            continue
        if name == "error_message" and code != ErrorCode.none:
            values[name] = DEFAULT_MESSAGES.get(int(code))
            continue
        base, nullable = _unwrap_optional(tp)
        src_name = aliases.get(name, name) if aliases else name
        has_source = source is not None and hasattr(source, src_name)
        fallback = None if has_source else item_alias_fallback(source, name)
        if fallback:
            src_name, has_source = fallback, True
        item = _entity_item(base)
        if item is not None:
            if has_source and getattr(source, src_name) is not None:
                values[name] = tuple(
                    _mirror(item, code, s, aliases) for s in getattr(source, src_name)
                )
            else:
                values[name] = (
                    default
                    if default is not dataclasses.MISSING
                    else _zero(name, base, nullable, kafka_type)
                )
            continue
        if (
            has_source
            and (name in IDENTITY_FIELDS or (aliases is not None and name in aliases))
            and not dataclasses.is_dataclass(getattr(source, src_name))
        ):
            values[name] = getattr(source, src_name)
            continue
        if default is not dataclasses.MISSING:
            values[name] = default
            continue
        values[name] = _zero(name, base, nullable, kafka_type)
    return cls(**values)


#: a name no client can send (a NUL is not in any Kafka resource name), found again in the
#: bytes of an entry built for it
NAME_MARK = "\x00aclgate-name\x00"
_I16 = struct.Struct(">h")


def string_bytes(value: str, flexible: bool) -> bytes:
    """A non-null string as Kafka encodes it: compact (varint length + 1) or legacy (int16)."""
    raw = value.encode()
    size = len(raw)
    if not flexible:
        return _I16.pack(size) + raw
    return (bytes((size + 1,)) if size < 0x7F else uvarint(size + 1)) + raw  # one byte: most


class NamedEntry:
    """The bytes of one response entry built for the name `NAME_MARK`, cut around that
    name: entries that differ only in their name are then rendered as bytes, not built and
    encoded one by one with kio (a denied 1 MiB request names some 40,000; issue 20)."""

    __slots__ = ("echoes", "flexible", "head", "tail")

    def __init__(self, entry: Any) -> None:
        self.flexible: bool = type(entry).__flexible__
        whole = encode_entity(entry)
        mark = string_bytes(NAME_MARK, self.flexible)
        found = whole.count(mark)
        if found > 1:
            raise ValueError(f"{type(entry).__name__} holds its name {found} times")
        #: False: the entry does not echo its name, every one is `head`
        self.echoes = found == 1
        cut = whole.find(mark) if self.echoes else len(whole)
        self.head = whole[:cut]
        self.tail = whole[cut + len(mark) :] if self.echoes else b""

    def render(self, name: str) -> bytes:
        if not self.echoes:
            return self.head
        return self.head + string_bytes(name, self.flexible) + self.tail
