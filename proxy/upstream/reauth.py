"""KIP-368 re-authentication of the proxy's own SASL login on a client's upstream connection.

A cluster with `connections.max.reauth.ms` grants each SASL login a session lifetime and
closes a connection whose session has expired when its next request arrives (anything but
SaslHandshake). Clients of the proxy never see that login, so the proxy renews it itself,
as Kafka's Java client does: at a random point between 85% and 95% of the lifetime it holds
the client's next requests (the session stalls; they wait in its backlog), waits until the
broker owes no response (the broker answers one request at a time anyway, so interleaving
would gain nothing), runs SaslHandshake + SaslAuthenticate on the same connection, and then
releases the held requests. The client sees a short pause at most, never a disconnect.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
from typing import Any, Protocol

from aclgate.protocol.codec import decode_response, encode_request
from aclgate.protocol.session import ProxySession
from aclgate.proxy.ops.metrics import ProxyMetrics
from aclgate.proxy.upstream.connector import UpstreamAuthError, UpstreamConnector


class ReauthServer(Protocol):
    """What re-authentication uses of the server: its login and its metrics."""

    @property
    def connector(self) -> UpstreamConnector: ...
    @property
    def metrics(self) -> ProxyMetrics: ...


class ReauthConnection(Protocol):
    """The client connection whose upstream login is renewed (proxy/listen/connection.py)."""

    @property
    def session(self) -> ProxySession | None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def peer(self) -> str: ...
    @property
    def server(self) -> ReauthServer: ...
    def close(self, reason: str, kind: str | None) -> None: ...


log = logging.getLogger("aclgate.upstream")
_SIZE = struct.Struct(">i")
#: Kafka's client re-authenticates between 85% and 95% of the session lifetime
EARLIEST, LATEST = 0.85, 0.95


class UpstreamReauthenticator:
    """Renews the SASL session of one upstream connection before the broker expires it."""

    def __init__(self, conn: ReauthConnection, transport: asyncio.Transport):
        self.conn = conn
        self.transport = transport
        #: the renewal is due: client requests are held until it is done
        self.due = False
        #: SASL frames are in flight: upstream bytes belong to the exchange, not the client
        self.active = False
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[bytes] | None = None
        self._ids = 0

    def schedule(self, lifetime_ms: int) -> None:
        if lifetime_ms <= 0:
            return
        delay = lifetime_ms / 1000 * random.uniform(EARLIEST, LATEST)
        self._timer = asyncio.get_running_loop().call_later(delay, self._become_due)

    def _become_due(self) -> None:
        self._timer = None
        session = self.conn.session
        if self.conn.closed or session is None:
            return
        self.due = True
        session.hold()  # new client requests wait in the session's backlog
        self.maybe_start()

    def maybe_start(self) -> None:
        """Called when due and after each upstream read: start once the broker owes nothing."""
        session = self.conn.session
        if self.due and not self.active and session is not None and session.upstream_idle:
            self.active = True
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        server = self.conn.server
        try:
            lifetime_ms = await server.connector.reauthenticate(self._roundtrip)
        except asyncio.CancelledError:
            raise
        except (UpstreamAuthError, OSError, TimeoutError, ConnectionError) as exc:
            server.metrics.upstream_reauthentications.labels("failed").inc()
            self.conn.close(f"re-authentication to the cluster failed: {exc}", "upstream_reauth")
            return
        server.metrics.upstream_reauthentications.labels("ok").inc()
        log.debug(
            "re-authenticated upstream for %s; next session lifetime %d ms",
            self.conn.peer,
            lifetime_ms,
        )
        self.active = self.due = False
        if self._buffer:  # the broker sent more than the exchange asked for
            self.conn.close(
                "unexpected bytes from the cluster after re-authentication", "upstream_reauth"
            )
            return
        self.schedule(lifetime_ms)
        session = self.conn.session
        if not self.conn.closed and session is not None:
            session.release()  # the held requests go out now, in order

    async def _roundtrip(self, body: Any) -> Any:
        self._ids += 1
        correlation_id = self._ids  # nothing else is in flight on the connection now
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(encode_request(correlation_id, body, "aclgate"))
        self._take_frame()
        frame = await self._waiter
        if _SIZE.unpack_from(frame, 4)[0] != correlation_id:
            raise ConnectionError("correlation id mismatch in the re-authentication exchange")
        return decode_response(frame, body.__api_key__, body.__version__)

    def feed(self, data: bytes) -> None:
        """Upstream bytes while the exchange runs."""
        self._buffer += data
        self._take_frame()

    def _take_frame(self) -> None:
        buf, waiter = self._buffer, self._waiter
        if waiter is None or waiter.done() or len(buf) < 4:
            return
        end = 4 + _SIZE.unpack_from(buf)[0]
        if len(buf) >= end:
            frame = bytes(buf[:end])
            del buf[:end]
            waiter.set_result(frame)

    def cancel(self) -> None:
        """The connection is closing."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.cancel()
