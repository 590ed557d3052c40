"""Keep clients on the proxy: rewrite every broker address a response carries.

Addresses appear in Metadata (brokers array), FindCoordinator (v0-3 top level, v4+ batched),
DescribeCluster, and the KIP-951 node endpoints of Produce v10+ / Fetch v16+ responses. Each
real address is reported to a BrokerDirectory, which maps the node id to the proxy's own
host and port for that node. A node the directory cannot map is never passed through with
its real address: it is dropped (Metadata, DescribeCluster, KIP-951) or turned into
COORDINATOR_NOT_AVAILABLE (FindCoordinator), so the client retries instead of leaking out.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, TypeVar

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import (
    Reader,
    compact_array_reader,
    legacy_array_reader,
    read_unsigned_varint,
)
from kio.serial.writers import Writer, compact_array_writer, legacy_array_writer
from kio.static.primitive import i32

from aclgate.protocol.answerwalk import SCHEMAS, AnswerWalk, no_node_endpoints, tail_offset
from aclgate.protocol.codec import (
    DECODE_ERRORS,
    MalformedResponse,
    decode_response,
    encode_response,
    response_body_offset,
)
from aclgate.protocol.versions import response_class, response_module

METADATA, PRODUCE, FETCH, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 0, 1, 10, 60
_SIZE = struct.Struct(">i")

if TYPE_CHECKING:  # dataclasses.replace rewrites them: kio's frozen dataclasses
    from _typeshed import DataclassInstance

    class Broker(DataclassInstance, Protocol):
        """A broker address of any answer and version: Metadata's MetadataResponseBroker,
        DescribeCluster's DescribeClusterBroker, KIP-951's NodeEndpoint (the node id is
        `node_id` or `broker_id`, read by the field name the caller gives)."""

        @property
        def host(self) -> str: ...
        @property
        def port(self) -> int: ...

    class MetadataBroker(Broker, Protocol):
        """A broker of a Metadata answer (any version)."""

        @property
        def node_id(self) -> int: ...


_B = TypeVar("_B", bound="Broker")


class Coordinator(Protocol):
    """FindCoordinator's answer (v0-3) or one of its coordinators (v4+)."""

    @property
    def error_code(self) -> int: ...
    @property
    def node_id(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


class BrokerDirectory(Protocol):
    """Maps upstream node ids to the addresses clients must use instead."""

    def learn(self, node_id: int, host: str, port: int) -> None:
        """Record the real address of a node seen in an upstream response."""

    def advertise(self, node_id: int) -> tuple[str, int] | None:
        """The proxy's host and port for this node, or None if it cannot be served."""


def _mapped(
    directory: BrokerDirectory, node_id: int, host: str, port: int
) -> tuple[str, int] | None:
    directory.learn(node_id, host, port)
    return directory.advertise(node_id)


class _BrokerArray:
    """Cached reader/writer for the Metadata brokers array of one version."""

    __slots__ = ("offset_in_body", "read", "write")

    def __init__(self, api_version: int):
        mod = response_module(METADATA, api_version)
        cls = mod.MetadataResponseBroker
        self.read: Reader[tuple[MetadataBroker, ...] | None]
        self.write: Writer[Sequence[Broker] | None]
        if response_class(METADATA, api_version).__flexible__:
            self.read = compact_array_reader(entity_reader(cls))
            self.write = compact_array_writer(entity_writer(cls))
        else:
            self.read = legacy_array_reader(entity_reader(cls))
            self.write = legacy_array_writer(entity_writer(cls))
        self.offset_in_body = 4 if api_version >= 3 else 0  # throttle_time_ms from v3


_BROKER_ARRAYS: dict[int, _BrokerArray] = {}


def metadata_brokers_span(
    frame: bytes | memoryview, api_version: int
) -> tuple[int, int, tuple[MetadataBroker, ...]]:
    """(start, end, brokers) of the brokers array inside a framed Metadata response."""
    array = _BROKER_ARRAYS.get(api_version)
    if array is None:
        array = _BROKER_ARRAYS[api_version] = _BrokerArray(api_version)
    try:
        start = response_body_offset(frame, METADATA, api_version) + array.offset_in_body
        brokers, used = array.read(frame, start)
        if brokers is None:
            raise ValueError("a null brokers array")
    except DECODE_ERRORS as exc:
        raise MalformedResponse(f"cannot read Metadata v{api_version} brokers: {exc!r}") from exc
    return start, start + used, brokers


def encode_metadata_brokers(brokers: Sequence[Broker], api_version: int) -> bytes:
    out = io.BytesIO()
    _BROKER_ARRAYS[api_version].write(out, brokers)
    return out.getvalue()


def advertised_brokers(
    brokers: Sequence[_B], directory: BrokerDirectory, id_field: str = "node_id"
) -> tuple[_B, ...]:
    """The brokers with proxy addresses; unmappable ones are left out."""
    out: list[_B] = []
    for b in brokers:
        node_id: int = getattr(b, id_field)
        adv = _mapped(directory, node_id, b.host, b.port)
        if adv is not None:
            out.append(dataclasses.replace(b, host=adv[0], port=i32(adv[1])))
    return tuple(out)


class BrokerArrayCache:
    """The rewritten brokers array for the raw one the cluster sent (it rarely changes):
    kio's writer is pure Python, and Metadata is the API clients call most after the data
    path. Keyed by the raw bytes and the directory's generation, so a moved broker or a new
    port misses."""

    def __init__(self, limit: int = 64):
        self.limit = limit
        #: (version, raw array, directory generation) -> the rewritten array
        self._entries: dict[tuple[int, bytes, object], bytes] = {}

    def rewrite(
        self, raw: bytes, brokers: Sequence[Broker], api_version: int, directory: BrokerDirectory
    ) -> bytes:
        hit = self._entries.get((api_version, raw, getattr(directory, "generation", None)))
        if hit is not None:
            return hit
        new = encode_metadata_brokers(advertised_brokers(brokers, directory), api_version)
        if len(self._entries) >= self.limit:
            self._entries.clear()
        # advertising may have bound a port (a new generation): key on the generation after it
        self._entries[(api_version, raw, getattr(directory, "generation", None))] = new
        return new


class AnswerCache:
    """Rewritten answers by the exact bytes the broker sent (after the correlation id).

    A client polling Metadata for the same topics gets the same bytes from the broker time
    after time; walking them with kio costs tens of microseconds on a cold cache, a dict probe
    costs one. Only rewrites that are a pure function of those bytes and the directory's
    generation may be remembered (the caller decides); values are whatever the caller needs
    to replay the rewrite and its side effects.
    """

    def __init__(self, limit: int = 64, max_bytes: int = 64 * 1024):
        self.limit = limit
        #: larger answers are rewritten every time rather than held in memory
        self.max_bytes = max_bytes
        #: the value is the caller's replay record, whose shape only the caller knows (and
        #: states where it reads it back)
        self._entries: dict[tuple[object, ...], Any] = {}

    def get(self, key: tuple[object, ...]) -> Any:
        return self._entries.get(key)

    def put(self, key: tuple[object, ...], value: object) -> None:
        if len(self._entries) >= self.limit:
            self._entries.clear()
        self._entries[key] = value

    def __len__(self) -> int:
        return len(self._entries)


def rewrite_metadata(
    frame: bytes | memoryview,
    api_version: int,
    directory: BrokerDirectory,
    cache: BrokerArrayCache | None = None,
) -> bytes:
    """Splice new brokers into a Metadata response; the topics part stays byte-identical."""
    start, end, brokers = metadata_brokers_span(frame, api_version)
    if cache is None:
        new = encode_metadata_brokers(advertised_brokers(brokers, directory), api_version)
    else:
        new = cache.rewrite(bytes(frame[start:end]), brokers, api_version, directory)
    payload = b"".join((frame[4:start], new, frame[end:]))
    return _SIZE.pack(len(payload)) + payload


def _coordinator_fields(entity: Coordinator, directory: BrokerDirectory) -> dict[str, object]:
    """Replacement fields for one coordinator answer (top-level v0-3 or a v4+ entry)."""
    if entity.error_code != ErrorCode.none or entity.node_id < 0:
        return {}
    adv = _mapped(directory, entity.node_id, entity.host, entity.port)
    if adv is None:
        return {
            "error_code": ErrorCode.coordinator_not_available,
            "node_id": i32(-1),
            "host": "",
            "port": i32(-1),
        }
    return {"host": adv[0], "port": i32(adv[1])}


def rewrite_find_coordinator(
    frame: bytes | memoryview, api_version: int, directory: BrokerDirectory
) -> bytes:
    body = decode_response(frame, FIND_COORDINATOR, api_version)
    if api_version >= 4:
        coordinators = tuple(
            dataclasses.replace(c, **_coordinator_fields(c, directory)) for c in body.coordinators
        )
        body = dataclasses.replace(body, coordinators=coordinators)
    else:
        fields = _coordinator_fields(body, directory)
        if "error_code" in fields and api_version >= 1:
            fields["error_message"] = "The coordinator is not available."
        body = dataclasses.replace(body, **fields)
    return encode_response(_correlation_id(frame), body)


def rewrite_describe_cluster(
    frame: bytes | memoryview, api_version: int, directory: BrokerDirectory
) -> bytes:
    body = decode_response(frame, DESCRIBE_CLUSTER, api_version)
    if getattr(body, "endpoint_type", 1) != 1:
        # controller endpoints (KIP-919) are never handed to clients
        brokers: tuple[Broker, ...] = ()
    else:
        brokers = advertised_brokers(body.brokers, directory, "broker_id")
    return encode_response(_correlation_id(frame), dataclasses.replace(body, brokers=brokers))


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


Bytes = bytes | bytearray | memoryview
TaggedField = tuple[int, Bytes]


def tagged_entries(section: Bytes) -> list[TaggedField]:
    """(tag, data) of each field of a tagged-fields section that fills `section` exactly."""
    view = memoryview(section).toreadonly()
    try:
        count, pos = read_unsigned_varint(view, 0)
        entries: list[TaggedField] = []
        for _ in range(count):
            tag, used = read_unsigned_varint(view, pos)
            size, used2 = read_unsigned_varint(view, pos + used)
            pos += used + used2
            entries.append((tag, view[pos : pos + size]))
            pos += size
    except DECODE_ERRORS as exc:
        raise MalformedResponse(f"bad top-level tagged fields: {exc!r}") from exc
    if pos != len(view):
        raise MalformedResponse("top-level tagged fields do not end with the answer")
    return entries


def tagged_section(entries: list[TaggedField]) -> bytes:
    parts: list[Bytes] = [_uvarint_bytes(len(entries))]
    for tag, data in entries:
        parts += (_uvarint_bytes(tag), _uvarint_bytes(len(data)), data)
    return b"".join(parts)


#: the tag of the filler field that keeps a streamed answer's length (unused by the schemas
#: of Produce v10-13 and Fetch v16-18, whose readers skip unknown tags)
PAD_TAG = 127


def padded_section(entries: list[TaggedField], length: int) -> bytes | None:
    """A section of exactly `length` bytes holding `entries`, plus a filler field if needed;
    None if they cannot fit."""
    plain = tagged_section(entries)
    if len(plain) == length:
        return plain
    for filler in range(max(length - len(plain) - 2, 0) + 1):
        out = tagged_section([*entries, (PAD_TAG, bytes(filler))])
        if len(out) == length:
            return out
        if len(out) > length:
            break
    return None


#: a KIP-951 node endpoints array's reader and writer
EndpointArray: TypeAlias = (
    "tuple[Reader[tuple[Broker, ...] | None], Writer[Sequence[Broker] | None]]"
)
_ENDPOINT_ARRAYS: dict[tuple[int, int], EndpointArray] = {}


def _endpoint_array(api_key: int, api_version: int) -> EndpointArray:
    codec = _ENDPOINT_ARRAYS.get((api_key, api_version))
    if codec is None:
        cls = response_module(api_key, api_version).NodeEndpoint
        codec = (
            compact_array_reader(entity_reader(cls)),
            compact_array_writer(entity_writer(cls)),
        )
        _ENDPOINT_ARRAYS[api_key, api_version] = codec
    return codec


def advertised_endpoints(
    data: Bytes, api_key: int, api_version: int, directory: BrokerDirectory
) -> tuple[Broker, ...]:
    read, _write = _endpoint_array(api_key, api_version)
    try:
        endpoints, used = read(data, 0)
    except DECODE_ERRORS as exc:
        raise MalformedResponse(f"cannot read KIP-951 node endpoints: {exc!r}") from exc
    if endpoints is None or used != len(data):
        raise MalformedResponse("malformed KIP-951 node endpoints")
    return advertised_brokers(endpoints, directory)


def encode_endpoints(endpoints: Sequence[Broker], api_key: int, api_version: int) -> bytes:
    out = io.BytesIO()
    _endpoint_array(api_key, api_version)[1](out, endpoints)
    return out.getvalue()


#: tag 0's payload when it holds no endpoints: a compact array of length 0 (tansu sends it)
EMPTY_ENDPOINTS: Final = b"\x01"


def rewrite_tagged_fields(
    section: Bytes,
    api_key: int,
    api_version: int,
    directory: BrokerDirectory,
    keep_length: bool,
) -> Bytes:
    """The top-level tagged fields with node endpoints (tag 0) advertising the proxy.

    With `keep_length` (the answer's size has already been relayed) the result is exactly as
    long as `section`: shorter is filled with an unknown tag clients skip (`PAD_TAG`); longer
    drops endpoints from the end until it fits (a client then refreshes its metadata, as it
    does with a broker older than KIP-951). No real address is ever relayed.
    """
    if len(section) == 1 and section[0] == 0:  # no tagged field: the common case
        return section
    entries = tagged_entries(section)
    if not any(tag == 0 and bytes(data) != EMPTY_ENDPOINTS for tag, data in entries):
        return section  # no endpoints to advertise, or an empty list of them
    out: list[TaggedField] = []
    endpoints: tuple[Broker, ...] = ()
    for tag, data in entries:
        if tag == 0:
            endpoints = advertised_endpoints(data, api_key, api_version, directory)
            out.append((0, encode_endpoints(endpoints, api_key, api_version)))
        else:
            out.append((tag, data))
    if not keep_length:
        return tagged_section(out)
    at = next(i for i, (tag, _) in enumerate(out) if tag == 0)
    for keep in range(len(endpoints), -1, -1):
        out[at] = (0, encode_endpoints(endpoints[:keep], api_key, api_version))
        fitted = padded_section(out, len(section))
        if fitted is not None:
            return fitted
    fitted = padded_section(out[:at] + out[at + 1 :], len(section))
    if fitted is None:  # other tags alone cannot be longer than the section they came from
        raise MalformedResponse("cannot fit KIP-951 node endpoints in the answer's length")
    return fitted


def rewrite_node_endpoints(
    frame: bytes | memoryview, api_key: int, api_version: int, directory: BrokerDirectory
) -> bytes | memoryview:
    """KIP-951: Produce v10+ and Fetch v16+ answers may carry new leaders' endpoints in their
    top-level tagged fields, found by offsets (protocol.answerwalk) without decoding records.

    They are empty unless a partition failed with NOT_LEADER_OR_FOLLOWER or
    FENCED_LEADER_EPOCH, so the common case returns the frame untouched.
    """
    start = tail_offset(SCHEMAS[api_key, api_version], frame)
    if no_node_endpoints(frame, start):  # the common case
        return frame
    section = memoryview(frame)[start:]
    new = rewrite_tagged_fields(section, api_key, api_version, directory, keep_length=False)
    if new is section:
        return frame
    payload = b"".join((memoryview(frame)[4:start], new))
    return _SIZE.pack(len(payload)) + payload


class EndpointStream:
    """Relays a Produce/Fetch answer as it streams in, holding only its top-level tagged
    fields, which are rewritten in place (same length) if they carry node endpoints."""

    __slots__ = ("_api_key", "_api_version", "_directory", "_walk")

    def __init__(self, api_key: int, api_version: int, length: int, directory: BrokerDirectory):
        self._walk = AnswerWalk(SCHEMAS[api_key, api_version], length)
        self._api_key = api_key
        self._api_version = api_version
        self._directory = directory

    def feed(self, piece: memoryview) -> memoryview:
        """The part of `piece` that may be relayed now."""
        before = self._walk.feed(piece)
        return piece if before == len(piece) else piece[:before]

    def opaque_ahead(self) -> int:
        return self._walk.opaque()

    def skip(self, n: int) -> None:
        self._walk.skip(n)

    def finish(self) -> bytes | memoryview:
        """The held tagged fields, rewritten if needed."""
        out = rewrite_tagged_fields(
            bytes(self._walk.finish()), self._api_key, self._api_version, self._directory, True
        )
        return out if not isinstance(out, bytearray) else bytes(out)


def _correlation_id(frame: bytes | memoryview) -> int:
    correlation_id: int
    (correlation_id,) = _SIZE.unpack_from(frame, 4)
    return correlation_id


def has_node_endpoints(api_key: int, api_version: int) -> bool:
    return (api_key == PRODUCE and api_version >= 10) or (api_key == FETCH and api_version >= 16)
