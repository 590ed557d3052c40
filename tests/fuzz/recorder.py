"""A recording upstream: every byte the proxy forwards, cut into frames, per connection.

Two modes. Scripted (the default): it answers like a one-node broker (ApiVersions, Metadata,
FindCoordinator and DescribeCluster as tests/fixtures/scripted_broker.py does, everything else
with the success answer mirroring the request, as tests/enforce/test_admin_apis.py's `echo`),
and closes a connection on a frame it cannot parse, as a broker would. Relay: it passes the
bytes on to a real broker (tansu) and its answers back, recording on the way.

It never trusts the proxy: frames are recorded as bytes before anything parses them, and a
connection that ends (or is still open) with part of a frame is reported, so a test can assert
that nothing malformed reached the cluster.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from kio.static.primitive import i16, i64

from aclgate.protocol.codec import decode_request, encode_response
from aclgate.protocol.header import MalformedRequest, parse_request_header
from aclgate.protocol.versions import response_class
from tests.fixtures.scripted_broker import DEFAULT_SCRIPT, ScriptedNode, _defaults

from .corpus import SIZE


class _Node:
    """Enough of a ScriptedNode for scripted_broker's answer functions (a one-node cluster)."""

    brokers = ScriptedNode.brokers

    def __init__(self, port: int):
        self.node_id = 1
        self.port = port
        self.cluster = SimpleNamespace(nodes=[self])


def api_versions_answer(header: Any, ranges: Mapping[int, tuple[int, int]]) -> bytes:
    """ApiVersions listing `ranges` (a broker that serves less than kio knows)."""
    mod = sys.modules[response_class(18, header.api_version).__module__]
    keys = tuple(
        mod.ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
        for k, (lo, hi) in sorted(ranges.items())
    )
    body = _defaults(response_class(18, header.api_version), api_keys=keys)
    if header.api_version >= 3:
        body = dataclasses.replace(body, finalized_features_epoch=i64(-1))
    return encode_response(header.correlation_id, body)


def answer(
    node: _Node, frame: bytes, ranges: Mapping[int, tuple[int, int]] | None = None
) -> bytes | str | None:
    """The framed answer to one request, None for none (Produce acks=0), "close" for a frame
    the broker cannot parse. `ranges`: the API versions to announce (default: all of kio's)."""
    try:
        header = parse_request_header(frame)
        request = decode_request(frame, header)
    except MalformedRequest:
        return "close"
    if ranges is not None:
        low, high = ranges.get(header.api_key, (1, 0))
        if not low <= header.api_version <= high and header.api_key != 18:
            return "close"  # as Kafka does with a version it does not serve
        if header.api_key == 18:
            return api_versions_answer(header, ranges)
    script = DEFAULT_SCRIPT.get(header.api_key)
    if script is not None:
        return script(node, header, request)
    if header.api_key == 0 and request.acks == 0:
        return None
    from tests.enforce.test_admin_apis import echo

    try:
        return echo(node, header, request)
    except Exception:  # this request cannot be mirrored: a blank success answer
        try:
            return encode_response(
                header.correlation_id, _defaults(response_class(header.api_key, header.api_version))
            )
        except Exception:
            return "close"


@dataclass
class Connection:
    number: int
    buffer: bytearray = field(default_factory=bytearray)
    frames: int = 0
    open: bool = True
    #: client_id of its first frame (the proxy's own connections are "aclgate-control", ...)
    first_client_id: str | None = None


