"""Connections to the upstream cluster.

`UpstreamConnector` opens the TCP connections that carry client traffic (one per client
connection, never shared). `ControlClient` is the proxy's own connection for its own questions
(which brokers exist, topic id -> name): never a client's connection, so client correlation
ids and response order are never disturbed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, TypeVar, cast

from aclgate.protocol.codec import decode_response, encode_request
from aclgate.protocol.versions import KIO_RANGES

log = logging.getLogger("aclgate.upstream")
_SIZE = struct.Struct(">i")
P = TypeVar("P", bound=asyncio.Protocol)
METADATA, API_VERSIONS = 3, 18


class UpstreamUnavailable(ConnectionError):
    """No upstream broker could be reached."""


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


class UpstreamAuthError(ConnectionError):
    """The cluster refused the proxy's own credentials."""


Roundtrip = Callable[[Any], Awaitable[Any]]


class UpstreamStream(NamedTuple):
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    #: the SASL session lifetime the cluster granted in ms (KIP-368); 0 for none
    session_lifetime_ms: int


def stream_roundtrip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str = "aclgate"
) -> Roundtrip:
    """One request, one response, on the proxy's own correlation ids (nothing else in flight)."""
    ids = itertools.count(1)

    async def roundtrip(body: Any) -> Any:
        correlation_id = next(ids)
        writer.write(encode_request(correlation_id, body, client_id))
        await writer.drain()
        size = _SIZE.unpack(await reader.readexactly(4))[0]
        frame = _SIZE.pack(size) + await reader.readexactly(size)
        return decode_response(frame, body.__api_key__, body.__version__)

    return roundtrip


async def sasl_exchange(roundtrip: Roundtrip, client: Any, mechanism: str) -> int:
    """SaslHandshake v1 + SaslAuthenticate v1 rounds with the proxy's own credentials.

    Used for the first login and for KIP-368 re-authentication alike. Returns the session
    lifetime the cluster granted in ms (0: the cluster sets none, connections.max.reauth.ms
    unset)."""
    from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    handshake = await roundtrip(SaslHandshakeRequest(mechanism=mechanism))
    if handshake.error_code != 0:
        raise UpstreamAuthError(
            f"cluster refused SASL mechanism {mechanism} (error {int(handshake.error_code)}; "
            f"enabled there: {', '.join(handshake.mechanisms)})"
        )
    token = client.initial_response()
    while True:
        answer = await roundtrip(SaslAuthenticateRequest(auth_bytes=token))
        if answer.error_code != 0:
            raise UpstreamAuthError(
                f"cluster refused the proxy's credentials: {answer.error_message}"
            )
        token = client.evaluate_challenge(bytes(answer.auth_bytes))
        if client.complete:
            return max(0, int(answer.session_lifetime.total_seconds() * 1000))
        if token is None:
            raise UpstreamAuthError("SASL exchange with the cluster ended before completing")


class UpstreamConnector:
    """Opens connections to brokers: TCP, TLS if configured, then the proxy's own SASL login.
    `security` is a proxy.security.upstreamlogin.UpstreamSecurity: its TLS context and credentials
    are asked for at each new connection (they follow their files)."""

    def __init__(self, timeout: float = 10.0, security: Any = None):
        self.timeout = timeout
        self.security = security

    @property
    def _ssl(self) -> Any:
        return self.security.ssl_context if self.security is not None else None

    @property
    def sasl(self) -> bool:
        return self.security is not None and self.security.protocol.startswith("SASL")

    async def open(
        self, host: str, port: int, protocol_factory: Callable[[], P]
    ) -> tuple[asyncio.Transport, P, int]:
        """A connection for a client's traffic; also returns the SASL session lifetime the
        cluster granted in ms (0: none, or not SASL)."""
        if self.sasl:
            _reader, writer, lifetime_ms = await self.open_stream(host, port)
            # typed WriteTransport, but a stream's transport is a full (readable) Transport
            transport = cast(asyncio.Transport, writer.transport)
            protocol = protocol_factory()
            transport.set_protocol(protocol)  # nothing is pending: the broker waits for us
            # A StreamWriter closes its transport when it is garbage-collected
            # (StreamWriter.__del__): keep it alive as long as the protocol that now owns the
            # transport, or the connection dies as soon as this function returns.
            protocol._aclgate_login_stream = writer  # type: ignore[attr-defined]
            return transport, protocol, lifetime_ms
        loop = asyncio.get_running_loop()
        ssl_ctx = self._ssl
        async with asyncio.timeout(self.timeout):
            transport, protocol = await loop.create_connection(
                protocol_factory, host, port, ssl=ssl_ctx, server_hostname=host if ssl_ctx else None
            )
        set_nodelay(transport)
        return transport, protocol, 0

    async def reauthenticate(self, roundtrip: Roundtrip) -> int:
        """KIP-368: log in again on an open connection; returns the new session lifetime."""
        async with asyncio.timeout(self.timeout):
            client = await self.security.new_sasl_client()
        async with asyncio.timeout(self.timeout):
            return await sasl_exchange(roundtrip, client, self.security.mechanism)

    async def open_stream(self, host: str, port: int) -> UpstreamStream:
        # the credentials first (an OAUTHBEARER token may have to be fetched): no broker
        # connection is held while the identity provider answers
        client = None
        if self.security is not None:
            async with asyncio.timeout(self.timeout):
                client = await self.security.new_sasl_client()
        ssl_ctx = self._ssl
        async with asyncio.timeout(self.timeout):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=ssl_ctx, server_hostname=host if ssl_ctx else None
            )
        set_nodelay(writer.transport)
        lifetime_ms = 0
        if client is not None:
            try:
                async with asyncio.timeout(self.timeout):
                    lifetime_ms = await sasl_exchange(
                        stream_roundtrip(reader, writer), client, self.security.mechanism
                    )
            except BaseException:
                writer.close()
                raise
        return UpstreamStream(reader, writer, lifetime_ms)


