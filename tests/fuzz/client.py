"""The fuzzing client: one short connection per case, many at once, on an asyncio loop.

A case's bytes are written (in one write or in pieces), then the client reads until the proxy
closes the connection, answers the case's sentinel ApiVersions (everything before it has been
handled), or a short wait passes (the stream ends inside a frame, so the proxy is waiting for
the rest; or it serves the case more slowly than expected). Then the client closes.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aclgate.protocol.codec import decode_response, encode_request
from aclgate.protocol.identity.sasl.client import create_client
from tests.fixtures.rawclient import request_entity

from .corpus import CLIENT_ID, SASL_AUTHENTICATE, SASL_HANDSHAKE, SIZE, Case, split_frames


@dataclass
class Target:
    """Where a case goes: a proxy listener, with TLS and/or a SASL login if it needs them."""

    name: str
    host: str
    port: int
    ssl: ssl.SSLContext | None = None
    #: (mechanism, user, password) for cases that log in first
    credentials: tuple[str, str, str] | None = None


@dataclass
class Outcome:
    case: Case
    connected: bool = False
    sent: int = 0
    received: bytes = b""
    #: the proxy closed the connection (EOF or reset) before the client did
    proxy_closed: bool = False
    sentinel_answered: bool = False
    #: the client gave up waiting for a stream it expected to be answered
    timed_out: bool = False
    login_error: str | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class Timeouts:
    #: a whole stream: the sentinel's answer or a close is due (generous: a loaded machine)
    answer: float = 5.0
    #: a stream that ends inside a frame: the proxy waits for more, nothing more is due
    partial: float = 0.1


class Reader:
    """Frames from an asyncio StreamReader, remembering every byte received."""

    def __init__(self, reader: asyncio.StreamReader):
        self.reader = reader
        self.data = bytearray()
        self.pos = 0

    async def frame(self, timeout: float) -> bytes | None:
        deadline = time.monotonic() + timeout
        while True:
            if len(self.data) - self.pos >= 4:
                (size,) = SIZE.unpack_from(self.data, self.pos)
                if size >= 0 and len(self.data) - self.pos - 4 >= size:
                    frame = bytes(self.data[self.pos : self.pos + 4 + size])
                    self.pos += 4 + size
                    return frame
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            chunk = await asyncio.wait_for(self.reader.read(65536), left)
            if not chunk:
                return None
            self.data += chunk


_ids = itertools.count(1 << 30)


async def request(reader: Reader, writer: asyncio.StreamWriter, body: Any) -> Any:
    """One request/response exchange (used to log in and for the final round trips)."""
    correlation_id = next(_ids)
    writer.write(encode_request(correlation_id, body, CLIENT_ID))
    await writer.drain()
    frame = await reader.frame(10.0)
    if frame is None:
        raise ConnectionError("closed by the proxy instead of an answer")
    (got,) = struct.unpack_from(">i", frame, 4)
    if got != correlation_id:
        raise AssertionError(f"correlation id {got}, expected {correlation_id}")
    return decode_response(frame, body.__api_key__, body.__version__)


async def sasl_login(
    reader: Reader, writer: asyncio.StreamWriter, mechanism: str, user: str, password: str
) -> None:
    """SaslHandshake v1 + SaslAuthenticate v2 rounds; raises unless authenticated."""
    answer = await request(reader, writer, request_entity(SASL_HANDSHAKE, 1, mechanism=mechanism))
    if answer.error_code != 0:
        raise ConnectionError(f"SaslHandshake: {answer.error_code}")
    client = create_client(mechanism, user, password)
    token: bytes | None = client.initial_response()
    while token is not None:
        answer = await request(
            reader, writer, request_entity(SASL_AUTHENTICATE, 2, auth_bytes=token)
        )
        if answer.error_code != 0:
            raise ConnectionError(f"SaslAuthenticate: {answer.error_code} {answer.error_message}")
        token = client.evaluate_challenge(bytes(answer.auth_bytes))
        if client.complete:
            return


async def connect(target: Target, *, tls: bool = True) -> tuple[Reader, asyncio.StreamWriter]:
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(target.host, target.port, ssl=target.ssl if tls else None), 10
    )
    return Reader(reader), writer


async def run_case(target: Target, case: Case, timeouts: Timeouts) -> Outcome:
    out = Outcome(case)
    started = time.monotonic()
    try:
        reader, writer = await connect(target, tls=not case.no_tls)
    except (OSError, TimeoutError, ssl.SSLError) as exc:
        out.error = f"connect: {exc!r}"
        return out
    out.connected = True
    try:
        if case.login:
            try:
                await sasl_login(reader, writer, *target.credentials)
            except (OSError, ConnectionError, TimeoutError, AssertionError) as exc:
                out.login_error = repr(exc)
                return out
            reader.data.clear()  # what the case gets back starts here
            reader.pos = 0
        await _write(writer, case, out)
        complete = not split_frames(case.data[: out.sent])[1] and out.sent == len(case.data)
        wait = timeouts.answer if complete else timeouts.partial
        try:
            while True:
                frame = await reader.frame(wait)
                if frame is None:
                    out.proxy_closed = True
                    break
                if struct.unpack_from(">i", frame, 4)[0] == case.sentinel:
                    out.sentinel_answered = True
                    break
        except TimeoutError:
            out.timed_out = complete
        except (ConnectionError, OSError, ssl.SSLError):
            out.proxy_closed = True
    finally:
        out.received = bytes(reader.data)
        writer.close()
        out.seconds = time.monotonic() - started
    return out


async def _write(writer: asyncio.StreamWriter, case: Case, out: Outcome) -> None:
    bounds = [0, *case.cuts, len(case.data)]
    for start, end in itertools.pairwise(bounds):
        if writer.transport.is_closing():
            return
        writer.write(case.data[start:end])
        try:
            await writer.drain()
        except (ConnectionError, OSError, ssl.SSLError):
            return
        out.sent = end
        if end < len(case.data):
            await asyncio.sleep(0.002)  # let the proxy read the piece on its own


@dataclass
class Batch:
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0


async def run_cases(
    targets: dict[str, Target],
    cases: Sequence[Case],
    *,
    concurrency: int = 24,
    timeouts: Timeouts | None = None,
    progress: Callable[[int], None] | None = None,
) -> Batch:
    """Every case on its target, `concurrency` connections at a time."""
    timeouts = timeouts or Timeouts()
    gate = asyncio.Semaphore(concurrency)
    batch = Batch()
    started = time.monotonic()

    async def one(case: Case) -> Outcome:
        async with gate:
            return await run_case(targets[case.target], case, timeouts)

    batch.outcomes = list(await asyncio.gather(*(one(c) for c in cases)))
    batch.seconds = time.monotonic() - started
    if progress is not None:
        progress(len(cases))
    return batch
