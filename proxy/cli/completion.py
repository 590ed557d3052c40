"""Print a shell completion script for aclgate.

  aclgate completion bash > /etc/bash_completion.d/aclgate        (or ~/.local/share/bash-completion/completions/aclgate)
  aclgate completion zsh > "${fpath[1]}/_aclgate"

The script is generated (by shtab) from the same parsers the commands use, so it completes
every command and flag there is, and file names where a flag takes a path. It is static:
completing runs no Python, so regenerate it after an upgrade.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

SHELLS = ("bash", "zsh")

#: metavars of flags that take a file or a directory: completed with file names
_FILE_METAVARS = {"PATH", "PEM", "FILE", "JSONL", "CSV"}
_DIR_METAVARS = {"DIR"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")


def full_parser() -> argparse.ArgumentParser:
    """`aclgate` with every command's own parser under it, as `aclgate.proxy.cli.main` builds
    them one at a time."""
    import shtab

    from aclgate.proxy.cli import COMMANDS

    parser = argparse.ArgumentParser(prog="aclgate")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, summary) in COMMANDS.items():
        sub = commands.add_parser(name, help=summary)
        importlib.import_module(module_name).configure(sub)
        for action in sub._actions:
            if action.metavar in _FILE_METAVARS or action.type is Path:
                action.complete = shtab.FILE  # type: ignore[attr-defined]
            elif action.metavar in _DIR_METAVARS:
                action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
    return parser


def run(args: argparse.Namespace) -> int:
    import shtab

    sys.stdout.write(shtab.complete(full_parser(), shell=args.shell))
    return 0
