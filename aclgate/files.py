"""Durable file updates shared by the ACL file, the users file and the dev PKI.

A crash leaves the old file or the new one, never a mix (temporary file, fsync, rename, fsync
of the directory); concurrent writers from several processes serialize on a sidecar lock file.

A writer killed mid-write (kill -9, OOM, power loss) leaves its temporary file
`.<name>.<8 random characters>.tmp` behind; the next write of the same file removes it. The
writer holds an flock on its temporary file from just after creating it until it is renamed,
so "stale" is decided by the kernel, not guessed from a pid or an age: a temporary whose lock
can be taken has no living writer (the lock goes with the process, however it dies), one whose
lock is held belongs to a write in progress and is left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("aclgate.fsutil")

#: what follows ".<name>." in a temporary of ours: tempfile.mkstemp's 8 random characters
_TEMPORARY = re.compile(r"[a-z0-9_]{8}\.tmp")


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    path = Path(path)
    remove_stale_temporaries(path)
    while True:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        if _lock_temporary(fd, tmp):
            break
        os.close(fd)  # removed by another writer's clean-up before we locked it: a new name
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)  # still locked: nobody takes the temporary for a stale one
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _lock_temporary(fd: int, tmp: str) -> bool:
    """Lock our new temporary file; False when it was removed before the lock was taken (a
    clean-up saw it unlocked in the instant between its creation and the lock)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:  # no flock on this file system: then nobody removes it either
        return True
    try:
        return os.stat(tmp).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def remove_stale_temporaries(path: Path) -> list[str]:
    """Remove the temporary files of `path` left by writers that died; returns their names.

    Only `.<name>.<8 random characters>.tmp` regular files in the same directory are
    considered, and of those only the ones whose flock can be taken (no living writer holds
    it). Where flock is not available nothing is removed.
    """
    path = Path(path)
    prefix = f".{path.name}."
    removed: list[str] = []
    try:
        entries = os.scandir(path.parent)
    except OSError:
        return removed
    with entries:
        candidates = [
            e.path
            for e in entries
            if e.name.startswith(prefix) and _TEMPORARY.fullmatch(e.name, len(prefix))
        ]
    for candidate in candidates:
        try:
            fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:  # gone already (renamed by its writer), a symlink, unreadable
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # a write in progress (or no flock here: cannot tell, keep it)
                continue
            # still the same file under that name (not renamed away and the name reused)
            if os.lstat(candidate).st_ino != os.fstat(fd).st_ino:
                continue
            os.unlink(candidate)
            removed.append(os.path.basename(candidate))
        except OSError:
            continue
        finally:
            os.close(fd)
    if removed:
        log.info(
            "removed %d temporary file(s) of %s left by interrupted writes: %s",
            len(removed),
            path,
            ", ".join(removed),
        )
    return removed


@contextlib.contextmanager
def exclusive_lock(path: Path, mode: int = 0o600) -> Iterator[None]:
    """Hold an exclusive flock on `path`.lock for a read-modify-write of `path`."""
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def stat_signature(st: os.stat_result) -> tuple[int, ...]:
    """What says a file changed: a rewrite in place (size, mtime, ctime) or a replacement by
    rename (device, inode). Every file the proxy follows (ACLs, users, secrets, TLS) uses it."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def file_signature(path: str | os.PathLike[str]) -> tuple[int, ...]:
    """`stat_signature` of `path`; OSError if it cannot be stat'ed."""
    return stat_signature(os.stat(path))
