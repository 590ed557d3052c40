"""Manage the SASL users file: salted SCRAM credentials and PLAIN password hashes only.

  aclgate users add NAME --users-file F [--mechanism SCRAM-SHA-512 ...] [--password-stdin]
                                        [--group G ...]
  aclgate users set-groups NAME --users-file F (--group G ... | --none)
  aclgate users remove NAME --users-file F
  aclgate users list --users-file F

`add` creates or replaces the user with credentials for each --mechanism (default
SCRAM-SHA-512). The password is read from standard input (--password-stdin, first line) or
asked for twice on the terminal; it is never taken from the command line. --group gives the
user's groups (`Group:G` principals in ACLs); without it a replaced user keeps its groups.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from aclgate.protocol.identity.sasl.credentials import (
    SCRAM_DEFAULT_ITERATIONS,
    SCRAM_MAX_ITERATIONS,
    SCRAM_MIN_ITERATIONS,
    scram_iterations_problem,
)
from aclgate.proxy.security.usersfile import (
    MECHANISMS,
    UsersFileError,
    add_user,
    checked_groups,
    load_users,
    remove_user,
    set_groups,
)

GROUP_HELP = (
    "a group of the user (repeatable; one name per option, commas and spaces are part of it): "
    "ACLs name it as Group:G"
)


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = sub.add_parser("add", help="create or replace a user")
    p.add_argument("name")
    p.add_argument("--users-file", required=True, metavar="F")
    p.add_argument(
        "--mechanism",
        action="append",
        default=[],
        metavar="MECH",
        help=f"one of {', '.join(MECHANISMS)}; repeatable or comma-separated (default SCRAM-SHA-512)",
    )
    p.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input"
    )
    p.add_argument(
        "--iterations",
        type=int,
        default=SCRAM_DEFAULT_ITERATIONS,
        help=f"SCRAM iterations, {SCRAM_MIN_ITERATIONS}-{SCRAM_MAX_ITERATIONS} (default {SCRAM_DEFAULT_ITERATIONS})",
    )
    p.add_argument(
        "--group",
        action="append",
        default=None,
        metavar="G",
        help=GROUP_HELP + "; without it a replaced user keeps its groups",
    )
    p = sub.add_parser("set-groups", help="set (or clear) a user's groups")
    p.add_argument("name")
    p.add_argument("--users-file", required=True, metavar="F")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--group", action="append", metavar="G", help=GROUP_HELP)
    which.add_argument("--none", action="store_true", help="the user has no groups")
    p = sub.add_parser("remove", help="remove a user")
    p.add_argument("name")
    p.add_argument("--users-file", required=True, metavar="F")
    p = sub.add_parser("list", help="list users: name, mechanisms, then each group, tab-separated")
    p.add_argument("--users-file", required=True, metavar="F")


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline()
        return line[:-1] if line.endswith("\n") else line
    if not sys.stdin.isatty():
        raise UsersFileError("no terminal to ask for the password; use --password-stdin")
    first = getpass.getpass("Password: ")
    if first != getpass.getpass("Password (again): "):
        raise UsersFileError("the passwords do not match")
    return first


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "add":
            problem = scram_iterations_problem(args.iterations)
            if problem is not None:  # refused before the password is asked for
                raise UsersFileError(f"--{problem}")
            mechs = [
                m.strip()
                for arg in args.mechanism or ["SCRAM-SHA-512"]
                for m in arg.split(",")
                if m.strip()
            ]
            if args.group is not None:
                checked_groups(args.group)  # refused before the password is asked for
            password = _read_password(args.password_stdin)
            existed = add_user(
                args.users_file,
                args.name,
                password,
                mechs,
                iterations=args.iterations,
                groups=args.group,
            )
            shown = f"; groups {', '.join(sorted(set(args.group)))}" if args.group else ""
            print(
                f"{'updated' if existed else 'added'} user {args.name} "
                f"({', '.join(sorted(set(mechs)))}{shown})"
            )
        elif args.action == "set-groups":
            groups = [] if args.none else args.group
            if not set_groups(args.users_file, args.name, groups):
                print(
                    f"aclgate users set-groups: no user {args.name!r} in {args.users_file}",
                    file=sys.stderr,
                )
                return 1
            listed = ", ".join(sorted(set(groups))) or "none"
            print(f"user {args.name}: groups {listed}")
        elif args.action == "remove":
            if not remove_user(args.users_file, args.name):
                print(
                    f"aclgate users remove: no user {args.name!r} in {args.users_file}",
                    file=sys.stderr,
                )
                return 1
            print(f"removed user {args.name}")
        else:
            users = load_users(args.users_file)
            for name in users.names():
                # a group name holds no control character: a tab ends it, whatever it holds
                print("\t".join((name, ",".join(users.mechanisms(name)), *users.groups_for(name))))
    except UsersFileError as e:
        print(f"aclgate users {args.action}: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `| head`: the entry point ends quietly, as Unix tools do
        raise
    except OSError as e:
        print(
            f"aclgate users {args.action}: {e.strerror or e}: {e.filename or args.users_file}",
            file=sys.stderr,
        )
        return 1
    return 0
