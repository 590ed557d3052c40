"""Array lengths of a request, checked before kio reads it.

kio's native reader sizes an array's storage from the count on the wire before it reads a
single entry, and reads a null count as null even where the schema says the array is not
nullable. A count of 2**32 in a 40-byte request is then an allocation of hundreds of GB: the
process aborts (a failed allocation in native code is no exception, every connection dies).
A null where a handler expects a tuple is a TypeError out of the handler. Kafka's generated
readers reject both: "Tried to allocate a collection of size N, but there are only M bytes
remaining" (KAFKA-14063) and "non-nullable field X was serialized as null".

`check(cls, frame, offset)` walks the request schema the same way, reading only counts and
lengths (and skipping everything else), and raises MalformedRequest on either.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import types
import typing
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.serial._parse import get_reader
from kio.serial.readers import Reader, read_unsigned_varint
from kio.static.protocol import Entity

from aclgate.protocol.header import MalformedRequest
from aclgate.protocol.lengths import read_length

_I8 = struct.Struct(">b")
#: wire size of the fixed-width kafka types
FIXED = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_BYTES = ("bytes", "records")


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    #: "fixed", "bytes", "other" (read with kio's reader), "struct", "array"
    kind: str
    nullable: bool
    size: int = 0  # fixed: bytes per value
    reader: Reader[object] | None = None  # other: kio's reader of one value
    entity: type[Entity] | None = None  # struct, or array of structs
    item: _Field | None = None  # array of primitives: its element


def _primitive(name: str, kafka_type: str, flexible: bool, nullable: bool) -> _Field:
    if kafka_type in FIXED:
        return _Field(name, "fixed", nullable, size=FIXED[kafka_type])
    if kafka_type in _BYTES:
        return _Field(name, "bytes", nullable)
    return _Field(name, "other", nullable, reader=get_reader(kafka_type, flexible, nullable))


def field_of(f: dataclasses.Field[Any], flexible: bool) -> _Field:
    """How one field of an entity is read (for walkers that need fields one by one)."""
    shape = classify_field(f)
    nullable = is_optional(f)
    if isinstance(shape, EntityTupleField):
        return _Field(f.name, "array", nullable, entity=shape.type_)
    if isinstance(shape, EntityField):
        return _Field(f.name, "struct", nullable, entity=shape.type_)
    if isinstance(shape, PrimitiveTupleField):
        # `tuple[X, ...] | None`: a nullable array; `tuple[X | None, ...]`: nullable items
        array_nullable = _is_union(f.type)
        tuple_type = next(a for a in _args(f.type) if a is not type(None))
        item_nullable = _is_union(typing.get_args(tuple_type)[0])
        item = _primitive(f.name, f.metadata["kafka_type"], flexible, item_nullable)
        return _Field(f.name, "array", array_nullable, item=item)
    return _primitive(f.name, f.metadata["kafka_type"], flexible, nullable)


@functools.cache
def _plan(cls: type[Entity]) -> tuple[tuple[_Field, ...], dict[int, _Field]]:
    """(fields in wire order, tagged fields by tag) of an entity class."""
    flexible = cls.__flexible__
    fields: list[_Field] = []
    tagged: dict[int, _Field] = {}
    for f in dataclasses.fields(cls):
        field = field_of(f, flexible)
        tag = f.metadata.get("tag")
        if tag is not None:
            tagged[tag] = field
        elif field.kind == "fixed" and fields and fields[-1].kind == "fixed":
            # consecutive fixed-width fields: skipped in one step
            last = fields[-1]
            fields[-1] = dataclasses.replace(
                last, name=f"{last.name}+", size=last.size + field.size
            )
        else:
            fields.append(field)
    return tuple(fields), tagged


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _args(tp: Any) -> tuple[Any, ...]:
    """The members of a union, or the type itself."""
    return typing.get_args(tp) if _is_union(tp) else (tp,)


def check(cls: type[Entity], buf: bytes | memoryview, offset: int) -> None:
    """MalformedRequest when an array of `cls` read at `offset` is null where the schema
    forbids it, or announces more entries than there are bytes left."""
    _entity(cls, buf, offset, len(buf))


def _past_end() -> MalformedRequest:
    return MalformedRequest("a field runs past the end of the frame")


def _entity(cls: type[Entity], buf: bytes | memoryview, off: int, end: int) -> int:
    fields, tagged = _plan(cls)
    for field in fields:
        off = _field(field, cls.__flexible__, buf, off, end)
    if cls.__flexible__:
        off = skip_tags(tagged, buf, off, end)
    if off > end:
        raise _past_end()
    return off


def skip_tags(
    tagged: dict[int, _Field], buf: bytes | memoryview, off: int, end: int, known: bool = False
) -> int:
    """Past an entity's tagged-fields section at `off`, its known arrays and structs
    checked (`tagged`: the entity's tagged fields by tag, from `_plan`); with `known`, a tag
    the entity does not define is refused, as kio's reader refuses it."""
    count, n = read_unsigned_varint(buf, off)
    off += n
    for _ in range(count):
        tag, n = read_unsigned_varint(buf, off)
        off += n
        if known and tag not in tagged:
            raise MalformedRequest(f"unknown tagged field {tag}")
        size, n = read_unsigned_varint(buf, off)
        off += n
        if off + size > end:
            raise _past_end()
        tagged_field = tagged.get(tag)
        if tagged_field is not None and tagged_field.kind in ("array", "struct"):
            _field(tagged_field, True, buf, off, off + size)
        off += size
    return off


def _field(field: _Field, flexible: bool, buf: bytes | memoryview, off: int, end: int) -> int:
    kind = field.kind
    if kind == "fixed":
        return off + field.size
    if kind == "other":
        assert field.reader is not None  # an "other" field always has its reader (_primitive)
        _value, n = field.reader(buf, off)
        return off + n
    if kind == "bytes":
        length, n = read_length(buf, off, flexible)
        if length < 0 and (length < -1 or not field.nullable):
            raise MalformedRequest(f"{field.name}: a length of {length}")  # as kio refuses it
        return off + n + max(length, 0)
    if kind == "struct":
        if field.nullable:
            (marker,) = _I8.unpack_from(buf, off)
            off += 1
            if marker < 0:
                return off
        assert field.entity is not None  # a struct field always has its class (_plan)
        return _entity(field.entity, buf, off, end)
    # an array
    count, n = read_length(buf, off, flexible)
    off += n
    if count < 0:
        if not field.nullable or count < -1:
            raise MalformedRequest(f"non-nullable field {field.name} was serialized as null")
        return off
    if count > end - off:
        raise MalformedRequest(
            f"{field.name}: an array of {count} entries in {end - off} remaining bytes"
        )
    if field.entity is not None:
        for _ in range(count):
            off = _entity(field.entity, buf, off, end)
        return off
    item = field.item
    assert item is not None  # an array of values always has its item (_plan)
    if item.kind == "fixed":
        return off + count * item.size
    for _ in range(count):
        off = _field(item, flexible, buf, off, end)
    return off


#: for walkers reading fields one at a time (protocol/enforce/denied_bytes.py)
Field = _Field
plan = _plan
read_field = _field
