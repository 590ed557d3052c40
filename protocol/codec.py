"""Decode and encode whole messages with kio, with the guards kio itself lacks.

kio drops unknown tagged fields on re-encode, so these helpers are used only where a message
must be understood or rewritten; everything else is forwarded or spliced as bytes.
"""

from __future__ import annotations

import io
import struct
from typing import Any, Final

from kio.index import KioIndexError
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from aclgate.protocol import arrays
from aclgate.protocol.header import MalformedRequest, RequestHeader, skip_tagged_fields
from aclgate.protocol.versions import request_class, response_class

_SIZE: Final = struct.Struct(">i")
#: what a kio read can raise on bad or unexpected input
DECODE_ERRORS: Final = (
    KioIndexError,
    SerialError,
    KeyError,
    ValueError,
    IndexError,
    struct.error,
    MalformedRequest,  # raised by skip_tagged_fields
)
ENCODE_ERRORS: Final = (SerialError, struct.error, ValueError, TypeError, OverflowError)


class MalformedResponse(Exception):
    """An upstream response the proxy must rewrite could not be parsed: fail closed."""


def decode_request(frame: bytes | memoryview, header: RequestHeader) -> Any:
    """The request body as a kio entity; MalformedRequest when it does not parse.

    Bytes after the body are ignored, as Kafka's broker ignores them (RequestContext parses
    what the schema needs): librdkafka 2.16 sends all-topics Metadata v12 requests with three
    extra bytes, so rejecting them would break a real client the broker accepts. The proxy
    reads a request exactly as far as the broker reads it. Array counts are checked first
    (protocol.arrays): kio would read a null array where the schema forbids one, and abort the
    process allocating for a count the frame cannot hold.
    """
    cls = request_class(header.api_key, header.api_version)
    try:
        arrays.check(cls, frame, header.body_offset)
        body, _used = entity_reader(cls)(frame, header.body_offset)
    except DECODE_ERRORS as exc:
        raise MalformedRequest(
            f"cannot decode {cls.__name__} v{header.api_version}: {exc!r}"
        ) from exc
    return body


def response_body_offset(frame: bytes | memoryview, api_key: int, api_version: int) -> int:
    """Offset of the body in a framed response: after size, correlation id and header tags."""
    header_cls = response_class(api_key, api_version).__header_schema__
    return skip_tagged_fields(frame, 8) if header_cls.__flexible__ else 8


def decode_response(frame: bytes | memoryview, api_key: int, api_version: int) -> Any:
    cls = response_class(api_key, api_version)
    try:
        offset = response_body_offset(frame, api_key, api_version)
        body, _used = entity_reader(cls)(frame, offset)
    except DECODE_ERRORS as exc:
        raise MalformedResponse(f"cannot decode {cls.__name__} v{api_version}: {exc!r}") from exc
    return body


def framed(prefix: bytes | memoryview, body: Any, error: type[Exception]) -> bytes:
    """size + `prefix` (header bytes) + the encoded `body`; encoding failures raise `error`."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(prefix)
    try:
        entity_writer(type(body))(out, body)
    except ENCODE_ERRORS as exc:
        raise error(f"cannot encode {type(body).__name__}: {exc!r}") from exc
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def encode_response(correlation_id: int, body: Any) -> bytes:
    """A framed response: size, header (v0 or v1 as the class says), body."""
    header_cls = type(body).__header_schema__
    return framed(encode_entity(header_cls(correlation_id=correlation_id)), body, MalformedResponse)


def encode_entity(body: Any) -> bytes:
    """One entity's bytes (no header, no size): for splicing into an existing message."""
    out = io.BytesIO()
    entity_writer(type(body))(out, body)
    return out.getvalue()


def frame_with_size(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


def encode_request(correlation_id: int, body: Any, client_id: str | None = "aclgate") -> bytes:
    """A framed request built by the proxy itself (control connection, upstream SASL)."""
    header_cls = body.__header_schema__
    header = header_cls(
        request_api_key=body.__api_key__,
        request_api_version=body.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    return framed(encode_entity(header), body, MalformedRequest)
