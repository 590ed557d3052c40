"""Accepting connections that start with a PROXY protocol header in front of TLS.

A load balancer doing TLS passthrough (e.g. with PROXY v2) sends the header in clear and then
the client's TLS bytes. asyncio's TLS transports start the handshake on the first byte, so for
TLS listeners the proxy accepts the socket itself, reads the header with MSG_PEEK (so nothing
behind it is consumed), takes exactly the header's bytes off the socket, and only then hands
the socket to the event loop with TLS. Plaintext listeners parse the header in the connection
instead (proxy/listen/connection.py).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable

from aclgate.protocol.identity.proxyproto import (
    NeedMore,
    ProxyHeader,
    ProxyProtocolError,
    has_proxy_signature,
    is_trusted,
    parse_proxy_header,
)

log = logging.getLogger("aclgate.proxyprotocol")

#: (source address or None) -> protocol for the accepted connection
ProtocolFactory = Callable[[tuple[str, int] | None], asyncio.Protocol]
MAX_HEADER = 4096 + 16  # v2 with the largest TLV block we accept, plus its fixed part


async def _peek(
    loop: asyncio.AbstractEventLoop, conn: socket.socket, size: int, deadline: float
) -> bytes:
    """Up to `size` bytes from the socket without consuming them; waits for at least one."""
    while True:
        try:
            data = conn.recv(size, socket.MSG_PEEK)
        except BlockingIOError:
            data = None
        if data is not None:
            if not data:
                raise ConnectionError("peer closed before sending anything")
            return data
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError("no data from the peer in time")
        ready = loop.create_future()
        loop.add_reader(conn.fileno(), ready.set_result, None)
        try:
            async with asyncio.timeout(remaining):
                await ready
        finally:
            loop.remove_reader(conn.fileno())


async def read_proxy_header(
    loop: asyncio.AbstractEventLoop, conn: socket.socket, timeout: float = 10.0
) -> ProxyHeader:
    """Parse the header by peeking, then consume exactly its bytes."""
    deadline = loop.time() + timeout
    have = 0
    while True:
        data = await _peek(loop, conn, MAX_HEADER, deadline)
        header = parse_proxy_header(data)
        if not isinstance(header, NeedMore):
            break
        if len(data) == have:  # nothing new yet: the socket stays readable while peeked
            await asyncio.sleep(0.005)
        have = len(data)
        if loop.time() > deadline:
            raise TimeoutError("incomplete PROXY header")
    taken = 0
    while taken < header.consumed:  # the bytes are already buffered: this does not block
        chunk = conn.recv(header.consumed - taken)
        if not chunk:
            raise ConnectionError("peer closed inside the PROXY header")
        taken += len(chunk)
    return header


async def serve_with_proxy_header(
    sock: socket.socket,
    factory: ProtocolFactory,
    ssl_context: ssl.SSLContext,
    trusted: tuple,
    on_refused: Callable[[str, str], None],
    timeout: float = 10.0,
) -> None:
    """Accept on `sock` forever: trusted peers must send a header, others must not."""
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    pending: set[asyncio.Task] = set()
    try:
        while True:
            conn, addr = await loop.sock_accept(sock)
            task = loop.create_task(
                _admit(loop, conn, addr, factory, ssl_context, trusted, on_refused, timeout)
            )
            pending.add(task)
            task.add_done_callback(pending.discard)
    finally:
        for task in pending:
            task.cancel()


async def _admit(loop, conn, addr, factory, ssl_context, trusted, on_refused, timeout) -> None:
    conn.setblocking(False)
    peer = f"{addr[0]}:{addr[1]}"
    try:
        source = None
        if is_trusted(addr[0], trusted):
            header = await read_proxy_header(loop, conn, timeout)
            source = header.effective_source(addr)
        else:
            first = await _peek(loop, conn, 16, loop.time() + timeout)
            if has_proxy_signature(first):
                raise ProxyProtocolError(
                    "PROXY protocol header from a peer that is not trusted to send one"
                )
        await loop.connect_accepted_socket(
            lambda: factory(source), conn, ssl=ssl_context, ssl_handshake_timeout=timeout
        )
    except (ProxyProtocolError, OSError, TimeoutError, ssl.SSLError) as exc:
        on_refused(peer, str(exc) or type(exc).__name__)
        conn.close()
    except asyncio.CancelledError:
        conn.close()
        raise
