"""Denied answers of cluster-only APIs written as bytes straight from the request's bytes.

ElectLeaders, AlterPartitionReassignments, AlterReplicaLogDirs, AlterClientQuotas and their
neighbours are checked by Kafka on the cluster as a whole, before any entry is looked at; their
denied answer still names every entry of the request (topics and their partitions, quota
entities, users), as each request's getErrorResponse builds it. Decoding such a request with
kio and building its answer entry by entry held the event loop 0.6-1.2 s (CPU) at the 1 MiB
limit (issue 20). Here the cluster check is decided on the header (`MirroredCheck`, as
base.HeaderCheck decides CreateAcls/DeleteAcls), and the answer is rendered from the request's
bytes by one walker driven by kio's schema classes: a `Shape` per response entity, compiled
once per API version from the same rules `build.build` applies to kio objects (error codes,
Kafka's default messages, identity fields copied from the request, nested arrays mirroring the
request's), so the bytes are the ones `build` + kio would encode (tests/protocol/
test_denied_bytes.py compares them), then made into one Python function per shape. No kio
object is built for an entry: names are copied as the bytes they arrived as, partition numbers
are written next to their result's fixed bytes: 13-39 ms (CPU) at the 1 MiB limit (the
quota, SCRAM and feature APIs, whose entries cost more and which name a few, have 256 KiB).

A request the walk cannot follow (a count past the frame, a null where the schema forbids one,
a bad string or boolean) is closed as malformed, as kio's decoder and Kafka close on it.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias, cast

from kio.schema.errors import ErrorCode
from kio.serial._introspect import EntityTupleField, PrimitiveTupleField, classify_field
from kio.serial._serialize import get_field_writer
from kio.serial.readers import read_unsigned_varint
from kio.static.protocol import Entity

from aclgate.authz.model import AclOperation
from aclgate.protocol import arrays
from aclgate.protocol.codec import DECODE_ERRORS, encode_entity, frame_with_size
from aclgate.protocol.enforce.base import (
    ApiHandler,
    ClusterDecision,
    KioBody,
    Unchecked,
    _cluster_check,
)
from aclgate.protocol.enforce.build import (
    IDENTITY_FIELDS,
    Aliases,
    _entity_item,
    _field_info,
    _index_field,
    _unwrap_optional,
    build,
)
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import MalformedRequest, RequestHeader
from aclgate.protocol.lengths import length_prefix
from aclgate.protocol.versions import request_class, response_class

_I32 = struct.Struct(">i")


@dataclass(frozen=True)
class Copy:
    """A response field whose bytes are the request field `source`'s bytes (a name, an
    index): same Kafka type, same flexibility, so the same encoding."""

    source: str


@dataclass(frozen=True)
class IntItem:
    """A response entity mirroring one number of a request's int32 array (a partition
    index): `head`, the number's 4 bytes, `tail`."""

    head: bytes
    tail: bytes

    def render(self, numbers: bytes | memoryview) -> bytes:
        """Every entity for the int32s `numbers`, written by slice assignment per byte
        position (a few dozen C-level copies, not one Python step per number)."""
        n = len(numbers) // 4
        if n == 1:
            return self.head + bytes(numbers) + self.tail
        if n < 16:  # a few numbers (a topic's partitions): joined, cheaper than the slicing
            head, tail = self.head, self.tail
            return b"".join([head + numbers[i : i + 4] + tail for i in range(0, 4 * n, 4)])
        size = len(self.head) + 4 + len(self.tail)
        out = bytearray(size * n)
        for at, byte in enumerate(self.head):
            out[at::size] = bytes((byte,)) * n
        for j in range(4):
            out[len(self.head) + j :: size] = numbers[j::4]
        for at, byte in enumerate(self.tail, len(self.head) + 4):
            out[at::size] = bytes((byte,)) * n
        return bytes(out)


@dataclass(frozen=True, eq=False)
class Each:
    """A response array mirroring request arrays: one item per entry found along each of
    `sources` (a path of field names from the entity, its last field the array, the ones
    before it arrays of entities walked through; and the shape of the items made from that
    array's entries), in order."""

    sources: tuple[tuple[tuple[str, ...], Item], ...]
    flexible: bool
    #: the array's bytes when the request's array is null (build's default or zero)
    null: bytes
    #: items deduplicated and sorted by their one copied field (AlterUserScramCredentials)
    unique: bool = False


