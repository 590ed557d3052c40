"""How much log a misbehaving client makes an `aclgate serve` write (issue 20, B9).

    python -m bench.log_flood                                  # this tree
    git archive b17755c | tar -x -C /tmp/old                   # a tree to compare with
    python -m bench.log_flood --baseline /tmp/old --out bench/results/log_flood.md

Each scenario starts its own `aclgate serve` (the source tree's code, through PYTHONPATH)
whose upstream is a closed port, runs the client for `--seconds`, stops the proxy (SIGTERM:
pending summary lines are written) and counts the bytes and lines of its stderr written from
the scenario's start, the WARNING lines and the longest line:

* `sasl_32k_300`: 300 SaslHandshakes naming a 32,000-character mechanism, 50 at a time;
* `sasl_32k_parallel`: 100 clients repeating such handshakes for `--seconds`;
* `garbage`: 50 clients opening connections for `--seconds` and sending an oversized frame
  size, a malformed header, an unknown API key, or half a frame and going away;
* `dead_upstream_producer`: one confluent-kafka producer (default settings) for `--seconds`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aclgate.protocol.codec import encode_request
from aclgate.proxy.demo.embedded_broker import free_port
from tests.fixtures.rawclient import request_entity

HERE = Path(__file__).resolve().parent.parent
MECHANISM = "M" * 32_000
HANDSHAKE = encode_request(1, request_entity(17, 1, mechanism=MECHANISM), "flood")
GARBAGE = (
    struct.pack(">i", 200_000_000),
    struct.pack(">i", 14) + b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x02ab\x07\x01",
    struct.pack(">i", 11) + struct.pack(">hhih", 10000, 0, 1, -1) + b"\x00",
    struct.pack(">i", 100) + b"\x00" * 10,  # half a frame, then the client goes away
)


@dataclass
class Figures:
    connections: int
    bytes: int
    lines: int
    warnings: int
    longest: int


class Proxy:
    """An `aclgate serve` of `tree` with its stderr in a file."""

    def __init__(self, tree: Path, workdir: Path, sasl: bool):
        self.port = free_port()
        self.metrics_port = free_port()
        self.log = workdir / f"serve-{self.port}.log"
        args = [
            sys.executable,
            "-m",
            "aclgate",
            "serve",
            "--upstream",
            f"127.0.0.1:{free_port()}",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--allow-everyone-if-no-acl-found",
            "--metrics-listen",
            f"127.0.0.1:{self.metrics_port}",
        ]
        if sasl:
            from aclgate.proxy.security.usersfile import add_user

            users = workdir / "users.json"
            if not users.exists():
                add_user(users, "alice", "alice-secret", ("PLAIN",))
            args += [
                "--listener-security-protocol",
                "SASL_PLAINTEXT",
                "--sasl-mechanisms",
                "PLAIN",
                "--users-file",
                str(users),
            ]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self._stderr = self.log.open("wb")
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=self._stderr, env=env, cwd=tree
        )
        deadline = time.monotonic() + 30
        while b"listening on" not in self.log.read_bytes():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(self.log.read_text())
            time.sleep(0.05)
        self.start = self.log.stat().st_size

    def connections(self) -> int:
        """Client connections accepted so far (aclgate_connections_total)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics") as answer:
            text = answer.read().decode()
        return int(
            sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("aclgate_connections_total{")
            )
        )

    def stop(self) -> Figures:
        connections = self.connections()
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)
        self._stderr.close()
        with self.log.open("rb") as f:
            f.seek(self.start)
            lines = f.read().splitlines()
        return Figures(
            connections=connections,
            bytes=sum(len(line) + 1 for line in lines),
            lines=len(lines),
            warnings=sum(1 for line in lines if b" WARNING " in line),
            longest=max((len(line) for line in lines), default=0),
        )


async def _handshake(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(HANDSHAKE)
        await reader.read()  # the answer, then the close
    finally:
        writer.close()


async def _garbage(port: int, data: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        if len(data) - 4 < struct.unpack_from(">i", data)[0] < 1 << 20:
            return  # half a frame: go away
        await reader.read()
    finally:
        writer.close()


async def _for(seconds: float, clients: int, one: Callable[[int], Awaitable[None]]) -> None:
    deadline = time.monotonic() + seconds

    async def client(index: int) -> None:
        n = index
        while time.monotonic() < deadline:
            try:
                await one(n)
            except OSError:
                pass
            n += clients

    await asyncio.gather(*(client(i) for i in range(clients)))


def sasl_32k_300(port: int, seconds: float) -> None:
    async def run() -> None:
        for _ in range(6):
            await asyncio.gather(*(_handshake(port) for _ in range(50)))

    asyncio.run(run())


def sasl_32k_parallel(port: int, seconds: float) -> None:
    asyncio.run(_for(seconds, 100, lambda n: _handshake(port)))


def garbage(port: int, seconds: float) -> None:
    asyncio.run(_for(seconds, 50, lambda n: _garbage(port, GARBAGE[n % len(GARBAGE)])))


def dead_upstream_producer(port: int, seconds: float) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
    producer.produce("t", b"x")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        producer.poll(0.1)
    producer.purge()
    producer.flush(1)


#: name -> (SASL listener, client)
SCENARIOS: dict[str, tuple[bool, Callable[[int, float], None]]] = {
    "sasl_32k_300": (True, sasl_32k_300),
    "sasl_32k_parallel": (True, sasl_32k_parallel),
    "garbage": (False, garbage),
    "dead_upstream_producer": (False, dead_upstream_producer),
}


def measure(tree: Path, seconds: float) -> dict[str, Figures]:
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (sasl, client) in SCENARIOS.items():
            proxy = Proxy(tree, Path(tmp), sasl)
            try:
                client(proxy.port, seconds)
            finally:
                found[name] = proxy.stop()
            print(name, tree, found[name], file=sys.stderr)
    return found


def table(results: dict[str, dict[str, Figures]]) -> str:
    rows = [
        "| scenario | tree | client connections | log bytes | lines | WARNING lines | longest line |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name in SCENARIOS:
        for label, found in results.items():
            f = found[name]
            rows.append(
                f"| `{name}` | {label} | {f.connections:,} | {f.bytes:,} | {f.lines:,} | {f.warnings:,} | "
                f"{f.longest:,} |"
            )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="a source tree to measure as well")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path, help="write the Markdown table here")
    args = parser.parse_args()
    results = {}
    if args.baseline is not None:
        results["baseline"] = measure(args.baseline.resolve(), args.seconds)
    results["this tree"] = measure(HERE, args.seconds)
    text = table(results)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
