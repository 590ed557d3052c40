"""Request and response headers, parsed by hand.

kio's RequestHeader v2 reader rejects any tagged field, but Kafka (KIP-482) says unknown tags
must be skipped, so the request header is peeked with struct and its tags are skipped. Header
bytes are forwarded verbatim, never re-encoded.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from kio.serial.errors import SerialError
from kio.serial.readers import read_unsigned_varint

from aclgate.protocol import bounds
from aclgate.protocol.versions import REQUEST_FLEXIBLE

_HDR: Final = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_INT32: Final = struct.Struct(">i")
HEADER_PREFIX: Final = _HDR.size  # 10 bytes before the client id string


class MalformedRequest(Exception):
    """The frame cannot be parsed: the connection must be closed (Kafka does the same)."""


class UnknownApi(MalformedRequest):
    """The (api_key, api_version) pair is not one the proxy can parse."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int):
        super().__init__(f"unsupported api_key={api_key} api_version={api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    #: cut to bounds.CLIENT_ID characters (protocol/bounds.py)
    client_id: str | None
    flexible: bool
    #: offset of the request body inside the frame (the frame includes its 4-byte size prefix)
    body_offset: int


_tuple_new: Final = tuple.__new__


def skip_tagged_fields(buf: bytes | memoryview, offset: int) -> int:
    """Offset just past a tagged-field section, whatever tags it holds."""
    try:
        count, n = read_unsigned_varint(buf, offset)
        offset += n
        for _ in range(count):
            _tag, n = read_unsigned_varint(buf, offset)
            offset += n
            size, n = read_unsigned_varint(buf, offset)
            offset += n + size
    except (SerialError, ValueError, IndexError) as exc:
        raise MalformedRequest(f"bad tagged fields: {exc!r}") from exc
    if offset > len(buf):
        raise MalformedRequest("tagged fields run past the end of the frame")
    return offset


def peek_ids(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a framed request; cheap, no validation."""
    if len(frame) < 12:
        raise MalformedRequest(f"request frame of {len(frame) - 4} bytes is shorter than a header")
    api_key: int
    api_version: int
    correlation_id: int
    api_key, api_version, correlation_id, _ = _HDR.unpack_from(frame, 4)
    return api_key, api_version, correlation_id


def parse_request_header(frame: bytes | memoryview) -> RequestHeader:
    """Parse the header of a framed request (size prefix included).

    Raises UnknownApi when the key/version is not parseable (the header length is then
    unknown), MalformedRequest when the bytes are inconsistent.
    """
    if len(frame) < 4 + HEADER_PREFIX:
        raise MalformedRequest(f"request frame of {len(frame) - 4} bytes is shorter than a header")
    api_key: int
    api_version: int
    correlation_id: int
    cid_len: int
    api_key, api_version, correlation_id, cid_len = _HDR.unpack_from(frame, 4)
    flexible = REQUEST_FLEXIBLE.get((api_key, api_version))
    if flexible is None:
        raise UnknownApi(api_key, api_version, correlation_id)
    offset = 4 + HEADER_PREFIX
    client_id = None
    if cid_len >= 0:
        end = offset + cid_len
        if end > len(frame):
            raise MalformedRequest("client_id runs past the end of the frame")
        raw = bytes(frame[offset:end])
        client_id = _CLIENT_IDS.get(raw)
        if client_id is None:
            client_id = _client_id(raw)
        offset = end
    elif cid_len != -1:
        raise MalformedRequest(f"negative client_id length {cid_len}")
    if flexible:
        # almost always an empty tag section: one zero byte
        if offset < len(frame) and frame[offset] == 0:
            offset += 1
        else:
            offset = skip_tagged_fields(frame, offset)
    # tuple.__new__ directly: the NamedTuple's own __new__ is one more Python frame
    return _tuple_new(
        RequestHeader, (api_key, api_version, correlation_id, client_id, flexible, offset)
    )


#: client ids repeat on every request of a connection: decode each once. Only ids of at most
#: bounds.CLIENT_ID bytes are kept, so the cache holds at most CLIENT_ID_CACHE_ENTRIES ×
#: (bounds.CLIENT_ID bytes of key and of text) whatever ids clients choose
_CLIENT_IDS: Final[dict[bytes, str]] = {}
CLIENT_ID_CACHE_ENTRIES: Final = 4096


def _client_id(raw: bytes) -> str:
    """The client id of `raw`, cut to bounds.CLIENT_ID characters (the header's bytes are
    forwarded untouched: only what the proxy keeps and writes is cut)."""
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise MalformedRequest("client_id is not valid UTF-8") from exc
    if len(raw) > bounds.CLIENT_ID:  # rare: decoded and cut on each request, never kept
        return bounds.bounded(text, bounds.CLIENT_ID)
    if len(_CLIENT_IDS) >= CLIENT_ID_CACHE_ENTRIES:
        _CLIENT_IDS.clear()
    _CLIENT_IDS[raw] = text
    return text


def response_header_bytes(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0 (correlation id) or v1 (plus an empty tagged-field section)."""
    return _INT32.pack(correlation_id) + (b"\x00" if flexible else b"")


def response_body_offset(frame: bytes | memoryview, flexible_header: bool) -> int:
    """Offset of the body inside a framed response (size prefix included)."""
    return skip_tagged_fields(frame, 8) if flexible_header else 8
