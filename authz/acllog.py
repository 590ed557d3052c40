"""The ACL set a reader of the ACL topic has built so far (no IO: the store feeds it records).

Several UUIDs may hold the same binding (two instances created it at the same time, each with
its own UUID): a binding is in force while at least one UUID holds it, so removing it means
tombstoning every UUID that holds it (docs/authz.md, "A fleet on the kafka store").

Records are applied strictly in offset order, a change whole: the records of a change that has
not been read completely yet (its `aclgate.count`) are held back with everything after them,
until the rest arrives, or until the reader reaches the end of the log (then nothing of it can
still come: the missing records were superseded and compacted away). The initial replay needs
no holding back (nobody sees the state before its end): `replay` applies at once.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable

from aclgate.authz.aclrecords import AclRecord
from aclgate.authz.fingerprint import canonical_line, fingerprint_of_lines
from aclgate.authz.model import (
    AclBinding,
)


class AclLogState:
    """UUID -> binding, the bindings in force, and the records not applied yet.

    Fed and drained by the store's reader thread; `holders` is read by writers on other
    threads, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ids: dict[str, AclBinding] = {}
        #: binding in force -> the first UUID holding it; further holders (rare) in _more
        self._holder: dict[AclBinding, str] = {}
        self._more: dict[AclBinding, set[str]] = {}
        #: binding -> canonical line, built at the first fingerprint, then kept up to date
        self._lines: dict[AclBinding, str] | None = None
        self._pending: list[tuple[int, AclRecord]] = []
        self._seen: Counter[str] = Counter()  # change id -> records of it pending
        #: every record before this offset is applied
        self.applied_offset = 0
        self._fingerprint: str | None = None

    # -------------------------------------------------------------- reading the log

    def replay(self, offset: int, record: AclRecord) -> None:
        """Apply at once (the initial replay, which nobody sees before its end)."""
        self._apply(record, None)
        self.applied_offset = offset + 1
        self._fingerprint = None

    def feed(self, offset: int, record: AclRecord) -> None:
        self._pending.append((offset, record))
        self._seen[record.change_id] += 1

    def drain(self, end: int | None = None) -> tuple[list[AclBinding], list[AclBinding]]:
        """Apply the pending records that form whole changes (all of them when `end`, the
        offset the reader has reached at the end of the log, is given). Returns the batch's
        net effect on the bindings in force: (added, removed)."""
        pending = self._pending
        if end is not None:
            cut = len(pending)
        else:
            cut = 0
            for _, record in pending:
                if self._seen[record.change_id] < record.count:
                    break
                cut += 1
        take, self._pending = pending[:cut], pending[cut:]
        before: dict[AclBinding, bool] = {}
        with self._lock:
            for _, record in take:
                self._apply(record, before)
        for _, record in take:
            self._seen[record.change_id] -= 1
            if not self._seen[record.change_id]:
                del self._seen[record.change_id]
        if self._pending:
            self.applied_offset = self._pending[0][0]
        elif end is not None:
            self.applied_offset = max(self.applied_offset, end)
        elif take:
            self.applied_offset = take[-1][0] + 1
        added = [b for b, was in before.items() if not was and b in self._holder]
        removed = [b for b, was in before.items() if was and b not in self._holder]
        if added or removed:
            self._fingerprint = None
        return added, removed

    def reached(self, offset: int) -> None:
        """The reader has read every record before `offset` (and stops there): with nothing
        held back, everything before it is applied."""
        if not self._pending:
            self.applied_offset = max(self.applied_offset, offset)

    def _apply(self, record: AclRecord, before: dict[AclBinding, bool] | None) -> None:
        key = record.acl_id
        old = self.ids.pop(key, None)
        if old is not None:
            if before is not None:
                before.setdefault(old, True)
            self._release(old, key)
        new = record.binding
        if new is not None:
            if before is not None:
                before.setdefault(new, new in self._holder)
            self.ids[key] = new
            self._hold(new, key)

    def _hold(self, b: AclBinding, key: str) -> None:
        if self._holder.setdefault(b, key) is key:
            if self._lines is not None:
                self._lines[b] = canonical_line(b)
        else:
            self._more.setdefault(b, set()).add(key)

    def _release(self, b: AclBinding, key: str) -> None:
        more = self._more.get(b)
        if self._holder.get(b) == key:
            if more:
                self._holder[b] = more.pop()
            else:
                del self._holder[b]
                if self._lines is not None:
                    del self._lines[b]
        elif more is not None:
            more.discard(key)
        if more is not None and not more:
            del self._more[b]

    # -------------------------------------------------------------- what writers ask

    def holders(self, bindings: Iterable[AclBinding]) -> dict[AclBinding, list[str]]:
        """The UUIDs that hold each binding now (a binding in force has at least one)."""
        with self._lock:
            out: dict[AclBinding, list[str]] = {}
            for b in bindings:
                first = self._holder.get(b)
                out[b] = [] if first is None else sorted({first, *self._more.get(b, ())})
            return out

    def bindings(self) -> list[AclBinding]:
        return list(self._holder)

    def __len__(self) -> int:
        return len(self._holder)

    def fingerprint(self) -> str:
        """proxy/aclstore/backend.py's `acl_fingerprint` of the bindings in force, from lines kept
        per binding (computed once per change of the set)."""
        if self._fingerprint is None:
            if self._lines is None:
                self._lines = {b: canonical_line(b) for b in self._holder}
            self._fingerprint = fingerprint_of_lines(self._lines.values())
        return self._fingerprint
