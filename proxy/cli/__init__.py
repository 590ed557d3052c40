"""The `aclgate` command line.

Sub-commands live in their own modules and are imported only when used, so that
`aclgate check` does not pay for uvloop or PySpark and `aclgate --help` is instant.
A sub-command module exposes `configure(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from aclgate import __version__

# name -> (module, one-line summary shown by `aclgate --help`)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("aclgate.proxy.cli.serve", "run the proxy in front of a Kafka cluster"),
    "demo": (
        "aclgate.proxy.cli.demo",
        "start an embedded broker with the proxy in front (what `make run` does)",
    ),
    "acls": (
        "aclgate.proxy.cli.acls",
        "add, remove and list ACLs in an ACL file (kafka-acls options)",
    ),
    "check": (
        "aclgate.proxy.cli.check",
        "decide a file of authorization queries against an ACL file",
    ),
    "users": ("aclgate.proxy.cli.users", "manage the SASL users file (salted credentials only)"),
    "certs": ("aclgate.proxy.cli.certs", "create a development CA and server/client certificates"),
    "report": ("aclgate.pipeline.cli.report", "Spark: access report from audit logs"),
    "advise": (
        "aclgate.pipeline.cli.advise",
        "Spark: propose least-privilege ACLs from audit logs",
    ),
    "whatif": (
        "aclgate.pipeline.cli.whatif",
        "Spark: replay audit logs against a candidate ACL file",
    ),
    "stream": (
        "aclgate.pipeline.cli.stream",
        "Spark: the audit topic, continuously, into windows, alerts and Parquet",
    ),
    "audit-sample": (
        "aclgate.pipeline.cli.sample",
        "generate a synthetic audit log for demos and benchmarks",
    ),
}

EPILOG = """\
quick start:
  aclgate demo                                   embedded broker + proxy on localhost
  aclgate serve --upstream kafka1:9092 --listen 0.0.0.0:9092 --advertised-host proxy.example.com \\
                --broker-ports 19092-19191 --acl-file acls.json
  aclgate acls --acl-file acls.json --add --allow-principal User:alice --operation Read --topic orders
  aclgate check --acl-file acls.json --queries queries.jsonl

Run `aclgate COMMAND --help` for the options of one command.
"""


def _top_parser() -> argparse.ArgumentParser:
    width = max(len(n) for n in COMMANDS)
    listing = "\n".join(f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="aclgate",
        description="aclgate: an authorizing proxy for the Kafka protocol.\n\ncommands:\n"
        + listing,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"aclgate {__version__}")
    parser.add_argument("command", nargs="?", help="one of the commands above")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        parser = _top_parser()
        args = parser.parse_args(argv[:1])
        if args.command is None:
            parser.print_help()
            return 2
        parser.error(f"unknown command {args.command!r}; see `aclgate --help`")
    name, rest = argv[0], argv[1:]
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(
        prog=f"aclgate {name}",
        description=(module.__doc__ or COMMANDS[name][1]).strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.configure(parser)
    args = parser.parse_args(rest)
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        return 130
