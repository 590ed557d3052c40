"""Guess PLAIN passwords against a SASL listener from many connections at once, as fast as the
proxy answers (a separate process: the test's own threads would compete with the in-process
proxy for the GIL and measure that instead).

    python -m tests.listeners.plain_guesser HOST:PORT CONNECTIONS SECONDS

Prints the number of guesses answered.
"""

from __future__ import annotations

import asyncio
import struct
import sys
import time

from aclgate.protocol.codec import encode_request
from aclgate.protocol.versions import request_class

_SIZE = struct.Struct(">i")
HANDSHAKE = encode_request(1, request_class(17, 1)(mechanism="PLAIN"), "guesser")
AUTHENTICATE = encode_request(2, request_class(36, 2)(auth_bytes=b"\x00alice\x00guess"), "guesser")


async def _frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    return await reader.readexactly(size)


async def _guesser(host: str, port: int, deadline: float, counts: list[int]) -> None:
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.01)
            continue
        try:
            writer.write(HANDSHAKE)
            await _frame(reader)
            writer.write(AUTHENTICATE)
            await _frame(reader)
            counts[0] += 1
        except (OSError, asyncio.IncompleteReadError):
            pass  # refused without an answer (the proxy's hashing queue was full)
        finally:
            writer.close()


async def main(address: str, connections: int, seconds: float) -> int:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + seconds
    counts = [0]
    await asyncio.gather(*(_guesser(host, int(port), deadline, counts) for _ in range(connections)))
    return counts[0]


if __name__ == "__main__":
    print(asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))))
