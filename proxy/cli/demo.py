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

from aclgate.proxy.config import ProxyConfig, parse_host_port
from aclgate.proxy.demo.embedded_broker import BrokerStartError, TansuBroker, free_port
from aclgate.proxy.ops.logs import configure_logging

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


DEMO_ACLS = [
    # the demo client is anonymous (plaintext): let it use everything named demo*
    ("TOPIC", "demo", "PREFIXED", "User:ANONYMOUS", "ALL", "ALLOW"),
    ("GROUP", "demo", "PREFIXED", "User:ANONYMOUS", "ALL", "ALLOW"),
    # ... except reading one topic, to show a denial
    ("TOPIC", "demo-secret", "LITERAL", "User:ANONYMOUS", "READ", "DENY"),
]


def write_demo_acls(path: Path) -> None:
    from aclgate.authz.aclfile import dump_acl_file
    from aclgate.authz.model import AclBinding

    bindings = [
        AclBinding.from_dict(
            {
                "resource_type": rtype,
                "resource_name": name,
                "pattern_type": pattern,
                "principal": principal,
                "host": "*",
                "operation": op,
                "permission_type": perm,
            }
        )
        for rtype, name, pattern, principal, op, perm in DEMO_ACLS
    ]
    path.write_text(dump_acl_file(bindings))


def banner(bootstrap: str, metrics: str, workdir: Path) -> str:
    py = sys.executable
    demo = f"{py} -m aclgate.proxy.demo.client --bootstrap {bootstrap}"
    return f"""
  aclgate demo is running: an embedded broker (tansu) with aclgate in front of it.

    bootstrap servers   {bootstrap}
    metrics and health  http://{metrics}/metrics   /healthz   /readyz
    ACLs (hot reload)   {workdir}/acls.json
    audit log           {workdir}/audit.jsonl
    broker log          {workdir}/tansu.log

  Try it from another terminal (clients are User:ANONYMOUS on this plaintext listener):
    {demo} produce demo "hello through aclgate"      allowed: topics demo* are open
    {demo} consume demo
    {demo} produce orders "nope"                     denied: no ACL for topic orders
    {demo} produce demo-secret "x" && {demo} consume demo-secret    write ok, read denied

  Change the policy while it runs (the proxy reloads the file):
    {py} -m aclgate acls --acl-file {workdir}/acls.json --add --allow-principal User:ANONYMOUS --producer --topic orders
    {py} -m aclgate acls --acl-file {workdir}/acls.json --list

  Ctrl-C stops the proxy and the broker.
"""


async def _run(config: ProxyConfig, workdir: Path) -> None:
    from aclgate.proxy.listen.server import ProxyServer

    server = ProxyServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    assert server.bootstrap_address is not None  # start() has bound the bootstrap listener
    host, port = server.bootstrap_address
    metrics = "{}:{}".format(*server.metrics_address) if server.metrics_address else "(off)"
    print(banner(f"{host}:{port}", metrics, workdir), flush=True)
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
    workdir = Path(tempfile.mkdtemp(prefix="aclgate-demo-"))
    broker_log = workdir / "tansu.log"
    write_demo_acls(workdir / "acls.json")
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
        acl_file=workdir / "acls.json",
        audit_file=workdir / "audit.jsonl",
        audit_window=2.0,
    ).validate()
    import uvloop

    try:
        uvloop.run(_run(config, workdir))
    finally:
        log.info("stopping the broker")
        broker.stop()
    return 0
