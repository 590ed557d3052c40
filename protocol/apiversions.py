"""ApiVersions: trim what the broker advertises to what the proxy can handle (fail closed).

The response is rewritten by splicing: only the api_keys array is rebuilt (entries kept by
slicing, min/max patched), while throttle time and the top-level tagged fields (supported and
finalized features) are copied verbatim, so a broker that adds a tag cannot break the proxy.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from aclgate.protocol.codec import DECODE_ERRORS, MalformedResponse
from aclgate.protocol.header import skip_tagged_fields
from aclgate.protocol.lengths import length_prefix, read_length

API_VERSIONS = 18
UNSUPPORTED_VERSION = 35
_H = struct.Struct(">h")
_ENTRY = struct.Struct(">hhh")
_FIRST_FLEXIBLE = 3
#: where the body starts: after the size and the correlation id (the header is always v0)
_BODY = 8
_PRODUCE = 0


def trim_api_versions(
    frame: bytes | memoryview,
    api_version: int,
    allowed: Mapping[int, tuple[int, int]],
    dropped: set[int] | None = None,
    own: Mapping[int, tuple[int, int]] | None = None,
) -> bytes:
    """Rewrite a framed ApiVersions response so only `allowed` keys and versions remain.

    `allowed` maps api_key -> (min, max) the proxy accepts. Each advertised range is clamped
    to the intersection; keys outside `allowed` or with an empty intersection are dropped
    (their numbers are added to `dropped` for logging). Produce keeps the broker's minimum
    (KAFKA-18659: old librdkafka derives features from it); the proxy still refuses v0-2.
    `own` keys (SASL on a SASL listener) are announced with the proxy's own range whatever the
    broker says, since the proxy, not the broker, serves them.
    """
    # Response header is always v0 for ApiVersions: size(4) + correlation id(4).
    try:
        (error_code,) = _H.unpack_from(frame, _BODY)
    except DECODE_ERRORS as exc:
        raise MalformedResponse(f"cannot parse ApiVersions v{api_version} response: {exc}") from exc
    if error_code == 0:
        return _trim(frame, api_version, allowed, dropped, own)
    # Kafka writes an error answer in the version it serves the request at: v0 when it cannot
    # parse the request's version (UNSUPPORTED_VERSION, KIP-511), else the request's own
    # version; e.g. INVALID_REQUEST for an invalid client_software_name at v3+ is 12 bytes
    # after the size: correlation id, error code 42, an empty compact array, throttle time,
    # no tags. Each layout is tried whole (nothing left over), the likely one first; no proxy
    # keys are added to an error answer, so Kafka's answer reaches the client as it was sent
    # (key 18's range in an UNSUPPORTED_VERSION answer is still capped to the proxy's).
    versions = (0, api_version) if error_code == UNSUPPORTED_VERSION else (api_version, 0)
    problems = []
    for version in versions:
        try:
            return _trim(frame, version, allowed, None, None, whole=True)
        except MalformedResponse as exc:
            problems.append(str(exc))
    raise MalformedResponse(f"ApiVersions error answer {error_code}: {'; '.join(problems)}")


def _trim(
    frame: bytes | memoryview,
    api_version: int,
    allowed: Mapping[int, tuple[int, int]],
    dropped: set[int] | None,
    own: Mapping[int, tuple[int, int]] | None,
    whole: bool = False,
) -> bytes:
    """trim_api_versions for a body laid out as `api_version`; `whole`: the body must end
    exactly where that version's fields do (throttle time, tagged fields)."""
    body = _BODY
    flexible = api_version >= _FIRST_FLEXIBLE
    try:
        pos = body + 2
        count, n = read_length(frame, pos, flexible)
        pos += n
        kept: list[bytes] = []
        for _ in range(max(count, 0)):
            key, lo, hi = _ENTRY.unpack_from(frame, pos)
            entry_end = pos + 6
            if flexible:
                entry_end = skip_tagged_fields(frame, entry_end)
            tags = bytes(frame[pos + 6 : entry_end])
            pos = entry_end
            ours = allowed.get(key)
            if own and key in own:
                continue  # replaced below by the proxy's own range
            if ours is None:
                if dropped is not None:
                    dropped.add(key)
                continue
            new_lo = lo if key == _PRODUCE else max(lo, ours[0])
            new_hi = min(hi, ours[1])
            if new_hi < max(lo, ours[0]):
                if dropped is not None:
                    dropped.add(key)
                continue
            kept.append(_ENTRY.pack(key, new_lo, new_hi) + tags)
        rest = bytes(frame[pos:])
        if whole:
            end = pos + (4 if api_version >= 1 else 0)  # throttle_time_ms from v1
            if flexible:
                end = skip_tagged_fields(frame, end)
            if end != len(frame):
                raise ValueError(f"{len(frame) - end} bytes where the v{api_version} body ends")
        tag = b"\0" if flexible else b""
        for key, (lo, hi) in sorted((own or {}).items()):
            kept.append(_ENTRY.pack(key, lo, hi) + tag)
    except DECODE_ERRORS as exc:
        raise MalformedResponse(f"cannot parse ApiVersions v{api_version} response: {exc}") from exc
    payload = (
        bytes(frame[4 : body + 2]) + length_prefix(len(kept), flexible) + b"".join(kept) + rest
    )
    return struct.pack(">i", len(payload)) + payload


def unsupported_version_response(correlation_id: int, max_version: int) -> bytes:
    """Kafka's KIP-511 answer to an ApiVersions version it cannot parse: a v0 body with
    UNSUPPORTED_VERSION and ApiVersions' own range, so the client retries lower."""
    payload = struct.pack(">ihi", correlation_id, UNSUPPORTED_VERSION, 1) + _ENTRY.pack(
        API_VERSIONS, 0, max_version
    )
    return struct.pack(">i", len(payload)) + payload


def local_api_versions_response(
    correlation_id: int, api_version: int, ranges: Mapping[int, tuple[int, int]]
) -> bytes:
    """An ApiVersions answer built by the proxy itself (used before SASL authentication,
    from ranges cached off the upstream)."""
    entries = [
        _ENTRY.pack(k, lo, hi) + (b"\0" if api_version >= _FIRST_FLEXIBLE else b"")
        for k, (lo, hi) in sorted(ranges.items())
    ]
    if api_version >= _FIRST_FLEXIBLE:
        body = (
            _H.pack(0)
            + length_prefix(len(entries), True)
            + b"".join(entries)
            + struct.pack(">i", 0)
            + b"\0"
        )
    else:
        body = _H.pack(0) + struct.pack(">i", len(entries)) + b"".join(entries)
        if api_version >= 1:
            body += struct.pack(">i", 0)
    payload = struct.pack(">i", correlation_id) + body
    return struct.pack(">i", len(payload)) + payload
