"""The floor for aclgate's hot path: a minimal uvloop TCP relay built on bare asyncio Protocols.

    python -m bench.relay --listen 127.0.0.1:19092 --upstream 127.0.0.1:9092

Each accepted connection gets one upstream connection; bytes are copied both ways with
`transport.write` as they arrive, nothing is parsed or framed. Flow control is the minimum a
correct relay needs: when one side's write buffer is full, reading from the other side pauses.
This is "relay, protocol, uvloop" of docs/bench.md, "The yardstick": the cheapest Python hop, so
the latency harness (bench/latency.py) shows it next to aclgate as the floor.

Prints `listening on HOST:PORT` once it accepts connections; SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys


def _nodelay(transport: asyncio.Transport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


class _Side(asyncio.Protocol):
    """One end of a relayed connection; `peer` is the other end."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.pending: list[bytes] = []  # client bytes that arrived before upstream connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        _nodelay(self.transport)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        peer, self.peer = self.peer, None
        if peer is not None and peer.transport is not None:
            peer.peer = None
            peer.transport.close()

    # The peer's reading pauses while this side cannot write.
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class _Client(_Side):
    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__()
        self.upstream = upstream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, up = await loop.create_connection(_Side, *self.upstream)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        if self.transport is None or self.transport.is_closing():
            up.transport.close()
            return
        up.peer, self.peer = self, up
        for chunk in self.pending:
            up.transport.write(chunk)
        self.pending.clear()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


async def serve(listen: tuple[str, int], upstream: tuple[str, int]) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(upstream), *listen, reuse_address=True)
    host, port = server.sockets[0].getsockname()[:2]
    print(f"listening on {host}:{port}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.relay",
        description="Minimal uvloop TCP relay (bare asyncio Protocols): the latency floor.",
    )
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT to accept on")
    parser.add_argument("--upstream", type=_address, required=True, help="HOST:PORT to relay to")
    args = parser.parse_args(argv)
    import uvloop

    uvloop.run(serve(args.listen, args.upstream))
    return 0


if __name__ == "__main__":
    sys.exit(main())