#: the parts of a response entity in wire order: fixed bytes, or bytes found in the request
Segment: TypeAlias = "bytes | Copy | Each"


@dataclass(frozen=True, eq=False)
class Shape:
    """A response entity mirroring a request entity of class `request`."""

    request: type[Entity] | None
    segments: tuple[Segment, ...]

    @functools.cached_property
    def copies(self) -> frozenset[str]:
        """The request fields whose bytes it copies."""
        return frozenset(s.source for s in self.segments if isinstance(s, Copy))


#: the shape of a response array's items
Item: TypeAlias = "Shape | IntItem"


@dataclass(frozen=True)
class Mirror:
    """How a denied answer mirrors its request, beyond `build`'s own rules: the row's
    `aliases` and `overrides` (as `Whole` takes them), `sources` (response array -> the
    request paths its items come from, when not the array of its own or aliased name) and
    `unique` (response arrays deduplicated and sorted by their copied field)."""

    aliases: Aliases | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    unique: frozenset[str] = frozenset()


# ------------------------------------------------------------------------------ compiling

#: a value of each copied field's type for the entity built around the holes (its bytes are
#: never used)
_STAND_INS: dict[str | None, Any] = {"string": "", "uuid": uuid.UUID(int=0)}


def _field_bytes(cls: type[Entity], instance: KioBody) -> tuple[dict[str, bytes], bytes]:
    """(the encoding of each untagged field of `instance`, its tagged-fields section)."""
    flexible = cls.__flexible__
    parts: dict[str, bytes] = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("tag") is not None:
            continue
        out = io.BytesIO()
        get_field_writer(f, flexible, False, False)(out, getattr(instance, f.name))
        parts[f.name] = out.getvalue()
    whole = encode_entity(instance)
    used = sum(len(p) for p in parts.values())
    assert whole[:used] == b"".join(parts.values()), "fields encode as the entity does"
    return parts, whole[used:]


def _request_fields(cls: type[Entity] | None) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)} if cls is not None else {}


def _element(f: dataclasses.Field[Any]) -> type | str | None:
    """The entity class of an array of entities, "int32" for an array of int32s, else None."""
    shape = classify_field(f)
    if isinstance(shape, EntityTupleField):
        return shape.type_
    if isinstance(shape, PrimitiveTupleField) and f.metadata.get("kafka_type") == "int32":
        return "int32"
    return None


def _resolve(source: type[Entity], path: tuple[str, ...]) -> type | str:
    """The element type found at the end of `path` from `source`."""
    cls: type[Entity] | str = source
    for name in path:
        assert isinstance(cls, type), f"{name}: not inside an entity"
        element = _element(_request_fields(cls)[name])
        assert element is not None, f"{cls.__name__}.{name} is not an array"
        cls = element
    return cls


