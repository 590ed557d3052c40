"""The ACL file on disk: durable read-modify-write for the CLI, hot reload for the proxy.

Writers (`aclgate acls`, several at once, from several processes) serialise on an exclusive
`flock` of a sidecar `<file>.lock` (the data file is replaced by rename, so it cannot carry the
lock), write a temp file in the same directory, fsync it, rename it over the old file and fsync
the directory: nothing is lost between concurrent writers and a crash leaves the old or the new
file, never a torn one. Readers need no lock: a rename is atomic.

The watcher polls (stat, then a content hash when the stat changed) and loads a new policy into
the Authorizer. A file that cannot be read, parsed or validated never replaces the policy in
force: the previous ACLs stay, one ERROR names the problem, and `last_error` says it until a
good file appears (fail closed, not open).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from aclgate.authz.aclfile import AclFileError, dump_acl_file, parse_acl_file
from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclBinding
from aclgate.files import exclusive_lock, stat_signature, write_atomically
from aclgate.proxy.aclstore.backend import warn_literal_cidr_hosts

__all__ = ["AclFileError", "AclFileStore", "AclFileWatcher"]

log = logging.getLogger("aclgate.acls")

RACY_SECONDS = 2.0  # a file modified this recently may change again within one mtime tick


def _read(path: Path) -> tuple[bytes, os.stat_result]:
    """Content and the stat of the very file that was read."""
    try:
        with path.open("rb") as f:
            return f.read(), os.fstat(f.fileno())
    except FileNotFoundError:
        raise AclFileError(f"{path}: ACL file does not exist") from None
    except OSError as exc:
        raise AclFileError(f"{path}: cannot read ACL file: {exc.strerror or exc}") from None


class AclFileStore:
    """One ACL file: `load()` to read it, `modify()` for locked read-modify-write.
    `cidr_hosts` (KIP-1276, opt-in): a host with `/` must be a network, or the file is bad."""

    def __init__(self, path: str | os.PathLike[str], cidr_hosts: bool = False) -> None:
        self.path = Path(path)
        self.cidr_hosts = cidr_hosts

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> list[AclBinding]:
        """The file's ACLs; a missing, unreadable or invalid file raises AclFileError."""
        data, _ = _read(self.path)
        return parse_acl_file(data, str(self.path), self.cidr_hosts)

    def modify(
        self,
        fn: Callable[[list[AclBinding]], list[AclBinding]],
        *,
        create: bool = False,
    ) -> list[AclBinding]:
        """Apply `fn` to the current ACLs under the lock and write the result if it differs.

        `create=True` treats a missing file as empty (and creates it); otherwise a missing file
        is an AclFileError. Returns the ACLs now in the file.
        """
        path = self.path
        with exclusive_lock(path, 0o644):
            try:
                data, st = _read(path)
            except AclFileError:
                if not create or path.exists():
                    raise
                current: list[AclBinding] = []
                mode = 0o644  # ACLs are policy, not secrets; the proxy may run as another user
                existed = False
            else:
                current = parse_acl_file(data, str(path), self.cidr_hosts)
                mode = st.st_mode & 0o7777
                existed = True
            updated = list(dict.fromkeys(fn(list(current))))
            if not existed or set(updated) != set(current):
                write_atomically(path, dump_acl_file(updated).encode("utf-8"), mode)
            return updated


class AclFileWatcher:
    """Keeps an Authorizer in step with an ACL file; see the module docstring."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        authorizer: Authorizer,
        interval: float = 1.0,
        logger: logging.Logger = log,
    ) -> None:
        self.path = Path(path)
        self.authorizer = authorizer
        self.interval = interval
        self.log = logger
        self.last_error: str | None = None
        self.last_loaded_at: float | None = None  # time.time() of the last successful load
        self.reloads = 0
        self.failures = 0
        self._signature: tuple[int, ...] | None = None
        self._digest: bytes | None = None
        self._racy = True
        self._task: asyncio.Task[None] | None = None
        #: one reload at a time: the poller's worker thread and a writer's reload after its
        #: change (proxy/aclstore/filebackend.py) must not publish an older read after a newer one
        self._reload_lock = threading.Lock()

    def reload_once(self, *, strict: bool = False) -> bool:
        """Check the file once; True when a new policy was loaded.

        On a bad file the previous policy stays in force; with `strict=True` (start-up) the
        AclFileError is raised instead of being logged.
        """
        try:
            with self._reload_lock:
                return self._reload()
        except AclFileError as exc:
            if strict:
                raise
            self._failed(str(exc))
            return False
        except Exception as exc:  # a bug of ours on some input: still only a file not loaded
            message = f"{self.path}: cannot load ACL file: {type(exc).__name__}: {exc}"
            if strict:
                raise AclFileError(message) from exc
            self._failed(message, exc)  # flagged, and the traceback logged once, not per poll
            return False

    def _reload(self) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._signature = None
            raise AclFileError(f"{self.path}: ACL file does not exist") from None
        except OSError as exc:
            raise AclFileError(f"{self.path}: cannot read ACL file: {exc.strerror}") from None
        if self._signature == stat_signature(st) and not self._racy:
            return False
        data, st = _read(self.path)
        self._signature = stat_signature(st)
        self._racy = time.time() - st.st_mtime < RACY_SECONDS
        digest = hashlib.sha256(data).digest()
        if digest == self._digest:
            self._recovered()
            return False
        # KIP-1276, opt-in: with the authorizer's CIDR hosts, a host with `/` that is not a
        # network makes the file bad (the previous policy stays), as CreateAcls refuses it
        bindings = parse_acl_file(data, str(self.path), self.authorizer.cidr_hosts)
        self.authorizer.load(bindings)
        self._digest = digest
        self.last_loaded_at = time.time()
        self.reloads += 1
        self._recovered()
        self.log.info(
            "loaded %d ACLs from %s (policy version %d)",
            len(bindings),
            self.path,
            self.authorizer.version,
        )
        warn_literal_cidr_hosts(self.log, bindings, self.authorizer.cidr_hosts, str(self.path))
        return True

    def _failed(self, message: str, exc: BaseException | None = None) -> None:
        if message == self.last_error:
            return  # reported already; say it once, not once per poll
        self.failures += 1  # before last_error: a reader that sees the error sees the count
        self.last_error = message
        kept = "keeping the previous ACLs" if self.authorizer.ready else "no ACLs are loaded"
        self.log.error("ACL file not loaded, %s: %s", kept, message, exc_info=exc)

    def _recovered(self) -> None:
        if self.last_error is not None:
            self.log.info("ACL file %s is valid again", self.path)
            self.last_error = None

    async def run(self) -> None:
        """Poll forever (cancel to stop). File reads and index builds run in a worker thread
        so a large policy never stalls the event loop."""
        while True:
            try:
                await asyncio.to_thread(self.reload_once)
            except Exception:  # a bug must not silently end hot reload for the process's life
                self.log.exception("ACL file watcher: unexpected error; will retry")
            await asyncio.sleep(self.interval)

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="acl-watcher")
        return self._task

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
