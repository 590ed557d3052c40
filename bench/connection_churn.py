"""Connection churn: the proxy's RSS while clients connect and disconnect, plaintext vs TLS.

    python -m bench.connection_churn                      # 10,000 connections per listener
    python -m bench.connection_churn --connections 500 --out /tmp/x

Why: the soak (bench/soak.py) showed the proxy's RSS stepping up at every certificate reload,
and the step turned out to come from the probe's new TLS connection, not from the reload.
This isolates it: a fresh `aclgate serve` (child process, uvloop) in front of tansu, one
client opening connections one after another (TLS: full handshake, no session resumption)
and closing them at once, no Kafka request sent; the proxy's RSS sampled every tenth of the
run and again a few seconds after the last connection. A listener whose per-connection memory
is given back stays flat after the first few hundred connections.

Writes connection_churn.json and connection_churn.md to bench/results/ or --out.
"""

from __future__ import annotations

import argparse
import shlex
import socket
import ssl
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.recording import measured_code, write_results

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent
MB = 1024 * 1024
WARMUP = 50


def run_listener(kind: str, broker: str, pki: Path, count: int, workdir: Path) -> dict[str, Any]:
    from bench.soak import cli
    from tests.fixtures.proxyprocess import ProxyProcess

    args = ["--upstream", broker, "--listen", "127.0.0.1:0", "--allow-everyone-if-no-acl-found"]
    if kind == "tls":
        if not (pki / "ca.crt").exists():
            cli("certs", "init", "--out", str(pki))
            cli("certs", "server", "--out", str(pki), "--ip", "127.0.0.1")
        args += [
            *("--listener-security-protocol", "SSL"),
            *("--ssl-certfile", str(pki / "server.crt"), "--ssl-keyfile", str(pki / "server.key")),
        ]
    proxy = ProxyProcess(args, workdir / f"aclgate-{kind}.log")
    host, port = proxy.bootstrap.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(pki / "ca.crt")) if kind == "tls" else None

    def one() -> None:
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            if context is not None:
                with context.wrap_socket(raw, server_hostname=host) as tls:
                    tls.getpeercert()

    try:
        for _ in range(WARMUP):
            one()
        time.sleep(1.0)
        base = proxy.rss_bytes()
        points = [{"connections": 0, "rss_bytes": base}]
        t0 = time.monotonic()
        step = max(1, count // 10)
        for i in range(1, count + 1):
            one()
            if i % step == 0 or i == count:
                points.append({"connections": i, "rss_bytes": proxy.rss_bytes()})
        seconds = time.monotonic() - t0
        time.sleep(5.0)
        after = proxy.rss_bytes()
        return {
            "listener": kind,
            "proxy_args": args,
            "connections": count,
            "seconds": round(seconds, 1),
            "points": points,
            "rss_before_bytes": base,
            "rss_after_bytes": after,
            "growth_bytes": after - base,
            "growth_per_connection_bytes": round((after - base) / count),
        }
    finally:
        proxy.stop()


def markdown(data: dict[str, Any]) -> str:
    env = data["environment"]
    lines = [
        "# Connection churn: proxy RSS while clients connect and disconnect",
        "",
        f"Recorded {data['recorded_at']} with `{data['command']}` {measured_code(env)}"
        f", Python {env.get('python')}, uvloop {env.get('uvloop')}, "
        f"{data['openssl']}, {env.get('cores')} vCPUs shared with other test runs.",
        "",
        f"{data['connections']:,} connections per listener, opened and closed one after another "
        f"by one client (after {WARMUP} warm-up connections), no Kafka request sent; a fresh "
        "`aclgate serve` per listener. RSS in MB above the proxy's RSS after the warm-up:",
        "",
    ]
    columns = [
        "Listener",
        *(f"{p['connections']:,}" for p in data["listeners"][0]["points"][1:]),
        "5 s later",
        "Per connection",
    ]
    lines += ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for entry in data["listeners"]:
        base = entry["rss_before_bytes"]
        cells = " | ".join(f"{(p['rss_bytes'] - base) / MB:+.1f}" for p in entry["points"][1:])
        lines.append(
            f"| {entry['listener']} | {cells} | {(entry['rss_after_bytes'] - base) / MB:+.1f} "
            f"| {entry['growth_per_connection_bytes'] / 1024:.1f} KB |"
        )
    lines += [
        "",
        "Per connection = growth after the last connection / connections. Nothing is open at the "
        "end: the growth is memory the proxy kept (or could not give back) after the "
        "connections closed.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.connection_churn",
        description="proxy RSS under connection churn, plaintext vs TLS (see the docstring)",
    )
    p.add_argument("--connections", type=int, default=10_000, help="per listener (10000)")
    p.add_argument("--listeners", default="plaintext,tls", help="plaintext,tls (default both)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where the results go")
    args = p.parse_args(argv)

    from aclgate.proxy.demo.embedded_broker import TansuBroker
    from bench.latency import environment

    command = "python -m bench.connection_churn " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    env = environment()  # at the start: the code the proxy runs, not what changed since
    results = []
    with tempfile.TemporaryDirectory(prefix="aclgate-churn-") as tmp:
        work = Path(tmp)
        with TansuBroker(log_path=work / "tansu.log") as broker:
            for kind in [k.strip() for k in args.listeners.split(",") if k.strip()]:
                print(f"{kind}: {args.connections:,} connections ...", flush=True)
                entry = run_listener(kind, broker.bootstrap, work / "pki", args.connections, work)
                results.append(entry)
                print(
                    f"{kind}: RSS {entry['rss_before_bytes'] / MB:.1f} -> "
                    f"{entry['rss_after_bytes'] / MB:.1f} MB "
                    f"({entry['growth_per_connection_bytes'] / 1024:.1f} KB per connection) in "
                    f"{entry['seconds']} s",
                    flush=True,
                )
    data = {
        "benchmark": "connection_churn",
        "recorded_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command.strip(),
        "connections": args.connections,
        "openssl": ssl.OPENSSL_VERSION,
        "environment": env,
        "listeners": results,
    }
    md = markdown(data)
    write_results(args.out, "connection_churn", data, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