def compile_shape(
    cls: type[Entity],
    code: ErrorCode,
    source: type[Entity] | None,
    mirror: Mirror,
    top: bool = True,
) -> Shape:
    """The `Shape` of `build(cls, code, <an entity of class source>, aliases, overrides)`:
    the same decisions, field by field, made once for the classes instead of per entry."""
    aliases = mirror.aliases
    fields = _request_fields(source)
    overrides = dict(mirror.overrides) if top else {}
    holes: dict[str, Copy | Each] = {}
    stand_ins: dict[str, Any] = {}
    for name, tp, meta, _default in _field_info(cls):
        if name in overrides or meta.get("kafka_type") == "error_code":
            continue
        if name == "error_message" and code != ErrorCode.none:
            continue
        base, nullable = _unwrap_optional(tp)
        src_name = aliases.get(name, name) if aliases else name
        has_source = src_name in fields
        if not has_source and name == "partitions":  # build.item_alias_fallback
            src_name = next((c for c in ("partition_indexes", "partition_ids") if c in fields), "")
            has_source = bool(src_name)
        item = _entity_item(base)
        if item is not None:
            paths = mirror.sources.get(name) if top else None
            if paths is None and has_source:
                paths = ((src_name,),)
            if paths is None:
                continue  # the default or zero of build: fixed bytes
            assert source is not None
            holes[name] = Each(
                tuple((path, _item(item, code, _resolve(source, path), mirror)) for path in paths),
                cls.__flexible__,
                null=b"",  # set below
                unique=name in mirror.unique,
            )
            stand_ins[name] = None if nullable else ()
            continue
        if has_source and (name in IDENTITY_FIELDS or (aliases is not None and name in aliases)):
            req = fields[src_name]
            if _element(req) is not None or dataclasses.is_dataclass(req.type):
                continue
            assert req.metadata.get("kafka_type") == meta.get("kafka_type"), (cls, name)
            assert source is not None and source.__flexible__ == cls.__flexible__, (cls, name)
            assert _unwrap_optional(req.type)[1] == nullable, (cls, name, "nullability")
            holes[name] = Copy(src_name)
            stand_ins[name] = _STAND_INS.get(meta.get("kafka_type"), 0)
    parts, tags = _field_bytes(cls, build(cls, code, None, aliases, {**overrides, **stand_ins}))
    assert not set(holes) - set(parts), "a tagged field mirrors the request"
    segments: list[Segment] = []
    for name, encoded in [*parts.items(), ("", tags)]:
        hole = holes.get(name)
        if isinstance(hole, Each):
            # the request's array null: build's default or zero for the response array
            others = {k: v for k, v in stand_ins.items() if k != name}
            empty = build(cls, code, None, aliases, {**overrides, **others})
            hole = dataclasses.replace(hole, null=_field_bytes(cls, empty)[0][name])
        if hole is not None:
            segments.append(hole)
        elif segments and isinstance(segments[-1], bytes):
            segments[-1] += encoded
        else:
            segments.append(encoded)
    return Shape(source, tuple(s for s in segments if s != b""))


def _item(item: type[Entity], code: ErrorCode, element: type | str, mirror: Mirror) -> Item:
    if element == "int32":
        return _int_item(item, code, mirror)
    assert isinstance(element, type)
    return compile_shape(item, code, element, mirror, top=False)


def _int_item(cls: type[Entity], code: ErrorCode, mirror: Mirror) -> IntItem:
    """build's `_mirror` of a bare number: the index field set, everything else fixed."""
    index = _index_field(cls)
    assert index is not None, f"{cls.__name__} has no index field"
    parts, tags = _field_bytes(cls, build(cls, code, None, mirror.aliases, {index: 0}))
    names = list(parts)
    at = names.index(index)
    return IntItem(
        b"".join(parts[n] for n in names[:at]),
        b"".join(parts[n] for n in names[at + 1 :]) + tags,
    )


# -------------------------------------------------------------------------------- walking
#
# The walk of a request is one Python function made from its `Shape` (as answerwalk.py makes
# its walks): straight-line offset arithmetic per field, one-byte varints read inline, a loop
# per array. An interpreter over the shapes cost 4-27 µs per entry (a dict per entry, a call
# per field), 0.25-1.4 s for a request at its 1 MiB limit.


@functools.cache
def _request_plan(cls: type[Entity]) -> tuple[tuple[str, arrays.Field, str], ...]:
    """(name, how arrays.py reads it, kafka type) per untagged field of a request entity,
    one field at a time (arrays.plan joins neighbouring fixed fields)."""
    return tuple(
        (f.name, arrays.field_of(f, cls.__flexible__), f.metadata.get("kafka_type", ""))
        for f in dataclasses.fields(cls)
        if f.metadata.get("tag") is None
    )


@dataclass(frozen=True)
class _Sink:
    """Where the items of one response array go while the walk runs: local variables of
    the generated function (a list of parts, a count, whether a request array was seen)."""

    each: Each
    parts: str
    count: str
    seen: str


#: (the rest of the path below a request field, the sink of its items, their shape)
_Target: TypeAlias = tuple[tuple[str, ...], _Sink, Item]


