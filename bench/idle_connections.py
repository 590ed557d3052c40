"""Memory per idle client connection: `aclgate serve` holding 10,000 connections that do nothing.

    python -m bench.idle_connections                    # or: make bench-idle (about 2 minutes)
    python -m bench.idle_connections --connections 200 --out /tmp/x    # smoke run

Why: a connection flood must cost the proxy bounded, known memory (issue 15, item 2). The
proxy runs as a child process (uvloop, as in production: tests/fixtures/proxyprocess.py) in
front of tansu (proxy/demo/embedded_broker.py); the connections come from a separate client
process, so the proxy's RSS holds the proxy only. One fresh proxy per variant:

* `silent`: connections that connect and send nothing. The proxy opens upstream connections
  lazily, on the first request that needs one, so these never reach the broker.
* `apiversions`: connections that each did one ApiVersions roundtrip, then nothing. ApiVersions
  is forwarded, so each holds an upstream connection too (two sockets per client).
* `sasl`: silent connections on a SASL_PLAINTEXT listener (PLAIN), never authenticated. Run
  with --authentication-timeout-ms 600000: the default (30 s) would close them mid-measurement.

For each: the proxy's RSS with no client connection (after one ApiVersions warm-up roundtrip
on a connection that is then closed), with the connections held, and after they all closed;
the per-connection figure is (held - before) / connections held. The broker-side count is the
established TCP connections to the broker's port (from /proc/net/tcp), minus those before the
clients connected (the proxy's own metadata connection).

The proxy reserves two file descriptors per client connection (its socket and an upstream
one) and refuses connections past its budget (proxy/listen/fdlimit.py). With a hard open-files limit
of 20,000 that budget is about 9,490: connections past it are accepted and closed by the
proxy, counted here as `refused`, and the per-connection figure uses the connections held.

Writes idle_connections.json and idle_connections.md to bench/results/ or --out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shlex
import struct
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.recording import measured_code, write_results

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
VARIANTS = ("silent", "apiversions", "sasl")
DESCRIPTIONS = {
    "silent": "connected, sent nothing (PLAINTEXT)",
    "apiversions": "one ApiVersions roundtrip each, then idle (PLAINTEXT)",
    "sasl": "connected, sent nothing, never authenticated (SASL_PLAINTEXT, PLAIN)",
}
# ApiVersions v0, correlation id 1, client id "idle": small enough to build by hand.
_API_VERSIONS_BODY = struct.pack(">hhih", 18, 0, 1, 4) + b"idle"
API_VERSIONS = struct.pack(">i", len(_API_VERSIONS_BODY)) + _API_VERSIONS_BODY
MB = 1024 * 1024


# --------------------------------------------------------------------------------------------
# The client process: opens the connections and holds them until told to close.


def raise_nofile() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit: 10,000 sockets do not fit in the usual 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def _open_one(
    host: str, port: int, roundtrip: bool, gate: asyncio.Semaphore
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    async with gate:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
            if roundtrip:
                writer.write(API_VERSIONS)
                size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 30))[0]
                body = await asyncio.wait_for(reader.readexactly(size), 30)
                if struct.unpack(">i", body[:4])[0] != 1:
                    raise RuntimeError("ApiVersions answer with the wrong correlation id")
            return reader, writer
        except (OSError, asyncio.IncompleteReadError, TimeoutError, RuntimeError):
            return None


async def client_main(host: str, port: int, count: int, roundtrip: bool, parallel: int) -> None:
    """Open `count` connections; answer `check` (how many are still open) and `close` on stdin."""
    limit = raise_nofile()
    gate = asyncio.Semaphore(parallel)
    t0 = time.monotonic()
    opened = await asyncio.gather(*(_open_one(host, port, roundtrip, gate) for _ in range(count)))
    conns = [c for c in opened if c is not None]
    report = {
        "event": "opened",
        "attempted": count,
        "opened": len(conns),
        "failed": count - len(conns),
        "seconds": round(time.monotonic() - t0, 2),
        "nofile_limit": limit,
    }
    print(json.dumps(report), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if line == "check":
            await asyncio.sleep(0.2)  # let pending EOFs arrive
            alive = sum(1 for r, _ in conns if not r.at_eof())
            print(json.dumps({"event": "check", "alive": alive}), flush=True)
        else:  # "close" or EOF: the parent is done
            for _, w in conns:
                w.close()
            await asyncio.gather(*(w.wait_closed() for _, w in conns), return_exceptions=True)
            print(json.dumps({"event": "closed"}), flush=True)
            return


class Clients:
    """The client process, driven over its stdin/stdout."""

    def __init__(self, address: str, count: int, roundtrip: bool, parallel: int) -> None:
        host, port = address.rsplit(":", 1)
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "bench.idle_connections", "--client"),
                *("--client-host", host, "--client-port", port),
                *("--connections", str(count), "--parallel", str(parallel)),
                *(["--client-roundtrip"] if roundtrip else []),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the client process exited ({self.proc.wait(5)})")
        return json.loads(line)

    def send(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, RuntimeError, ValueError):
                self.send("close")
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


# --------------------------------------------------------------------------------------------
# Measuring the proxy


def established_to_port(port: int) -> int:
    """ESTABLISHED TCP connections whose remote end is `port` on this host (IPv4 and IPv6)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port:
                    count += 1
    return count


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def proxy_nofile(pid: int) -> int | None:
    """The proxy's soft open-files limit (it raises its own at start)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return None


def settle_rss(proxy: Any, seconds: float = 3.0, step: float = 0.5) -> int:
    """The proxy's RSS once it stops moving (max of the last samples: a conservative figure)."""
    samples = [proxy.rss_bytes()]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(step)
        samples.append(proxy.rss_bytes())
    return max(samples[-3:])


