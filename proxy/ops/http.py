"""A tiny HTTP/1.1 server for /metrics, /healthz and /readyz on the proxy's own event loop.

No framework: three GET endpoints, one request per connection. Whatever is sent to the port,
it costs the event loop a bounded amount: at most MAX_CONNECTIONS connections at once, a
request head of at most MAX_LINE bytes per line and MAX_HEADER_LINES lines read within
READ_TIMEOUT, and scrapes that share one /metrics body formatted off the loop (`render`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from aclgate.proxy.ops.ratelimit import RateLimitedLog

log = logging.getLogger("aclgate.http")

#: returns (ready, details) for /readyz
ReadinessCheck = Callable[[], tuple[bool, dict]]

#: connections served at once; more are closed at once (scrapes share one body anyway)
MAX_CONNECTIONS = 32
#: the longest request line or header line (bytes, with its line end)
MAX_LINE = 8192
#: header lines after the request line
MAX_HEADER_LINES = 100
#: seconds to read a whole request head
READ_TIMEOUT = 5.0
#: seconds for the client to take the answer (one that never reads would hold its slot)
WRITE_TIMEOUT = 10.0
#: one log line per kind of refused request per interval (seconds); the rest are counted
LOG_INTERVAL = 60.0

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


class BadRequest(Exception):
    """A request head the server refuses: `status` is the answer."""

    def __init__(self, status: int, why: str):
        super().__init__(why)
        self.status = status


def render(metrics: Iterable[Metric]) -> bytes:
    """The text exposition of already collected `metrics` (any thread)."""
    snapshot = list(metrics)

    class _Snapshot:
        def collect(self) -> list[Metric]:
            return snapshot

    return generate_latest(_Snapshot())


class SharedBuild:
    """One build of a body at a time, shared by every caller that asks while it runs: N
    concurrent scrapes cost one build, not N. A caller that goes away (its client timed
    out) does not cancel the build for the others."""

    def __init__(self, build: Callable[[], Awaitable[bytes]]):
        self.build = build
        self._running: asyncio.Future[bytes] | None = None
        #: builds started (tests count them)
        self.builds = 0

    async def get(self) -> bytes:
        if self._running is None:
            self.builds += 1
            self._running = asyncio.ensure_future(self.build())
            self._running.add_done_callback(self._done)
        return await asyncio.shield(self._running)

    def _done(self, future: asyncio.Future[bytes]) -> None:
        self._running = None
        if not future.cancelled():
            future.exception()  # retrieved: the callers that waited have it


async def read_head(reader: asyncio.StreamReader) -> str | None:
    """The request line of a request head (headers read and dropped; the end of the stream
    ends them too), None if the stream ended before it, or BadRequest."""
    try:
        request_line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError as exc:
        raise BadRequest(431, f"a request line over {MAX_LINE} bytes") from exc
    try:
        for _ in range(MAX_HEADER_LINES + 1):
            if await reader.readuntil(b"\n") in (b"\r\n", b"\n"):
                return request_line.decode("latin-1")
    except asyncio.IncompleteReadError:
        return request_line.decode("latin-1")
    except asyncio.LimitOverrunError as exc:
        raise BadRequest(431, f"a header line over {MAX_LINE} bytes") from exc
    raise BadRequest(431, f"over {MAX_HEADER_LINES} header lines")


class HealthServer:
    def __init__(self, registry: CollectorRegistry, readiness: ReadinessCheck):
        self.registry = registry
        self.readiness = readiness
        self.server: asyncio.AbstractServer | None = None
        self.metrics_body = SharedBuild(self.build_metrics)
        #: connections being served now
        self.open = 0
        self.refusals = RateLimitedLog(interval=LOG_INTERVAL)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._handle, host, port, limit=MAX_LINE)
        addr = self.server.sockets[0].getsockname()
        return addr[0], addr[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        self.refusals.flush()  # the count of refusals not logged yet

    async def answer(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for GET `path`; the worker supervisor
        (proxy/process/workers.py) answers by asking its workers first."""
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, await self.metrics_body.get()
        return self._route(path)

    async def build_metrics(self) -> bytes:
        """Collected on the loop, formatted in a thread. The collectors read dicts and
        counters the loop mutates, so they run here: 0.8 ms for a typical proxy (20 APIs, 74
        KB of text), 10-27 ms with every API Kafka defines and 4,500 decision series (825
        KB; best of 20 on 2 busy cores). Formatting costs three to four times that and
        touches only the collected copies, so it runs in a thread, where the GIL lets the
        loop in every few ms instead of stalling every client for the whole build."""
        return await asyncio.to_thread(render, list(self.registry.collect()))

    def _route(self, path: str) -> tuple[int, str, bytes]:
        if path == "/healthz":
            return 200, "application/json", b'{"status": "ok"}\n'
        if path == "/readyz":
            ready, details = self.readiness()
            body = json.dumps({"ready": ready, **details}, sort_keys=True).encode() + b"\n"
            return (200 if ready else 503), "application/json", body
        return 404, "text/plain", b"not found: try /metrics, /healthz or /readyz\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= MAX_CONNECTIONS:
            writer.close()
            self._refused(503, f"{MAX_CONNECTIONS} connections already open; closed")
            return
        self.open += 1
        try:
            await self._serve(reader, writer)
        except (TimeoutError, ConnectionError) as exc:
            log.debug("health endpoint request failed: %r", exc)
            writer.transport.abort()  # close() would wait for a client that does not read
        finally:
            self.open -= 1
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                request_line = await read_head(reader)
        except BadRequest as exc:
            self._refused(exc.status, str(exc))
            await self._write(writer, exc.status, "text/plain", f"{exc}\n".encode(), True)
            return
        if request_line is None:
            return  # closed before a request (a port check): nothing to answer
        parts = request_line.split()
        if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
            status, ctype, body = 405, "text/plain", b"only GET\n"
        else:
            status, ctype, body = await self.answer(parts[1].split("?", 1)[0])
        await self._write(writer, status, ctype, body, not parts or parts[0] != "HEAD")

    @staticmethod
    async def _write(
        writer: asyncio.StreamWriter, status: int, ctype: str, body: bytes, with_body: bool
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        writer.write(head + body if with_body else head)
        async with asyncio.timeout(WRITE_TIMEOUT):
            await writer.drain()

    def _refused(self, status: int, why: str) -> None:
        """Logged at most once per LOG_INTERVAL for each status (the rest: counted in the
        next line), never with a traceback: anyone who reaches the port can send this."""
        self.refusals.log(
            log,
            logging.INFO,
            f"http-{status}",
            "metrics port: refused a request (%d): %s",
            status,
            why,
        )
