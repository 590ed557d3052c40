"""A small HTTPS client on the proxy's event loop, for its identity provider: the JWKS and
OIDC discovery documents (proxy/security/jwks.py) and the OAuth token endpoint (proxy/oauth_token.py).

Why not urllib: it blocks, and the event loop serves every client; a thread per fetch would
need its own timeouts. Why not an HTTP library: these are a few small JSON documents a day,
fetched with `Connection: close`; HTTP/1.1 with Content-Length, chunked or read-to-close
bodies covers every identity provider. No redirects are followed, no proxy (HTTPS_PROXY) is
used, and the whole exchange (connect, TLS, request, response) has one deadline; bodies over
`max_bytes` are refused before they are buffered.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HttpError", "HttpResponse", "check_https_url", "https_context", "request"]

MAX_BODY = 1 << 20  # a JWKS or a token answer is a few KB
_MAX_HEADERS = 100


class HttpError(ConnectionError):
    """The request failed: unreachable, timed out, TLS refused, not HTTP, or too large."""


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: Mapping[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        """The body as JSON; HttpError if it is not."""
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError) as exc:
            raise HttpError(f"the answer is not JSON: {exc}") from None


def check_https_url(url: str, what: str) -> str:
    """`url` if it is an https:// URL with a host; ValueError naming `what` otherwise. Plain
    http is refused: whoever can change the answer on the way could forge every identity."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise ValueError(f"{what} must be an https:// URL, not {url!r}")
    return url


def https_context(cafile: Path | str | None = None) -> ssl.SSLContext:
    """Server certificates verified against `cafile`, or the system CAs without one."""
    ctx = ssl.create_default_context(cafile=str(cafile) if cafile is not None else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


async def request(
    url: str,
    *,
    ssl_context: ssl.SSLContext,
    timeout: float,
    method: str = "GET",
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    max_bytes: int = MAX_BODY,
) -> HttpResponse:
    """One HTTPS request; the answer whatever its status. HttpError when there is none."""
    try:
        async with asyncio.timeout(timeout):
            return await _exchange(url, ssl_context, method, body, headers or {}, max_bytes)
    except TimeoutError:
        raise HttpError(f"{method} {url}: no answer within {timeout:g} s") from None
    except HttpError:
        raise
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        raise HttpError(f"{method} {url}: {exc!r}") from None


async def _exchange(
    url: str,
    ctx: ssl.SSLContext,
    method: str,
    body: bytes | None,
    headers: Mapping[str, str],
    max_bytes: int,
) -> HttpResponse:
    parts = urlsplit(check_https_url(url, "the URL"))
    host, port = parts.hostname, parts.port or 443
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = parts.netloc.rpartition("@")[2]
    lines = [
        f"{method} {target} HTTP/1.1",
        f"Host: {host_header}",
        "User-Agent: aclgate",
        "Accept: application/json",
        "Connection: close",
    ]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{name}: {value}" for name, value in headers.items()]
    reader, writer = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=host)
    try:
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        await writer.drain()
        status_line = await reader.readline()
        try:
            version, status_text = status_line.decode("latin-1").split(None, 2)[:2]
            status = int(status_text)
        except ValueError:
            raise HttpError(f"{method} {url}: not an HTTP answer: {status_line[:80]!r}") from None
        if not version.startswith("HTTP/1."):
            raise HttpError(f"{method} {url}: unsupported {version}")
        answer_headers = await _headers(reader, url)
        data = await _body(reader, answer_headers, max_bytes, url)
        return HttpResponse(status, answer_headers, data)
    finally:
        writer.close()


async def _headers(reader: asyncio.StreamReader, url: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for _ in range(_MAX_HEADERS):
        line = (await reader.readline()).decode("latin-1").rstrip("\r\n")
        if not line:
            return out
        name, _, value = line.partition(":")
        out[name.strip().lower()] = value.strip()
    raise HttpError(f"{url}: more than {_MAX_HEADERS} header lines")


async def _body(
    reader: asyncio.StreamReader, headers: Mapping[str, str], max_bytes: int, url: str
) -> bytes:
    def too_large() -> HttpError:
        return HttpError(f"{url}: the answer is larger than {max_bytes} bytes")

    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = bytearray()
        while True:
            size_line = (await reader.readline()).split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise HttpError(f"{url}: bad chunk size {size_line[:20]!r}") from None
            if size == 0:
                while (await reader.readline()).strip():  # trailers
                    pass
                return bytes(chunks)
            if len(chunks) + size > max_bytes:
                raise too_large()
            chunks += await reader.readexactly(size)
            await reader.readexactly(2)  # CRLF after the chunk
    if "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise HttpError(f"{url}: bad Content-Length") from None
        if length > max_bytes:
            raise too_large()
        return await reader.readexactly(length)
    data = await reader.read(max_bytes + 1)  # until the server closes
    while len(data) <= max_bytes:
        more = await reader.read(max_bytes + 1 - len(data))
        if not more:
            return data
        data += more
    raise too_large()
