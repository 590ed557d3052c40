"""Durable file updates shared by the ACL file, the users file and the dev PKI.

A crash leaves the old file or the new one, never a mix (temporary file, fsync, rename, fsync
of the directory); concurrent writers from several processes serialize on a sidecar lock file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def exclusive_lock(path: Path, mode: int = 0o600) -> Iterator[None]:
    """Hold an exclusive flock on `path`.lock for a read-modify-write of `path`."""
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
