"""Which APIs the proxy serves, at which versions, and how their responses are treated.

The proxy advertises (in ApiVersions) and accepts only what it can handle safely; anything
else is closed on, as Kafka closes on a request it does not understand. This module holds the
transparent layer: address rewriting, ApiVersions trimming and Produce acks=0. Authorization
sits on top of it (protocol/enforce.py).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

from kio.serial.errors import SerialError
from kio.serial.readers import read_unsigned_varint

from aclgate.protocol.addresses import (
    EndpointStream,
    rewrite_describe_cluster,
    rewrite_find_coordinator,
    rewrite_metadata,
    rewrite_node_endpoints,
)
from aclgate.protocol.answerwalk import SCHEMAS, no_node_endpoints, tail_offset
from aclgate.protocol.apiversions import trim_api_versions
from aclgate.protocol.effects import DroppedApiKeys
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import MalformedRequest, RequestHeader
from aclgate.protocol.session import ProxySession, ResponseRewriter, Slot
from aclgate.protocol.shareanswers import BEFORE_ENDPOINTS, rewrite_share_endpoints
from aclgate.protocol.versions import KIO_RANGES

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CLUSTER = 0, 1, 3, 10, 18, 60
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36

#: api_key -> why it is never advertised nor forwarded. Documented in docs/apis.md.
BLOCKED: Final[dict[int, str]] = {
    **{
        k: "inter-broker / controller API: clients never send it"
        for k in (27, 52, 53, 54, 56, 58, 59, 62, 63, 67, 70, 73, 82, 83, 84, 85, 86, 87)
    },
    38: "delegation tokens would be issued to the proxy's upstream identity, not the client's",
    39: "delegation tokens would be issued to the proxy's upstream identity, not the client's",
    40: "delegation tokens would be issued to the proxy's upstream identity, not the client's",
    41: "delegation tokens would be issued to the proxy's upstream identity, not the client's",
    55: "DescribeQuorum returns controller endpoints (real addresses)",
    80: "raft voter changes are controller operations",
    81: "raft voter changes are controller operations",
    SASL_HANDSHAKE: "SASL is terminated by the proxy's listener, never forwarded",
    SASL_AUTHENTICATE: "SASL is terminated by the proxy's listener, never forwarded",
}

#: Produce v0-2 are gone from Kafka 4 (KIP-896) and kio; Produce's broker minimum is kept in
#: ApiVersions anyway (KAFKA-18659), and the session closes on anything below kio's minimum.


def allowed_versions(
    caps: Mapping[int, int] | None = None, blocked: Mapping[int, str] = BLOCKED
) -> dict[int, tuple[int, int]]:
    """api_key -> (min, max) the proxy parses and serves: kio's range, minus blocked keys,
    clamped by optional operator caps (e.g. {1: 12} keeps Fetch below topic ids)."""
    out: dict[int, tuple[int, int]] = {}
    for key, (lo, hi) in KIO_RANGES.items():
        if key in blocked:
            continue
        if caps and key in caps:
            hi = min(hi, caps[key])
        if hi >= lo:
            out[key] = (lo, hi)
    return out


# ----------------------------------------------------------------------- response rewriters


def _trim_api_versions(session: ProxySession, slot: Slot, frame: Frame) -> bytes:
    dropped: set[int] = set()
    out = trim_api_versions(
        frame, slot.api_version, session.allowed_versions, dropped, session.config.own_api_versions
    )
    if dropped:
        session.notify(DroppedApiKeys(frozenset(dropped)))
    return out


def _metadata(session: ProxySession, slot: Slot, frame: Frame) -> bytes:
    return rewrite_metadata(
        frame, slot.api_version, session.config.brokers, session.config.broker_arrays
    )


def _find_coordinator(session: ProxySession, slot: Slot, frame: Frame) -> bytes:
    return rewrite_find_coordinator(frame, slot.api_version, session.config.brokers)


def _describe_cluster(session: ProxySession, slot: Slot, frame: Frame) -> bytes:
    return rewrite_describe_cluster(frame, slot.api_version, session.config.brokers)


class _NodeEndpoints:
    """KIP-951 endpoints: found by offsets in a whole answer, or relayed as the answer
    streams in with only its top-level tagged fields kept back (protocol.answerwalk)."""

    def __call__(self, session: ProxySession, slot: Slot, frame: Frame) -> bytes | memoryview:
        # the common case decided here, compiled; addresses.py (interpreted) only when the
        # answer does carry endpoints (it walks the answer again: a leader change is rare)
        if no_node_endpoints(frame, tail_offset(SCHEMAS[slot.api_key, slot.api_version], frame)):
            return frame
        return rewrite_node_endpoints(frame, slot.api_key, slot.api_version, session.config.brokers)

    def stream(self, session: ProxySession, slot: Slot, length: int) -> EndpointStream:
        return EndpointStream(slot.api_key, slot.api_version, length, session.config.brokers)


_node_endpoints: Final = _NodeEndpoints()


def _share_endpoints(session: ProxySession, slot: Slot, frame: Frame) -> bytes | memoryview:
    return rewrite_share_endpoints(frame, slot.api_key, slot.api_version, session.config.brokers)


def address_rewriter(api_key: int, api_version: int) -> ResponseRewriter | None:
    """The rewrite every response of this key/version needs to keep clients on the proxy."""
    if api_key == METADATA:
        return _metadata
    if api_key == FIND_COORDINATOR:
        return _find_coordinator
    if api_key == DESCRIBE_CLUSTER:
        return _describe_cluster
    if api_key == API_VERSIONS:
        return _trim_api_versions
    if (api_key == PRODUCE and api_version >= 10) or (api_key == FETCH and api_version >= 16):
        return _node_endpoints
    if (api_key, api_version) in BEFORE_ENDPOINTS:  # ShareFetch, ShareAcknowledge
        return _share_endpoints
    return None


_REWRITERS: Final[dict[tuple[int, int], ResponseRewriter | None]] = {
    (k, v): address_rewriter(k, v) for k, (lo, hi) in KIO_RANGES.items() for v in range(lo, hi + 1)
}


def rewriter_for(header: RequestHeader) -> ResponseRewriter | None:
    return _REWRITERS.get((header.api_key, header.api_version))


# ---------------------------------------------------------------------------- Produce acks

_I16: Final = struct.Struct(">h")


def produce_acks(frame: Frame, header: RequestHeader) -> int:
    """`acks` sits right after the nullable transactional_id: peeked without decoding."""
    off = header.body_offset
    try:
        if header.flexible:
            n, used = read_unsigned_varint(frame, off)
            off += used + max(n - 1, 0)
        else:
            (n,) = _I16.unpack_from(frame, off)
            off += 2 + max(n, 0)
        acks: int = _I16.unpack_from(frame, off)[0]
        return acks
    except (struct.error, ValueError, IndexError, SerialError) as exc:  # a cut-off varint
        raise MalformedRequest(f"cannot read Produce acks: {exc}") from exc


# ------------------------------------------------------------------------ request handlers


def forward(
    session: ProxySession,
    header: RequestHeader,
    frame: Frame,
    rewrite: ResponseRewriter | None = None,
) -> Slot:
    """Forward with the response rewrite the key/version needs to keep clients on the proxy
    (addresses, ApiVersions trimming), or a given one (which then applies the address
    rewrite itself: protocol.enforce.base.then_addresses). The one forwarding function of
    the handlers; `ProxySession.forward` is the session's primitive under it."""
    return session.forward(
        header, frame, rewrite or _REWRITERS.get((header.api_key, header.api_version))
    )


def forward_produce(session: ProxySession, header: RequestHeader, frame: Frame) -> None:
    if produce_acks(frame, header) == 0:
        session.forward_without_response(frame)
    else:
        session.forward(header, frame, _REWRITERS.get((PRODUCE, header.api_version)))


def transparent_handlers(allowed: Mapping[int, tuple[int, int]]) -> dict[int, object]:
    """Handlers for a proxy that forwards everything it can parse (no authorization)."""
    handlers: dict[int, object] = dict.fromkeys(allowed, forward)
    handlers[PRODUCE] = forward_produce
    return handlers
