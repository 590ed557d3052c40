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
import logging
import signal
import sys

from aclgate.authz.aclfile import AclFileError
from aclgate.proxy.aclstore.backend import AclStoreError
from aclgate.proxy.config import ConfigError, add_arguments, bind_error, from_args
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
