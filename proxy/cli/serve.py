"""Run aclgate in front of a Kafka cluster.

Clients connect to --listen as their bootstrap server. The proxy answers them with its own
address for every broker: each upstream broker id gets a proxy port (fixed with --node-port,
or FIRST+id from --broker-ports, the same on every instance), so clients never see a real
broker address.

example:
  aclgate serve --upstream kafka-1:9092 --upstream kafka-2:9092 \\
      --listen 0.0.0.0:9092 --advertised-host proxy.example.com \\
      --broker-ports 19092-19191 --metrics-listen 0.0.0.0:9404

Every flag can also be set in a TOML file given with --config (same names, with
underscores: upstream = ["kafka-1:9092"], broker_ports = "19092-19191"); flags win.
The settings below are grouped by concern; docs/configuration.md lists each with its
TOML key, default and what a change needs, and examples/aclgate.toml is a production
SASL_SSL deployment to start from.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import re
import signal
import sys

from aclgate.authz.aclfile import AclFileError
from aclgate.proxy.aclstore.backend import AclStoreError
from aclgate.proxy.config import ConfigError, ProxyConfig, add_arguments, from_args, name_setting
from aclgate.proxy.ops.logs import configure_logging
from aclgate.proxy.process.gctune import tune_gc

log = logging.getLogger("aclgate")


def configure(parser: argparse.ArgumentParser) -> None:
    # the generated usage would list all ~85 flags (70 lines) before the help; the groups
    # below say what there is
    parser.usage = (
        "%(prog)s [--config FILE] [--upstream HOST:PORT ...] [--listen HOST:PORT] [OPTIONS]"
    )
    add_arguments(parser)


def bind_error(config: ProxyConfig, exc: OSError) -> str:
    """A port that cannot be bound, named by the setting that asked for it, the way the user
    wrote it (`--listen 127.0.0.1:29404: address already in use`); other errors as they are."""
    listener = re.search(r"\('?([^',]*)'?, (\d+)", str(exc))  # asyncio/uvloop: (host, port)
    fixed = re.search(r"cannot bind port (\d+) for broker", str(exc))  # a --node-port's
    if listener and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
        host, port = listener.group(1), int(listener.group(2))
        problem = os.strerror(exc.errno).lower()
    elif fixed:
        host, port = config.listen[0], int(fixed.group(1))
        problem = "cannot bind it (in use, or not allowed)"
    else:
        return str(exc)
    address = f"{host}:{port}"
    candidates: list[tuple[str, str]] = []
    if config.listen[1] == port:
        candidates.append(("listen", address))
    if config.metrics_listen and config.metrics_listen[1] == port:
        candidates.append(("metrics_listen", address))
    candidates += [
        ("node_port", f"{node}={port}") for node, p in config.node_port.items() if p == port
    ]
    if config.broker_ports and config.broker_ports[0] <= port <= config.broker_ports[1]:
        first, last = config.broker_ports
        candidates.append(("broker_ports", f"{first}-{last}"))
    if not candidates:
        return f"{address}: {problem}"
    name, shown = candidates[0]
    if name == "broker_ports":  # the range names many ports: say which one
        problem = f"port {port}: {problem}"
    return f"{name_setting(config.origins.get(name), name, shown)}: {problem}"


async def _serve(server) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    try:
        await stop.wait()
        log.info("shutting down")
    finally:
        await server.close()


def run(args: argparse.Namespace) -> int:
    try:
        config = from_args(args)
    except ConfigError as exc:
        print(f"aclgate serve: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_level)
    if config.workers > 1:  # a supervisor of N proxy processes (proxy/process/workers.py)
        from aclgate.proxy.process.workers import supervise

        return supervise(config)
    import uvloop

    from aclgate.proxy.listen.server import ProxyServer

    # what an operator must fix (a bad ACL, users or certificate file, a taken port) is one
    # clear line and exit status 1, not a traceback
    try:
        server = ProxyServer(config)
    except ConfigError as exc:
        log.error("cannot start: %s", exc)
        return 1
    tune_gc()
    try:
        uvloop.run(_serve(server))
    # an ACL topic that cannot be replayed (proxy/aclstore/kafka/store.py) is one of those
    except (AclFileError, AclStoreError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    except OSError as exc:
        log.error("cannot start: %s", bind_error(config, exc))
        return 1
    return 0