class ControlClient:
    """A minimal Kafka client on the proxy's own connection, one request at a time."""

    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        connector: UpstreamConnector,
        client_id: str = "aclgate-control",
        timeout: float = 10.0,
    ):
        self.bootstrap = list(bootstrap)
        self.connector = connector
        self.client_id = client_id
        self.timeout = timeout
        self.api_ranges: dict[int, tuple[int, int]] = {}
        self._lock = asyncio.Lock()
        self._stream: UpstreamStream | None = None
        #: when the SASL session (KIP-368) must be renewed: then the next request reconnects
        self._renew_at = math.inf
        self._correlation = itertools.count(1)
        self._next_server = 0

    async def _connect(self) -> UpstreamStream:
        errors = []
        for i in range(len(self.bootstrap)):
            host, port = self.bootstrap[(self._next_server + i) % len(self.bootstrap)]
            try:
                stream = await self.connector.open_stream(host, port)
            except (OSError, TimeoutError) as exc:
                errors.append(f"{host}:{port}: {exc!r}")
                continue
            self._next_server = (self._next_server + i) % len(self.bootstrap)
            self._stream = stream
            if stream.session_lifetime_ms:  # renew early, as Kafka's clients do (85-95%)
                self._renew_at = time.monotonic() + stream.session_lifetime_ms * 0.85 / 1000
            try:
                self.api_ranges = await self._api_versions()
            except (OSError, EOFError) as exc:
                # something listens there but is no Kafka broker (it closed on ApiVersions, or
                # answered something else): unreachable as a cluster, not a crash of the proxy
                self._drop()
                errors.append(f"{host}:{port}: no Kafka answer to ApiVersions: {exc!r}")
                continue
            return stream
        raise UpstreamUnavailable("no upstream bootstrap server reachable: " + "; ".join(errors))

    async def _roundtrip(self, body: Any) -> Any:
        if self._stream is not None and time.monotonic() >= self._renew_at:
            self._drop()  # a fresh login beats holding the other requests for a re-login
        reader, writer, _ = self._stream or await self._connect()
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        writer.write(encode_request(correlation_id, body, self.client_id))
        await writer.drain()
        size = _SIZE.unpack(await reader.readexactly(4))[0]
        frame = _SIZE.pack(size) + await reader.readexactly(size)
        if _SIZE.unpack_from(frame, 4)[0] != correlation_id:
            raise ConnectionError("control connection: correlation id mismatch")
        return decode_response(frame, body.__api_key__, body.__version__)

    async def _api_versions(self) -> dict[int, tuple[int, int]]:
        from kio.schema.api_versions.v0.request import ApiVersionsRequest

        response = await self._roundtrip(ApiVersionsRequest())
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}

    async def request(self, body: Any) -> Any:
        """Send one request; reconnects once (to the next bootstrap server) on failure."""
        async with self._lock:
            for attempt in (1, 2):
                try:
                    async with asyncio.timeout(self.timeout):
                        return await self._roundtrip(body)
                except (OSError, TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
                    self._drop()
                    if attempt == 2:
                        raise UpstreamUnavailable(f"control request failed: {exc!r}") from exc
                    self._next_server += 1
        raise AssertionError("unreachable")

    def version_for(self, api_key: int) -> int:
        """Highest version both the upstream and kio speak (the upstream's ranges are learnt
        on connect)."""
        lo, hi = KIO_RANGES[api_key]
        up = self.api_ranges.get(api_key, (lo, hi))
        return min(hi, up[1])

    async def metadata(self, topics: Sequence[str] | None = (), auto_create: bool = False) -> Any:
        """Metadata for `topics` (None = all topics, () = brokers only); `auto_create` has
        the cluster create those that are missing (v4+)."""
        import sys

        from aclgate.protocol.versions import request_class

        if self._stream is None:
            async with self._lock:
                if self._stream is None:
                    await self._connect()
        version = self.version_for(METADATA)
        cls = request_class(METADATA, version)
        mod = sys.modules[cls.__module__]
        fields: dict[str, object] = {
            "topics": None
            if topics is None
            else tuple(
                mod.MetadataRequestTopic(name=t, **({"topic_id": None} if version >= 10 else {}))
                for t in topics
            )
        }
        if version >= 4:
            fields["allow_auto_topic_creation"] = auto_create
        if 8 <= version <= 10:
            fields["include_cluster_authorized_operations"] = False
        if version >= 8:
            fields["include_topic_authorized_operations"] = False
        return await self.request(cls(**fields))

    def _drop(self) -> None:
        if self._stream is not None:
            self._stream.writer.close()
            self._stream = None
            self._renew_at = math.inf

    async def close(self) -> None:
        self._drop()
