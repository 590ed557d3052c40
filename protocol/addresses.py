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
from typing import Any, Protocol

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import compact_array_reader, legacy_array_reader
from kio.serial.writers import compact_array_writer, legacy_array_writer
from kio.static.primitive import i32

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
        if response_class(METADATA, api_version).__flexible__:
            self.read = compact_array_reader(entity_reader(cls))
            self.write = compact_array_writer(entity_writer(cls))
        else:
            self.read = legacy_array_reader(entity_reader(cls))
            self.write = legacy_array_writer(entity_writer(cls))
        self.offset_in_body = 4 if api_version >= 3 else 0  # throttle_time_ms from v3


_BROKER_ARRAYS: dict[int, _BrokerArray] = {}


def metadata_brokers_span(frame: bytes | memoryview, api_version: int) -> tuple[int, int, tuple]:
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


def encode_metadata_brokers(brokers: tuple, api_version: int) -> bytes:
    out = io.BytesIO()
    _BROKER_ARRAYS[api_version].write(out, brokers)
    return out.getvalue()


def advertised_brokers(
    brokers: tuple, directory: BrokerDirectory, id_field: str = "node_id"
) -> tuple:
    """The brokers with proxy addresses; unmappable ones are left out."""
    out = []
    for b in brokers:
        node_id = getattr(b, id_field)
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
        self._entries: dict[tuple, bytes] = {}

    def rewrite(
        self, raw: bytes, brokers: tuple, api_version: int, directory: BrokerDirectory
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
        self._entries: dict[tuple, Any] = {}

    def get(self, key: tuple) -> Any:
        return self._entries.get(key)

    def put(self, key: tuple, value: Any) -> None:
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


def _coordinator_fields(entity: Any, directory: BrokerDirectory) -> dict[str, Any]:
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
        brokers: tuple = ()  # controller endpoints (KIP-919) are never handed to clients
    else:
        brokers = advertised_brokers(body.brokers, directory, "broker_id")
    return encode_response(_correlation_id(frame), dataclasses.replace(body, brokers=brokers))


def rewrite_node_endpoints(
    frame: bytes | memoryview, api_key: int, api_version: int, directory: BrokerDirectory
) -> bytes | memoryview:
    """KIP-951: Produce v10+ and Fetch v16+ responses may carry new leaders' endpoints.

    They are empty unless a partition failed with NOT_LEADER_OR_FOLLOWER or
    FENCED_LEADER_EPOCH, so the common case returns the frame untouched.
    """
    body = decode_response(frame, api_key, api_version)
    if not body.node_endpoints:
        return frame
    endpoints = advertised_brokers(body.node_endpoints, directory)
    return encode_response(
        _correlation_id(frame), dataclasses.replace(body, node_endpoints=endpoints)
    )


def _correlation_id(frame: bytes | memoryview) -> int:
    return _SIZE.unpack_from(frame, 4)[0]


def has_node_endpoints(api_key: int, api_version: int) -> bool:
    return (api_key == PRODUCE and api_version >= 10) or (api_key == FETCH and api_version >= 16)
