"""Glue between asyncio transports and the sans-IO ProxySession of one client connection."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from protocol.enforce.context import AuthContext
from protocol.hosts import java_host_string
from protocol.session import ProxySession
from proxy.upstream import set_nodelay

if TYPE_CHECKING:
    from proxy.server import ProxyServer

log = logging.getLogger("aclgate.connection")


def peer_string(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if not peer:
        return "?"
    return f"[{peer[0]}]:{peer[1]}" if ":" in peer[0] else f"{peer[0]}:{peer[1]}"


class UpstreamProtocol(asyncio.Protocol):
    """The broker side of one client connection."""

    def __init__(self, conn: ClientConnection):
        self.conn = conn

    def data_received(self, data: bytes) -> None:
        self.conn.session.upstream_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.upstream_lost(exc)

    def pause_writing(self) -> None:  # the broker is not keeping up: stop reading the client
        self.conn.pause_client("upstream-backpressure")

    def resume_writing(self) -> None:
        self.conn.resume_client("upstream-backpressure")


class ClientConnection(asyncio.Protocol):
    """One client connection: owns its upstream connection and its session."""

    def __init__(self, server: ProxyServer, listener: str, node_id: int | None):
        self.server = server
        self.listener = listener
        self.node_id = node_id
        self.transport: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.session: ProxySession | None = None
        self.peer = "?"
        self.closed = False
        self._pause_reasons: set[str] = set()
        self._connect_task: asyncio.Task | None = None
        #: requests the session forwarded before the upstream connection was up
        self._early: list[bytes] = []

    # asyncio.Protocol (client side) ------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        set_nodelay(transport)
        self.peer = peer_string(transport)
        self.session = ProxySession(
            self.server.session_config, self, self.server.metrics, self.context()
        )
        self.server.connection_opened(self)
        self.pause_client("connecting")
        self._connect_task = asyncio.ensure_future(self._connect_upstream())

    def context(self) -> AuthContext:
        """Who this connection is: the principal comes from the connection, never a request."""
        peer = self.transport.get_extra_info("peername") if self.transport else None
        host = java_host_string(peer[0]) if peer else "unknown"
        return AuthContext(self.server.policy, "User:ANONYMOUS", host, "PLAINTEXT")

    def data_received(self, data: bytes) -> None:
        self.session.client_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            log.debug("client %s disconnected", self.peer)
            self._teardown()

    def pause_writing(self) -> None:  # the client is not reading: stop reading the broker
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and not self.upstream.is_closing():
            self.upstream.resume_reading()

    # upstream --------------------------------------------------------------------

    async def _connect_upstream(self) -> None:
        errors = []
        transport = None
        try:
            for host, port in await self.server.upstream_candidates(self.node_id):
                try:
                    transport, _ = await self.server.connector.open(
                        host, port, lambda: UpstreamProtocol(self)
                    )
                    break
                except (OSError, TimeoutError) as exc:
                    self.server.metrics.upstream_connect_failures.inc()
                    errors.append(f"{host}:{port}: {exc!r}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            errors.append(repr(exc))
        if transport is None:
            what = "a bootstrap server" if self.node_id is None else f"broker {self.node_id}"
            self.close(f"cannot reach {what} upstream: {'; '.join(errors)}", "upstream_unreachable")
            return
        if self.closed:
            transport.close()
            return
        self.upstream = transport
        if self._early:
            transport.write(b"".join(self._early))
            self._early.clear()
        self.resume_client("connecting")

    def upstream_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        pending = self.session.in_flight if self.session else 0
        if pending:
            self.close(
                f"upstream broker closed the connection with {pending} request(s) in flight"
                + (f" ({exc!r})" if exc else ""),
                "upstream_closed",
            )
        else:
            self.close("upstream broker closed the connection", None)

    # SessionIO ---------------------------------------------------------------------

    def write_client(self, data: bytes | memoryview) -> None:
        self.transport.write(data)

    def write_upstream(self, data: bytes | memoryview) -> None:
        if self.upstream is None:  # still connecting: the client wrote before we paused it
            self._early.append(bytes(data))
        else:
            self.upstream.write(data)

    def close(self, reason: str, kind: str | None) -> None:
        if self.closed:
            return
        self.closed = True
        if kind is None:
            log.info("closing connection from %s: %s", self.peer, reason)
        else:
            self.server.metrics.errors.labels(kind).inc()
            log.warning("closing connection from %s: %s", self.peer, reason)
        if self.session is not None:
            self.session.closed = True
        if self.transport is not None:
            self.transport.close()
        self._teardown()

    def pause_client_reading(self) -> None:
        self.pause_client("in-flight")

    def resume_client_reading(self) -> None:
        self.resume_client("in-flight")

    # helpers ---------------------------------------------------------------------

    def pause_client(self, reason: str) -> None:
        if (
            not self._pause_reasons
            and self.transport is not None
            and not self.transport.is_closing()
        ):
            self.transport.pause_reading()
        self._pause_reasons.add(reason)

    def resume_client(self, reason: str) -> None:
        self._pause_reasons.discard(reason)
        if (
            not self._pause_reasons
            and self.transport is not None
            and not self.transport.is_closing()
        ):
            self.transport.resume_reading()

    def _teardown(self) -> None:
        if self._connect_task is not None and not self._connect_task.done():
            self._connect_task.cancel()
        if self.upstream is not None:
            self.upstream.close()
        if self.session is not None:
            self.session.closed = True
        self.server.connection_closed(self)