class _Emitter:
    """Writes the walk function of one top-level shape."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {
            "uvarint": read_unsigned_varint,
            "I16": struct.Struct(">h").unpack_from,
            "I32": _I32.unpack_from,
            "Malformed": MalformedRequest,
            "read_field": arrays.read_field,
            "skip_tags": arrays.skip_tags,
            "array_bytes": _array_bytes,
            "prefix": length_prefix,
        }
        self._n = 0

    def var(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def const(self, value: Any) -> str:
        name = self.var("k")
        self.names[name] = value
        return name

    def line(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def sinks(self, shape: Shape, indent: int) -> tuple[dict[str, list[_Target]], str]:
        """Declare the sinks of `shape`'s arrays; (its request fields' targets, the
        expression of its bytes once the entity is walked: `c_<field>` hold its copies)."""
        targets: dict[str, list[_Target]] = {}
        parts: list[str] = []
        for s in shape.segments:
            if isinstance(s, bytes):
                parts.append(self.const(s))
            elif isinstance(s, Copy):
                parts.append(f"c_{s.source}")
            elif _direct(s):
                # one request array of its own: its bytes made where the array is read
                sink = _Sink(s, self.var("a"), "", "")
                targets[s.sources[0][0][0]] = [((), sink, s.sources[0][1])]
                parts.append(sink.parts)
            else:
                sink = _Sink(s, self.var("parts"), self.var("count"), self.var("seen"))
                self.line(indent, f"{sink.parts} = []; {sink.count} = 0; {sink.seen} = False")
                for path, item in s.sources:
                    targets.setdefault(path[0], []).append((path[1:], sink, item))
                parts.append(
                    f"array_bytes({self.const(s)}, {sink.seen}, {sink.count}, {sink.parts})"
                )
        return targets, f"b''.join(({', '.join(parts)},))"

    def prefix(self, flexible: bool, count: str) -> str:
        """The expression of a response array's length prefix for `count` entries."""
        table = self.const(_PREFIXES[flexible])
        return f"({table}[{count}] if {count} < {len(_PREFIXES[flexible])} else prefix({count}, {flexible}))"

    def length(self, indent: int, flexible: bool, target: str) -> None:
        """`target` = a length or count at `pos` (-1: null), `pos` moved past it."""
        if flexible:
            self.line(indent, "b = buf[pos]")
            self.line(indent, "if b < 0x80:")
            self.line(indent + 1, f"{target} = b - 1; pos += 1")
            self.line(indent, "else:")
            self.line(indent + 1, f"{target}, u = uvarint(buf, pos); {target} -= 1; pos += u")
        else:
            self.line(indent, f"{target} = I32(buf, pos)[0]; pos += 4")

    def entity(
        self,
        cls: type[Entity],
        copies: frozenset[str],
        targets: Mapping[str, list[_Target]],
        indent: int,
    ) -> None:
        """Walk one entity of `cls` at `pos`, checking what kio's reader checks; the fields
        in `copies` kept as `c_<field>`, the arrays in `targets` fed to their sinks."""
        flexible = cls.__flexible__
        for name, how, kafka_type in _request_plan(cls):
            wanted = targets.get(name, [])
            if how.kind == "fixed":
                if kafka_type == "bool":
                    self.line(indent, f"if buf[pos] > 1: raise Malformed('{name}: no boolean')")
                if name in copies:
                    self.line(indent, f"c_{name} = buf[pos:pos + {how.size}]")
                self.line(indent, f"pos += {how.size}")
            elif kafka_type == "string" and how.kind == "other":
                self.string(indent, name, how, flexible, name in copies)
            elif how.kind == "array" and (how.entity is not None or kafka_type == "int32"):
                self.array(indent, name, how, flexible, wanted)
            else:  # bytes, structs, arrays of strings: arrays.py reads them
                assert not wanted and name not in copies, (cls, name)
                field = self.const(how)
                self.line(indent, f"pos = read_field({field}, {flexible}, buf, pos, end)")
        if flexible:
            tagged = self.const(arrays.plan(cls)[1])
            self.line(indent, "if buf[pos] == 0: pos += 1")
            self.line(indent, f"else: pos = skip_tags({tagged}, buf, pos, end, True)")
        # a field past the end: the next read fails (IndexError), or the check at the end

    def string(
        self, indent: int, name: str, how: arrays.Field, flexible: bool, copied: bool
    ) -> None:
        start = self.var("s")
        self.line(indent, f"{start} = pos")
        if flexible:
            self.length(indent, True, "n")
        else:
            self.line(indent, "n = I16(buf, pos)[0]; pos += 2")
        self.line(indent, "if n < 0:")
        self.line(indent + 1, f"if n < -1 or not {how.nullable}: raise Malformed('{name}: null')")
        self.line(indent, "else:")
        self.line(indent + 1, f"t_{name} = buf[pos:pos + n]; texts.append(t_{name}); pos += n")
        if copied:
            self.line(indent, f"c_{name} = buf[{start}:pos]")

    def array(
        self, indent: int, name: str, how: arrays.Field, flexible: bool, wanted: list[_Target]
    ) -> None:
        count = self.var("c")
        self.length(indent, flexible, count)
        self.line(indent, f"if {count} < 0:")
        self.line(indent + 1, f"if {count} < -1 or not {how.nullable}:")
        self.line(
            indent + 2, f"raise Malformed('non-nullable field {name} was serialized as null')"
        )
        for _rest, sink, _item in wanted:
            if not sink.count:  # a direct array: null, as build makes it then
                self.line(indent + 1, f"{sink.parts} = {self.const(sink.each.null)}")
        self.line(indent, f"elif {count} > end - pos:")
        self.line(
            indent + 1,  # arrays.py's words, which tests and logs look for
            f"raise Malformed(f'{name}: an array of {{{count}}} entries in {{end - pos}} "
            "remaining bytes')",
        )
        self.line(indent, "else:")
        indent += 1
        for _rest, sink, _item in wanted:
            if sink.count:
                self.line(indent, f"{sink.seen} = True")
        if how.entity is None:  # int32s
            for rest, sink, item in wanted:
                assert not rest and isinstance(item, IntItem)
                rendered = f"{self.const(item)}.render(buf[pos:pos + 4 * {count}])"
                if sink.count:
                    self.line(indent, f"{sink.parts}.append({rendered})")
                    self.line(indent, f"{sink.count} += {count}")
                else:  # one number (a partition per topic: most requests) without a call
                    one = self.const(length_prefix(1, sink.each.flexible) + item.head)
                    tail = self.const(item.tail)
                    prefix = self.prefix(sink.each.flexible, count)
                    self.line(
                        indent, f"if {count} == 1: {sink.parts} = {one} + buf[pos:pos + 4] + {tail}"
                    )
                    self.line(indent, f"else: {sink.parts} = {prefix} + {rendered}")
            self.line(indent, f"pos += 4 * {count}")
            return
        here = [(sink, item) for rest, sink, item in wanted if not rest]
        assert len(here) <= 1 and (not here or len(wanted) == 1), f"{name}: one use per array"
        self.line(indent, f"for _ in range({count}):")
        if here:
            sink, item = here[0]
            assert isinstance(item, Shape)
            items = sink.parts if sink.count else self.var("items")
            if not sink.count:
                self.lines.insert(-1, "    " * indent + f"{items} = []")
            targets, rendered = self.sinks(item, indent + 1)
            self.entity(how.entity, item.copies, targets, indent + 1)
            if sink.each.unique:
                (key,) = item.copies  # its text, decoded above (so not null)
                self.line(indent + 1, f"{items}.append((t_{key}, {rendered}))")
            else:
                self.line(indent + 1, f"{items}.append({rendered})")
            if sink.count:
                self.line(indent, f"{sink.count} += {count}")
            else:
                prefix = self.prefix(sink.each.flexible, count)
                self.line(indent, f"{sink.parts} = {prefix} + b''.join({items})")
        else:
            deeper: dict[str, list[_Target]] = {}
            for rest, sink, item in wanted:
                deeper.setdefault(rest[0], []).append((rest[1:], sink, item))
            self.entity(how.entity, frozenset(), deeper, indent + 1)


