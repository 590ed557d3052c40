"""A tiny HTTP/1.1 server for /metrics, /healthz and /readyz on the proxy's own event loop.

No threads and no framework: three GET endpoints, one request per connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("aclgate.http")

#: returns (ready, details) for /readyz
ReadinessCheck = Callable[[], tuple[bool, dict]]


class HealthServer:
    def __init__(self, registry: CollectorRegistry, readiness: ReadinessCheck):
        self.registry = registry
        self.readiness = readiness
        self.server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._handle, host, port)
        addr = self.server.sockets[0].getsockname()
        return addr[0], addr[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def answer(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for GET `path`; the worker supervisor
        (proxy/workers.py) answers by asking its workers first."""
        return self._route(path)

    def _route(self, path: str) -> tuple[int, str, bytes]:
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path == "/healthz":
            return 200, "application/json", b'{"status": "ok"}\n'
        if path == "/readyz":
            ready, details = self.readiness()
            body = json.dumps({"ready": ready, **details}, sort_keys=True).encode() + b"\n"
            return (200 if ready else 503), "application/json", body
        return 404, "text/plain", b"not found: try /metrics, /healthz or /readyz\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5):
                request_line = await reader.readline()
            async with asyncio.timeout(5):
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
            parts = request_line.decode("latin-1").split()
            if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
                status, ctype, body = 405, "text/plain", b"only GET\n"
            else:
                status, ctype, body = await self.answer(parts[1].split("?", 1)[0])
            reason = {
                200: "OK",
                404: "Not Found",
                405: "Method Not Allowed",
                503: "Service Unavailable",
            }
            head = (
                f"HTTP/1.1 {status} {reason[status]}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode()
            writer.write(head + (body if parts and parts[0] == "GET" else b""))
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError) as exc:
            log.debug("health endpoint request failed: %r", exc)
        finally:
            writer.close()
