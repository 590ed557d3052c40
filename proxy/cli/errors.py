"""How the `aclgate` command line fails: one line naming the problem, never a traceback for
something the user caused.

Two halves. `CliParser` is the argument parser of every command: a usage error is one line
(an unknown or mistyped option names the option and the closest known one) and a pointer to
`--help`, not the whole usage text scrolling the message away. `user_error()` recognises the
exceptions that describe the user's input or environment (a file that does not exist, a
cluster that cannot be reached or refuses the request, a policy file that does not parse)
by their classes; `main()` prints those as one line. Every other exception (TypeError,
KeyError, AssertionError, ...) is a bug of ours and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import select
import socket
import sys
from collections.abc import Iterator, Sequence
from typing import NoReturn

#: the exit status of a command whose output pipe was closed: what a shell reports for a tool
#: killed by SIGPIPE (128 + 13), as `yes | head -1` leaves it
CLOSED_PIPE_STATUS = 141

#: the exception classes that are the user's problem, by module: looked up in sys.modules, so
#: recognising them imports nothing (an exception of a module never imported cannot happen)
USER_ERRORS: dict[str, tuple[str, ...]] = {
    "aclgate.proxy.config": ("ConfigError",),
    "aclgate.authz.aclfile": ("AclFileError",),
    "aclgate.authz.model": ("InvalidAclError",),
    "aclgate.proxy.aclstore.backend": ("AclStoreError",),
    "aclgate.proxy.cli.aclsource": ("AclSourceError",),
    "aclgate.proxy.cli.aclstorecli": ("AclStoreCliError",),
    "aclgate.proxy.cli.check": ("QueryError",),
    "aclgate.proxy.security.usersfile": ("UsersFileError",),
    "aclgate.proxy.security.tls": ("TlsConfigError",),
    "aclgate.proxy.httpclient": ("HttpError",),
    "aclgate.proxy.demo.embedded_broker": ("BrokerStartError",),
    "aclgate.certs.pki": ("PkiError",),
    "aclgate.pipeline.jobs": ("InputError",),
    "aclgate.pipeline.sinklog": ("SinkLogError",),
    "aclgate.pipeline.acls": ("AclLoadError",),
    # the Kafka clients: what the cluster answered (an authorization failure, a timeout)
    "kafka.errors": ("KafkaError",),
    "confluent_kafka": ("KafkaException",),
}


def user_error(exc: BaseException) -> str | None:
    """The one line for an exception the user caused, or None for a bug of ours."""
    if isinstance(exc, OSError):
        return _os_error(exc)
    for module_name, names in USER_ERRORS.items():
        module = sys.modules.get(module_name)
        classes = tuple(getattr(module, name) for name in names if hasattr(module, name))
        if classes and isinstance(exc, classes):
            return kafka_error_text(exc) if module_name == "kafka.errors" else _text(exc)
    return None


def _os_error(exc: OSError) -> str | None:
    """A file the user named (it has a filename), a host or port that cannot be reached; an
    OSError without either (EBADF, EINVAL from a system call of ours) is a bug."""
    if exc.filename is not None:
        where = f"{exc.filename} -> {exc.filename2}" if exc.filename2 is not None else exc.filename
        return f"{where}: {exc.strerror or _text(exc)}"
    if isinstance(exc, ConnectionError | TimeoutError | socket.gaierror | socket.herror):
        return _text(exc)
    return None


def kafka_error_text(error: object) -> str:
    """A kafka-python error (class or instance) as Kafka names it, with its number:
    `CLUSTER_AUTHORIZATION_FAILED (31): Cluster authorization failed.`; one without a
    number (a timeout of the client's own) by its text."""
    errno = getattr(error, "errno", None)
    if errno is None:
        return _text(error) if isinstance(error, BaseException) else str(error)
    name = getattr(error, "message", type(error).__name__)
    return f"{name} ({errno}): {getattr(error, 'description', '')}".rstrip(": ")


def _text(exc: BaseException) -> str:
    message = " ".join(str(exc).split())  # one line, whatever the message holds
    return message or type(exc).__name__


def stdout_is_closed() -> bool:
    """True when standard output is a pipe whose reader has gone (`| head -1`): the write end
    of such a pipe polls as an error. A BrokenPipeError from anything else (a socket of ours)
    is not the user's doing."""
    try:
        fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def silence_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's final flush of what is still
    buffered does not fail a second time ("Exception ignored ... BrokenPipeError")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)


@contextlib.contextmanager
def whole_writes() -> Iterator[None]:
    """Standard output that writes all it is given or raises, while a command runs.

    Under PYTHONUNBUFFERED (`python -u`, usual in containers and CI) sys.stdout is a text
    layer straight over the file descriptor, and it drops what a short write(2) leaves over: a
    reader that goes away in the middle of a large write (`aclgate acls export | head -1`)
    cuts the output short without an error, and the command would exit 0. A buffered layer
    in between (flushed at every newline, as unbuffered output reaches the reader by lines)
    writes the rest, so the closed pipe raises BrokenPipeError as with buffered output."""
    out = sys.stdout
    if not isinstance(out, io.TextIOWrapper) or not isinstance(out.buffer, io.RawIOBase):
        yield  # buffered already (the default), or not a file (a test's capture)
        return
    # closefd=False: neither this layer nor its garbage collection closes descriptor 1
    raw = io.FileIO(out.fileno(), "w", closefd=False)
    whole = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=out.encoding,
        errors=out.errors,
        line_buffering=True,
        write_through=True,
    )
    sys.stdout = whole
    try:
        yield
    finally:
        sys.stdout = out
        with contextlib.suppress(OSError, ValueError):
            whole.flush()


class CliParser(argparse.ArgumentParser):
    """argparse with one-line usage errors, and unknown options caught before argparse
    misreads them: `--alow-principal User:x` would otherwise fail as "invalid choice:
    'User:x'" of the next positional argument, far from the real mistake."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._check_options(sys.argv[1:] if args is None else list(args))
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def known_options(self) -> set[str]:
        """Every option string of this parser and of its sub-commands' parsers."""
        found: set[str] = set()
        for parser in _parsers(self):
            found.update(parser._option_string_actions)
        return found

    def unknown_option(self, token: str) -> str | None:
        """The one-line complaint about `token` (`--name` or `--name=value`) when no option
        of this command is named so (or starts so, argparse's abbreviations), else None."""
        name = token.split("=", 1)[0]
        known = self.known_options()
        if name in known or (self.allow_abbrev and any(k.startswith(name) for k in known)):
            return None
        longs = sorted(k for k in known if k.startswith("--"))
        close = difflib.get_close_matches(name, longs, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"unrecognized option {name}{hint}"

    def _check_options(self, args: Sequence[str]) -> None:
        for token in args:
            if token == "--":  # the rest are positional arguments
                return
            if token.startswith("--") and len(token) > 2:
                complaint = self.unknown_option(token)
                if complaint is not None:
                    self.error(complaint)


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def report(prog: str, message: str) -> None:
    """The one line of a failed command, on standard error."""
    print(f"{prog}: error: {message}", file=sys.stderr)
