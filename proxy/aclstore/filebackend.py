"""The `file` ACL store backend: the ACL file, as an AclBackend (proxy/aclstore/backend.py).

Reads are the watcher's (proxy/aclstore/filewatch.py AclFileWatcher: polled, a bad file keeps the
policy in force). A change from the Admin API is a locked read-modify-write of the file
(AclFileStore.modify: durable once it returns), followed at once by a reload into the
authorizer, so the client that asked sees its change on its very next request
(read-your-writes) instead of after the next poll. Changes run in a worker thread, one at a
time: the file lock serialises writers of every process, the asyncio lock this instance's.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.fingerprint import acl_fingerprint
from aclgate.authz.model import AclBinding
from aclgate.proxy.aclstore.backend import AclStoreError, AclStoreStatus
from aclgate.proxy.aclstore.filewatch import AclFileError, AclFileStore, AclFileWatcher


class FileAclBackend:
    """ACLs in one JSON file; see the module docstring."""

    name = "file"

    def __init__(
        self,
        path: str | os.PathLike[str],
        authorizer: Authorizer,
        *,
        missing_ok: bool = False,
        interval: float = 1.0,
    ) -> None:
        self.authorizer = authorizer
        self.missing_ok = missing_ok
        self.store = AclFileStore(path, authorizer.cidr_hosts)
        self.watcher = AclFileWatcher(path, authorizer, interval)
        self._change_lock = asyncio.Lock()
        self._fingerprint: tuple[int, str] | None = None  # (policy version, fingerprint)

    @property
    def path(self):
        return self.store.path

    def load(self) -> None:
        """The first load, before any client is served; raises AclFileError on a bad file (a
        missing one is an empty policy with `missing_ok`, loaded when it appears)."""
        if self.store.exists() or not self.missing_ok:
            self.watcher.reload_once(strict=True)
        else:
            self.authorizer.load(())

    async def start(self) -> None:
        try:
            self.load()
        except AclFileError as exc:
            raise AclStoreError(str(exc)) from exc
        self.watcher.start()

    async def change(self, additions: Sequence[AclBinding], removals: Sequence[AclBinding]) -> None:
        async with self._change_lock:
            await asyncio.to_thread(self._change, tuple(additions), frozenset(removals))

    def _change(self, additions: tuple[AclBinding, ...], removals: frozenset[AclBinding]) -> None:
        def apply(current: list[AclBinding]) -> list[AclBinding]:
            return [b for b in current if b not in removals] + list(additions)

        try:
            self.store.modify(apply, create=self.missing_ok)
            # strict: a file we have just written that does not load is a failed change
            self.watcher.reload_once(strict=True)
        except AclFileError as exc:
            raise AclStoreError(str(exc)) from exc
        except OSError as exc:
            raise AclStoreError(f"{self.store.path}: cannot write the ACL file: {exc}") from exc

    def fingerprint(self) -> str:
        """The fingerprint of the policy in force, computed once per policy version."""
        version = self.authorizer.version
        cached = self._fingerprint
        if cached is None or cached[0] != version:
            cached = self._fingerprint = (version, acl_fingerprint(self.authorizer.acls()))
        return cached[1]

    def status(self) -> AclStoreStatus:
        error = self.watcher.last_error
        loaded_at = self.watcher.last_loaded_at
        if loaded_at is None and self.missing_ok and not self.store.exists():
            # the empty policy --acl-file-missing-ok asked for, until the file first appears:
            # not degraded, so /readyz lets the first ACLs be made through the proxy
            error = None
        stale = None
        if error is not None:
            stale = time.time() - loaded_at if loaded_at is not None else None
        return AclStoreStatus(
            backend=self.name,
            loaded=self.authorizer.ready,
            applied_offset=None,
            fingerprint=self.fingerprint(),
            error=error,
            seconds_stale=stale,
        )

    async def stop(self) -> None:
        await self.watcher.stop()