def _direct(each: Each) -> bool:
    """An array made from one request array of the same entity, in its order."""
    ((path, _item),) = each.sources if len(each.sources) == 1 else ((("", ""), None),)
    return len(each.sources) == 1 and len(path) == 1 and not each.unique


#: the length prefixes of short arrays, legacy and compact
_PREFIXES = {
    flexible: tuple(length_prefix(n, flexible) for n in range(128)) for flexible in (False, True)
}


def _array_bytes(each: Each, seen: bool, count: int, parts: list[Any]) -> bytes:
    """A response array's bytes from its items' parts; a `unique` array's (copied name,
    item) pairs deduplicated and sorted by name (as `sorted` orders the decoded names)."""
    if not seen:
        return each.null
    if each.unique:  # UTF-8 bytes sort as their decoded strings do
        by_name: dict[bytes, bytes] = {}
        for text, rendered in parts:
            by_name.setdefault(text, rendered)
        return length_prefix(len(by_name), each.flexible) + b"".join(
            by_name[n] for n in sorted(by_name)
        )
    return length_prefix(count, each.flexible) + b"".join(parts)


#: buf, offset of the body, end -> the answer's body
Walk: TypeAlias = Callable[[Frame, int, int], bytes]


def compile_walk(shape: Shape, name_field: str | None = None) -> Walk:
    """The walk function of a top-level `shape` (see the section's comment). With
    `name_field`, the walk of one entry of an array (protocol/enforce/entrybytes.py): it
    takes bytes, and returns (the entry's answer, where the entry ends, that field's text;
    None for `name_field` "")."""
    assert shape.request is not None
    out = _Emitter()
    out.line(0, "def walk(buf, pos, end):")
    if name_field is None:
        out.line(1, "buf = bytes(buf)  # slices of bytes are quicker to make than of a view")
    out.line(1, "texts = []")
    targets, rendered = out.sinks(shape, 1)
    out.entity(shape.request, shape.copies, targets, 1)
    out.line(1, "if pos > end: raise Malformed('past the end of the frame')")
    # every string UTF-8, as kio's reader decodes each (a NUL between them ends any
    # sequence cut short, so one decode checks them all)
    out.line(1, "b'\\0'.join(texts).decode()")
    if name_field is None:
        out.line(1, f"return {rendered}")
    else:  # "": an entry named otherwise (by a topic id the caller reads)
        out.line(1, f"return {rendered}, pos, {f't_{name_field}' if name_field else 'None'}")
    exec("\n".join(out.lines), out.names)  # the source is built above from the shapes only
    return cast("Walk", out.names["walk"])


