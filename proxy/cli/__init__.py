"""The `aclgate` command line.

Sub-commands live in their own modules and are imported only when used, so that
`aclgate check` does not pay for uvloop or PySpark and `aclgate --help` is instant.
A sub-command module exposes `configure(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Sequence

from aclgate import __version__, native
from aclgate.proxy.cli.errors import (
    CLOSED_PIPE_STATUS,
    CliParser,
    report,
    silence_stdout,
    stdout_is_closed,
    user_error,
    whole_writes,
)

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
    "completion": ("aclgate.proxy.cli.completion", "print a bash or zsh completion script"),
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
    parser = CliParser(
        prog="aclgate",
        description="aclgate: an authorizing proxy for the Kafka protocol.\n\ncommands:\n"
        + listing,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"aclgate {__version__}, {native.describe()}"
    )
    parser.add_argument("command", nargs="?", help="one of the commands above")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The `aclgate` entry point: a user's mistake is one line on stderr and a non-zero exit
    status (proxy/cli/errors.py says which exceptions are a user's); a bug of ours keeps its
    traceback. ACLGATE_TRACEBACK=1 shows the traceback of a user's error too."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        parser = _top_parser()
        args = parser.parse_args(argv[:1])
        if args.command is None:
            parser.print_help()
            return 2
        close = difflib.get_close_matches(args.command, COMMANDS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        parser.error(f"unknown command {args.command!r}{hint}")
    name, rest = argv[0], argv[1:]
    module = importlib.import_module(COMMANDS[name][0])
    parser = CliParser(
        prog=f"aclgate {name}",
        description=(module.__doc__ or COMMANDS[name][1]).strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.configure(parser)
    with whole_writes():  # a short write to a closed pipe fails, even under python -u
        try:
            args = parser.parse_args(rest)
            status = int(module.run(args) or 0)
            sys.stdout.flush()  # a closed pipe fails here rather than at the interpreter's exit
            return status
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            if not stdout_is_closed():
                raise
            silence_stdout()  # like any Unix tool whose reader has gone: quietly, no message
            return CLOSED_PIPE_STATUS
        except Exception as exc:
            message = user_error(exc)
            if message is None or os.environ.get("ACLGATE_TRACEBACK"):
                raise
            report(parser.prog, message)
            return 1
