"""One worker process of `aclgate serve --workers N`: a full proxy, started by the supervisor.

`python -m aclgate.proxy.process.worker` reads its assignment (which worker it is, the configuration,
the secrets every worker must share) from stdin, serves like a single-process proxy on ports
it shares with the other workers (SO_REUSEPORT), and writes one JSON line to stdout once it
listens: where its own /metrics, /healthz and /readyz answer (loopback, an ephemeral port),
for the supervisor to ask. It keeps stdin open: end of file means the supervisor is gone, and
a worker nobody supervises stops (draining) instead of serving on unseen.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import signal
import sys
from dataclasses import dataclass
from typing import BinaryIO

from aclgate.proxy.config import ConfigError, ProxyConfig

log = logging.getLogger("aclgate.worker")

#: the loopback address a worker's own health endpoints listen on
INTERNAL_HOST = "127.0.0.1"


@dataclass(frozen=True)
class Assignment:
    """What the supervisor tells one worker."""

    index: int
    config: ProxyConfig
    #: the DescribeTopicPartitions cursor key: a cursor sealed by one worker opens on any
    cursor_key: bytes


def encode_assignment(assignment: Assignment) -> bytes:
    data = pickle.dumps(assignment)
    return len(data).to_bytes(4, "big") + data


def read_assignment(stream: BinaryIO) -> Assignment:
    """The assignment on `stream` (the pipe from the supervisor, so pickle is trusted)."""
    size = int.from_bytes(_read_exactly(stream, 4), "big")
    assignment = pickle.loads(_read_exactly(stream, size))
    if not isinstance(assignment, Assignment):
        raise ValueError("the supervisor sent something that is not an Assignment")
    return assignment


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise EOFError("the supervisor closed the assignment pipe early")
    return data


async def _serve(server, index: int) -> None:
    from aclgate.proxy.ops.http import HealthServer

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def supervisor_gone() -> None:
        if not os.read(0, 4096):
            loop.remove_reader(0)
            if not stop.is_set():
                log.warning("the supervisor is gone: stopping")
            stop.set()

    loop.add_reader(0, supervisor_gone)
    await server.start()
    health = HealthServer(server.metrics.registry, server.readiness)
    address = await health.start(INTERNAL_HOST, 0)
    sys.stdout.write(json.dumps({"health": list(address), "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    try:
        await stop.wait()
        log.info("shutting down")
    finally:
        await server.close()
        await health.close()


def main() -> int:
    import uvloop

    from aclgate.authz.aclfile import AclFileError
    from aclgate.protocol.enforce.cursor import CursorSeal
    from aclgate.proxy.listen.server import ProxyServer
    from aclgate.proxy.ops.logs import configure_logging
    from aclgate.proxy.process.gctune import tune_gc

    assignment = read_assignment(sys.stdin.buffer)
    config = assignment.config
    configure_logging(config.log_level, tag=f"worker-{assignment.index} ")
    try:
        server = ProxyServer(config)
    except ConfigError as exc:
        log.error("cannot start: %s", exc)
        return 1
    server.policy.cursors = CursorSeal(assignment.cursor_key)
    tune_gc()
    try:
        uvloop.run(_serve(server, assignment.index))
    except (AclFileError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    # run the imported module's main: the assignment unpickles to aclgate.proxy.process.worker's
    # classes, not to this __main__ copy's
    from aclgate.proxy.process import worker

    sys.exit(worker.main())