class _Side(asyncio.Protocol):
    """The proxy's side of one upstream connection."""

    def __init__(self, recorder: RecordingUpstream):
        self.recorder = recorder
        self.conn = recorder._new_connection()
        self.transport: asyncio.Transport | None = None
        self.broker: asyncio.Transport | None = None
        self.pending: list[bytes] = []
        self.connecting: asyncio.Future | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.recorder.relay is not None:
            self.connecting = asyncio.ensure_future(self._connect_broker())

    async def _connect_broker(self) -> None:
        host, port = self.recorder.relay
        side = self
        try:
            transport, _ = await asyncio.get_running_loop().create_connection(
                lambda: _BrokerSide(side), host, port
            )
        except OSError:
            self.transport.close()
            return
        if self.transport.is_closing():
            transport.close()
            return
        self.broker = transport
        for data in self.pending:
            transport.write(data)
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        frames = self.recorder._record(self.conn, data)
        if self.recorder.relay is not None:
            if self.broker is None:
                self.pending.append(data)
            else:
                self.broker.write(data)
            return
        for frame in frames:
            out = answer(self.recorder.node, frame, self.recorder.ranges)
            if out == "close":
                self.transport.close()
                return
            if out is not None:
                self.transport.write(out)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.open = False
        if self.broker is not None:
            self.broker.close()


class _BrokerSide(asyncio.Protocol):
    def __init__(self, side: _Side):
        self.side = side

    def data_received(self, data: bytes) -> None:
        self.side.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.side.transport.close()


class RecordingUpstream:
    """`with RecordingUpstream() as up:` serves on `up.bootstrap` from its own thread."""

    def __init__(
        self, relay: str | None = None, ranges: Mapping[int, tuple[int, int]] | None = None
    ):
        """`relay`: a broker's host:port to pass everything on to; `ranges`: the API versions
        the scripted broker serves (default: all that kio knows)."""
        self.ranges = ranges
        self.relay: tuple[str, int] | None = None
        if relay is not None:
            host, port = relay.rsplit(":", 1)
            self.relay = (host, int(port))
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._lock = threading.Lock()
        self._count = 0
        self.connections: list[Connection] = []
        #: (connection number, frame) in arrival order, since the last `take()`
        self.frames: list[tuple[int, bytes]] = []
        self.server: asyncio.AbstractServer | None = None
        self.node: _Node | None = None

    def __enter__(self) -> RecordingUpstream:
        self._thread.start()

        async def start() -> None:
            self.server = await self.loop.create_server(lambda: _Side(self), "127.0.0.1", 0)

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        self.node = _Node(self.port)
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            self.server.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    @property
    def port(self) -> int:
        return self.server.sockets[0].getsockname()[1]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    # called on the recorder's loop ---------------------------------------------------

    def _new_connection(self) -> Connection:
        with self._lock:
            self._count += 1
            conn = Connection(self._count)
            self.connections.append(conn)
        return conn

    def _record(self, conn: Connection, data: bytes) -> list[bytes]:
        """Cut the stream into frames as a broker does; the rest waits for more bytes."""
        conn.buffer += data
        out = []
        buf, pos = conn.buffer, 0
        while len(buf) - pos >= 4:
            (size,) = SIZE.unpack_from(buf, pos)
            if size < 0 or len(buf) - pos - 4 < size:
                break
            out.append(bytes(buf[pos : pos + 4 + size]))
            pos += 4 + size
        del buf[:pos]
        if out:
            if conn.first_client_id is None:
                conn.first_client_id = _client_id(out[0])
            with self._lock:
                conn.frames += len(out)
                self.frames.extend((conn.number, f) for f in out)
        return out

    # called from the test ------------------------------------------------------------

    def take(self) -> tuple[list[tuple[int, bytes]], dict[int, bytes]]:
        """The frames recorded since the last call, and the connections holding part of a
        frame (number -> those bytes); forgets closed connections."""
        with self._lock:
            frames, self.frames = self.frames, []
            partial = {c.number: bytes(c.buffer) for c in self.connections if c.buffer}
            self.connections = [c for c in self.connections if c.open]
        return frames, partial

    def open_connections(self, exclude_client_ids: tuple[str, ...] = ()) -> int:
        with self._lock:
            return sum(
                1
                for c in self.connections
                if c.open and c.first_client_id not in exclude_client_ids
            )


def _client_id(frame: bytes) -> str | None:
    try:
        return parse_request_header(frame).client_id
    except MalformedRequest:
        return None


__all__ = ["RecordingUpstream", "answer"]