# ---------------------------------------------------------------------------- the check


@dataclass(frozen=True, eq=False)
class MirroredCheck:
    """A cluster check made on the header (as `HeaderCheck`), for an API whose denied
    answer mirrors the request's nested entries: rendered by `Shape`s from its bytes."""

    operation: AclOperation
    mirror: Mirror = Mirror()
    decide: ClusterDecision = _cluster_check
    code: ErrorCode = ErrorCode.cluster_authorization_failed

    def served(self, handler: ApiHandler) -> ApiHandler:
        """The handler of an allowed request: decoded (a malformed one closed, as before)
        and forwarded, its check already made."""
        return _FORWARDED

    def denied_answer(self, header: RequestHeader, frame: Frame) -> bytes:
        walk = self.walk(header.api_key, header.api_version)
        try:
            body = walk(frame, header.body_offset, len(frame))
        except (*DECODE_ERRORS, UnicodeDecodeError) as exc:
            raise MalformedRequest(f"cannot walk the request: {exc!r}") from exc
        head_cls = response_class(header.api_key, header.api_version).__header_schema__
        return frame_with_size(encode_entity(head_cls(correlation_id=header.correlation_id)) + body)

    def shape(self, api_key: int, api_version: int) -> Shape:
        return _compiled(self, api_key, api_version)[0]

    def walk(self, api_key: int, api_version: int) -> Walk:
        return _compiled(self, api_key, api_version)[1]


@functools.cache
def _compiled(check: MirroredCheck, api_key: int, api_version: int) -> tuple[Shape, Walk]:
    shape = compile_shape(
        response_class(api_key, api_version),
        check.code,
        request_class(api_key, api_version),
        check.mirror,
    )
    return shape, compile_walk(shape)


_FORWARDED = Unchecked(why="the cluster check is made on the header")


__all__ = ["Mirror", "MirroredCheck", "Shape", "compile_shape"]