def wait_for(predicate: Any, timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def warm_up(address: str) -> None:
    """One ApiVersions roundtrip on a throwaway connection: imports and caches are paid for
    before the baseline, so the delta is the connections' own cost."""
    import socket

    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(API_VERSIONS)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        s.recv(size, socket.MSG_WAITALL)


def proxy_args(variant: str, broker: str, workdir: Path) -> list[str]:
    args = [
        *("--upstream", broker, "--listen", "127.0.0.1:0"),
        *("--metrics-listen", "127.0.0.1:0"),
        "--allow-everyone-if-no-acl-found",
    ]
    if variant == "sasl":
        users = workdir / "users.json"
        subprocess.run(
            [
                *(sys.executable, "-m", "aclgate", "users", "add", "bench"),
                *("--users-file", str(users), "--mechanism", "PLAIN", "--password-stdin"),
            ],
            input="bench-secret\n",
            text=True,
            check=True,
            capture_output=True,
            cwd=ROOT,
        )
        args += [
            *("--listener-security-protocol", "SASL_PLAINTEXT", "--sasl-mechanisms", "PLAIN"),
            *("--users-file", str(users), "--authentication-timeout-ms", "600000"),
        ]
    return args


def measure_variant(
    variant: str, broker: Any, count: int, parallel: int, workdir: Path, settle: float = 3.0
) -> dict[str, Any]:
    from tests.fixtures.proxyprocess import ProxyProcess

    args = proxy_args(variant, broker.bootstrap, workdir)
    proxy = ProxyProcess(args, workdir / f"aclgate-{variant}.log")
    clients: Clients | None = None
    try:
        pid = proxy.proc.pid
        active = lambda: int(proxy.metric("aclgate_connections_active", {"listener": "bootstrap"}))  # noqa: E731
        warm_up(proxy.bootstrap)
        wait_for(lambda: active() == 0, 10)
        upstream_before = established_to_port(broker.port)
        rss_before = settle_rss(proxy, settle)
        fds_before = fd_count(pid)

        clients = Clients(proxy.bootstrap, count, variant == "apiversions", parallel)
        opened = clients.read()
        # every accepted connection is either held or refused (closed at once by the proxy)
        last = [-1]

        def stable() -> bool:
            now = active()
            done = now == last[0]
            last[0] = now
            return done

        wait_for(stable, 60, step=1.0)
        held_metric = active()
        rss_held = settle_rss(proxy, settle)
        alive = clients.send("check")["alive"]
        upstream_held = established_to_port(broker.port)
        fds_held = fd_count(pid)
        refused = int(proxy.metric("aclgate_errors_total", {"kind": "fd_limit"}))
        nofile = proxy_nofile(pid)

        clients.stop()
        clients = None
        wait_for(lambda: active() == 0, 30)
        rss_after = settle_rss(proxy, settle)
        upstream_after = established_to_port(broker.port)
        held = alive
        delta = rss_held - rss_before
        return {
            "variant": variant,
            "description": DESCRIPTIONS[variant],
            "proxy_args": args,
            "attempted": count,
            "client": opened,
            "held": held,
            "held_per_metric": held_metric,
            "refused": count - held,
            "refused_fd_limit_metric": refused,
            "proxy_nofile": nofile,
            "rss_before_bytes": rss_before,
            "rss_held_bytes": rss_held,
            "rss_after_close_bytes": rss_after,
            "delta_bytes": delta,
            "per_connection_bytes": round(delta / held) if held else None,
            "upstream_connections_before": upstream_before,
            "upstream_connections_held": upstream_held,
            "upstream_connections_opened": upstream_held - upstream_before,
            "upstream_connections_after_close": upstream_after,
            "proxy_fds_before": fds_before,
            "proxy_fds_held": fds_held,
            "proxy_log_tail": proxy.log.splitlines()[-5:],
        }
    finally:
        if clients is not None:
            clients.stop()
        proxy.stop()


# --------------------------------------------------------------------------------------------
# Report


def _mb(n: int | None) -> str:
    return "–" if n is None else f"{n / MB:.1f}"


def _kb(n: int | None) -> str:
    return "–" if n is None else f"{n / 1024:.1f}"


def markdown(data: dict[str, Any]) -> str:
    env = data["environment"]
    lines = [
        "# Memory per idle client connection",
        "",
        f"Recorded {data['recorded_at']} with `{data['command']}` {measured_code(env)}"
        f", Python {env.get('python')}, uvloop {env.get('uvloop')}, tansu {env.get('tansu')}, "
        f"{env.get('cores')} vCPUs ({env.get('cpu_model')}), load average "
        f"{data['loadavg_before'][0]} before, {data['loadavg_after'][0]} after (1 min; the "
        "machine is shared with other test runs). The proxy's open-files "
        f"limit: {data['proxy_nofile']}; the client process's: {data['client_nofile']}.",
        "",
        f"{data['connections']:,} connections attempted per variant, from one client process, "
        "each variant against a fresh `aclgate serve` (uvloop, a child process) in front of "
        'tansu. RSS is the proxy process\'s VmRSS; "before" is after one warm-up ApiVersions '
        "roundtrip on a connection closed again.",
        "",
        "| Variant | Held | Refused | RSS before (MB) | RSS held (MB) | Per connection (KB) "
        "| Upstream connections opened | RSS after close (MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in data["variants"]:
        lines.append(
            f"| {v['variant']}: {v['description']} | {v['held']:,} | {v['refused']:,} "
            f"| {_mb(v['rss_before_bytes'])} | {_mb(v['rss_held_bytes'])} "
            f"| **{_kb(v['per_connection_bytes'])}** | {v['upstream_connections_opened']:,} "
            f"| {_mb(v['rss_after_close_bytes'])} |"
        )
    lines += [
        "",
        "How to read it:",
        "",
        "* *Per connection* = (RSS held - RSS before) / connections held. It is user-space memory "
        "of the proxy process (Python objects, uvloop handles, buffers); the kernel's socket "
        "buffers are not in RSS.",
        "* *Held* is the connections still open when the client process checked them, after "
        "`aclgate_connections_active` stopped moving; *refused* were accepted and closed by the "
        "proxy. The proxy keeps two descriptors per client connection in reserve (its socket and "
        "an upstream one) and refuses connections past that budget (proxy/listen/fdlimit.py), so with "
        "an open-files limit of 20,000 it holds about 9,490, not 10,000.",
        "* *Upstream connections opened* is the established TCP connections to the broker's port "
        "while the clients were held, minus those before (the proxy's own metadata "
        "connection): silent and unauthenticated clients must not reach the broker.",
        "* *RSS after close*: Python's allocator keeps freed memory in its pools, so RSS need not "
        "drop back when the connections close; a second flood reuses it.",
        "* The SASL variant runs with `--authentication-timeout-ms 600000` so the unauthenticated "
        "connections stay open for the measurement (the default, 30 s, closes them).",
        "",
        "Proxy command lines (broker address and ports vary per run):",
        "",
    ]
    for v in data["variants"]:
        lines.append(f"* {v['variant']}: `aclgate serve {shlex.join(v['proxy_args'])}`")
    lines.append("")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.idle_connections",
        description="RSS of aclgate per idle client connection (see the module docstring).",
    )
    p.add_argument("--connections", type=int, default=10_000, help="per variant (default 10000)")
    p.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated subset of {','.join(VARIANTS)} (default: all)",
    )
    p.add_argument("--parallel", type=int, default=200, help="connects in flight (default 200)")
    p.add_argument(
        "--settle",
        type=float,
        default=3.0,
        help="seconds of RSS sampling (every 0.5 s) per reading; the max of the last 3 counts",
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="where the results go")
    # the client process
    p.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--client-host", help=argparse.SUPPRESS)
    p.add_argument("--client-port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--client-roundtrip", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        p.error(f"unknown variants {sorted(unknown)}; choose from {VARIANTS}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.client:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        asyncio.run(
            client_main(
                args.client_host,
                args.client_port,
                args.connections,
                args.client_roundtrip,
                args.parallel,
            )
        )
        return 0

    from aclgate.proxy.demo.embedded_broker import TansuBroker
    from bench.latency import _loadavg, environment

    command = "python -m bench.idle_connections " + shlex.join(argv or sys.argv[1:])
    loadavg_before = _loadavg()
    env = environment()  # at the start: the code the proxy runs, not what changed since
    results = []
    with tempfile.TemporaryDirectory(prefix="aclgate-idle-") as tmp:
        workdir = Path(tmp)
        with TansuBroker(log_path=workdir / "tansu.log") as broker:
            for variant in args.variants:
                print(f"{variant}: {args.connections:,} connections ...", flush=True)
                result = measure_variant(
                    variant, broker, args.connections, args.parallel, workdir, args.settle
                )
                results.append(result)
                print(
                    f"{variant}: held {result['held']:,}, refused {result['refused']:,}; RSS "
                    f"{_mb(result['rss_before_bytes'])} -> {_mb(result['rss_held_bytes'])} MB "
                    f"({_kb(result['per_connection_bytes'])} KB per connection), "
                    f"{_mb(result['rss_after_close_bytes'])} MB after close; upstream "
                    f"connections opened: {result['upstream_connections_opened']:,}",
                    flush=True,
                )
    data = {
        "benchmark": "idle_connections",
        "recorded_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command.strip(),
        "connections": args.connections,
        "environment": env,
        "loadavg_before": loadavg_before,
        "loadavg_after": _loadavg(),
        "proxy_nofile": results[0]["proxy_nofile"] if results else None,
        "client_nofile": results[0]["client"]["nofile_limit"] if results else None,
        "variants": results,
    }
    md = markdown(data)
    write_results(args.out, "idle_connections", data, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
