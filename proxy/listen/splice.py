"""Zero-copy relay of the bytes of an answer aclgate need not see (Linux `splice(2)`).

The bulk of a Fetch answer is record sets the proxy never reads: the session walks the
answer's framing by offsets and skips each record set by its length (protocol/answerwalk.py).
The broker sends those bytes with zero copies; a proxy copying them through Python (a read
into a bytes object, a write out of it) puts every byte of every fetch on the consumer's
critical path. When the session says the broker's next bytes are opaque
(`ProxySession.opaque_ahead`) and both connections are plain TCP, they are moved from the
broker's socket to the client's through a pipe, in the kernel: `splice(socket -> pipe)` then
`splice(pipe -> socket)`, with the upstream transport's reading paused meanwhile, and each
part that reached the client reported to the session (`relayed_opaque`), in order.

TLS on either side cannot be spliced (the bytes must be decrypted or encrypted in user space:
kTLS would need the TLS session handed to the kernel, which neither Python's ssl module nor
uvloop does; docs/design.md, "Zero-copy fetch answers"). Anything unexpected (no splice on
this platform, no file descriptors left, an error other than a closed peer) falls back to
the ordinary path for the rest of the connection; a closed peer closes the connection as a
read or write would.

uvloop owns the sockets' descriptors (`add_reader` on them is refused), so the splicer
waits on duplicates of them (`os.dup`), made with the pipe when a relay starts and closed
when it ends: a connection holds four more descriptors only while it splices.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
from typing import Protocol

log = logging.getLogger("aclgate.splice")

#: splice(2) is Linux's; os.splice exists on Linux from Python 3.10
AVAILABLE = hasattr(os, "splice") and hasattr(os, "SPLICE_F_NONBLOCK")
_FLAGS = (os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK) if AVAILABLE else 0
#: the pipe's capacity asked for (the kernel's default is 64 KiB; unprivileged processes may
#: grow it up to /proc/sys/fs/pipe-max-size, 1 MiB by default)
PIPE_SIZE = 1 << 20
#: bytes moved in one event-loop turn at most before the loop serves others
TURN_BYTES = 4 << 20
#: F_SETPIPE_SZ (Linux 2.6.35+; in the fcntl module from Python 3.10)
_SETPIPE = getattr(fcntl, "F_SETPIPE_SZ", 1031)
#: a peer that went away: closes the connection, as a failed read or write would
_GONE = {errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN}


class OpaqueSource(Protocol):
    """What the splicer needs of the session (protocol/session.py `ProxySession`)."""

    def opaque_ahead(self) -> int: ...

    def relayed_opaque(self, n: int) -> None: ...


class SpliceHost(Protocol):
    """The connection the splicer works for (proxy/listen/connection.py)."""

    def splice_done(self) -> None:
        """The relay ended: the upstream transport may read again."""

    def splice_failed(self, reason: str, kind: str | None) -> None:
        """A peer went away mid-relay: close the connection."""

    def splice_progress(self, n: int) -> None:
        """`n` bytes moved to the client (metrics, the idle-connection sweep)."""


class Splicer:
    """Relays the opaque bytes of one answer at a time from `upstream_fd` to `client_fd`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        host: SpliceHost,
        source: OpaqueSource,
        upstream_fd: int,
        client_fd: int,
    ) -> None:
        self._loop = loop
        self._host = host
        self._source = source
        self._upstream_fd = upstream_fd
        self._client_fd = client_fd
        #: (upstream dup, client dup, pipe read end, pipe write end) while relaying
        self._fds: tuple[int, int, int, int] | None = None
        #: bytes taken from the broker into the pipe, not yet in the client's socket
        self._in_pipe = 0
        #: (descriptor, for writing) the relay waits on, if it waits
        self._waiting: tuple[int, bool] | None = None
        #: False after a failure that is not a peer's: the ordinary path from then on
        self.usable = AVAILABLE

    @property
    def active(self) -> bool:
        return self._fds is not None

    def start(self) -> bool:
        """Begin relaying the source's opaque bytes; False if it cannot (nothing was done)."""
        if self._fds is not None or not self.usable:
            return self._fds is not None
        opened: list[int] = []
        try:
            opened.append(os.dup(self._upstream_fd))
            opened.append(os.dup(self._client_fd))
            read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            opened += (read_end, write_end)
            try:
                fcntl.fcntl(write_end, _SETPIPE, PIPE_SIZE)
            except OSError:
                pass  # the default 64 KiB pipe: more turns, same bytes
        except OSError as exc:  # no descriptors left, or no pipes: the ordinary path
            for fd in opened:
                os.close(fd)
            log.debug("zero-copy relay not started: %s", exc)
            return False
        self._fds = (opened[0], opened[1], opened[2], opened[3])
        self._step()
        return True

    def close(self) -> None:
        """Stop at once (the connection is closing); what is in the pipe is dropped."""
        self._unwait()
        fds, self._fds = self._fds, None
        if fds is not None:
            for fd in fds:
                os.close(fd)
        self._in_pipe = 0

    def _finish(self) -> None:
        self.close()
        self._host.splice_done()

    def _wait(self, fd: int, writable: bool) -> None:
        self._unwait()
        if writable:
            self._loop.add_writer(fd, self._step)
        else:
            self._loop.add_reader(fd, self._step)
        self._waiting = (fd, writable)

    def _unwait(self) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is None:
            return
        fd, writable = waiting
        if writable:
            self._loop.remove_writer(fd)
        else:
            self._loop.remove_reader(fd)

    def _step(self) -> None:
        """Move what can be moved now; wait for the socket that is not ready."""
        self._unwait()
        fds = self._fds
        if fds is None:
            return
        upstream, client, read_end, write_end = fds
        source = self._source
        moved = 0
        try:
            while moved < TURN_BYTES:
                if self._in_pipe:
                    try:
                        n = os.splice(read_end, client, self._in_pipe, flags=_FLAGS)
                    except BlockingIOError:
                        self._wait(client, writable=True)
                        return
                    if n <= 0:
                        raise OSError(errno.EIO, "splice to the client moved nothing")
                    self._in_pipe -= n
                    moved += n
                    source.relayed_opaque(n)  # may end the answer: its tail is written
                    continue
                want = source.opaque_ahead()
                if not want or self._fds is None:
                    self._finish()
                    return
                try:
                    n = os.splice(upstream, write_end, min(want, PIPE_SIZE), flags=_FLAGS)
                except BlockingIOError:
                    self._wait(upstream, writable=False)
                    return
                if n == 0:  # the broker closed: its reader sees it once reading resumes
                    self._finish()
                    return
                self._in_pipe += n
        except OSError as exc:
            self.close()
            if exc.errno in _GONE:
                self._host.splice_failed(f"zero-copy relay: {exc.strerror}", None)
            else:  # unexpected: never again on this connection, and say so
                self.usable = False
                self._host.splice_failed(f"zero-copy relay failed: {exc!r}", "splice_failed")
            return
        except Exception as exc:  # a bug of ours: the answer cannot be finished
            self.close()
            self.usable = False
            self._host.splice_failed(f"zero-copy relay failed: {exc!r}", "internal_error")
            return
        finally:
            if moved:
                self._host.splice_progress(moved)
        self._loop.call_soon(self._step)  # a large answer: let the loop serve others
