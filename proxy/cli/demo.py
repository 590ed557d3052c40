"""Start an embedded Kafka-compatible broker (tansu, memory only) with aclgate in front of it.

This is what `make run` does. The broker listens on a hidden loopback port; clients only
ever see the proxy. Ctrl-C stops both.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import tempfile
from pathlib import Path

from proxy.config import ProxyConfig, parse_host_port
from proxy.embedded_broker import BrokerStartError, TansuBroker, free_port
from proxy.logs import configure_logging

log = logging.getLogger("aclgate.demo")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen",
        default="127.0.0.1:9092",
        metavar="HOST:PORT",
        help="bootstrap address for clients (default 127.0.0.1:9092; a free port if taken)",
    )
    parser.add_argument(
        "--metrics-listen",
        default="127.0.0.1:9404",
        metavar="HOST:PORT",
        help="Prometheus /metrics, /healthz, /readyz (default 127.0.0.1:9404)",
    )
    parser.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=("DEBUG", "INFO", "WARNING")
    )


def _port_free(host: str, port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def banner(bootstrap: str, metrics: str, broker_log: Path) -> str:
    py = sys.executable
    return f"""
  aclgate demo is running: an embedded broker (tansu) with aclgate in front of it.

    bootstrap servers   {bootstrap}
    metrics and health  http://{metrics}/metrics   /healthz   /readyz
    broker log          {broker_log}

  Try it from another terminal:
    {py} -m proxy.democlient --bootstrap {bootstrap} produce demo "hello through aclgate"
    {py} -m proxy.democlient --bootstrap {bootstrap} consume demo

  Any Kafka client works the same way, e.g. kcat -b {bootstrap} -L

  Ctrl-C stops the proxy and the broker.
"""


async def _run(config: ProxyConfig, broker_log: Path) -> None:
    from proxy.server import ProxyServer

    server = ProxyServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    host, port = server.bootstrap_address
    metrics = "{}:{}".format(*server.metrics_address) if server.metrics_address else "(off)"
    print(banner(f"{host}:{port}", metrics, broker_log), flush=True)
    try:
        await stop.wait()
    finally:
        log.info("stopping the proxy")
        await server.close()


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    host, port = parse_host_port(args.listen)
    if not _port_free(host, port):
        log.warning("%s:%d is taken; using a free port instead", host, port)
        port = 0
    metrics_host, metrics_port = parse_host_port(args.metrics_listen)
    if not _port_free(metrics_host, metrics_port):
        metrics_port = 0
    broker_log = Path(tempfile.gettempdir()) / "aclgate-demo-tansu.log"
    broker_log.unlink(missing_ok=True)
    try:
        broker = TansuBroker(port=free_port(), log_path=broker_log).start()
    except BrokerStartError as exc:
        log.error("%s", exc)
        return 1
    log.info("embedded broker (tansu) on hidden port %d", broker.port)
    config = ProxyConfig(
        upstream=[("127.0.0.1", broker.port)],
        listen=(host, port),
        metrics_listen=(metrics_host, metrics_port),
        log_level=args.log_level,
    ).validate()
    import uvloop

    try:
        uvloop.run(_run(config, broker_log))
    finally:
        log.info("stopping the broker")
        broker.stop()
    return 0
