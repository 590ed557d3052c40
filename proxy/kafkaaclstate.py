"""The ACL set a reader of the ACL topic has built so far (no IO: the store feeds it records).

Several UUIDs may hold the same binding (two instances created it at the same time, each with
its own UUID): a binding is in force while at least one UUID holds it, so removing it means
tombstoning every UUID that holds it (docs/authz.md, "Duplicates").

Records are applied strictly in offset order, a change whole: the records of a change that has
not been read completely yet (its `aclgate.count`) are held back with everything after them,
until the rest arrives, or until the reader reaches the end of the log (then nothing of it can
still come: the missing records were superseded and compacted away).
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections import Counter
from collections.abc import Iterable

from aclgate.authz.model import AclBinding
from aclgate.proxy.kafkaaclrecords import AclRecord


def canonical_line(b: AclBinding) -> str:
    """One binding as proxy/aclbackend.py's `acl_fingerprint` writes it."""
    return json.dumps(b.to_dict(), sort_keys=True, separators=(",", ":"))


class AclLogState:
    """UUID -> binding, the bindings in force, and the records not applied yet.

    Fed and drained by the store's reader thread; `holders` is read by writers on other
    threads, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ids: dict[uuid.UUID, AclBinding] = {}
        self.holders_of: dict[AclBinding, set[uuid.UUID]] = {}
        self._lines: dict[AclBinding, str] = {}
        self._pending: list[tuple[int, AclRecord]] = []
        self._seen: Counter[str] = Counter()  # change id -> records of it pending
        #: every record before this offset is applied
        self.applied_offset = 0
        self._fingerprint: str | None = None

    # -------------------------------------------------------------- reading the log

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
        added = [b for b, was in before.items() if not was and b in self.holders_of]
        removed = [b for b, was in before.items() if was and b not in self.holders_of]
        if added or removed:
            self._fingerprint = None
        return added, removed

    def reached(self, offset: int) -> None:
        """The reader has read every record before `offset` (and stops there): with nothing
        held back, everything before it is applied."""
        if not self._pending:
            self.applied_offset = max(self.applied_offset, offset)

    def _apply(self, record: AclRecord, before: dict[AclBinding, bool]) -> None:
        old = self.ids.pop(record.acl_id, None)
        if old is not None:
            before.setdefault(old, True)
            holders = self.holders_of[old]
            holders.discard(record.acl_id)
            if not holders:
                del self.holders_of[old]
                del self._lines[old]
        new = record.binding
        if new is not None:
            before.setdefault(new, new in self.holders_of)
            self.ids[record.acl_id] = new
            held = self.holders_of.get(new)
            if held is None:
                self.holders_of[new] = {record.acl_id}
                self._lines[new] = canonical_line(new)
            else:
                held.add(record.acl_id)

    # -------------------------------------------------------------- what writers ask

    def holders(self, bindings: Iterable[AclBinding]) -> dict[AclBinding, list[uuid.UUID]]:
        """The UUIDs that hold each binding now (a binding in force has at least one)."""
        with self._lock:
            return {b: sorted(self.holders_of.get(b, ())) for b in bindings}

    def bindings(self) -> list[AclBinding]:
        return list(self.holders_of)

    def fingerprint(self) -> str:
        """proxy/aclbackend.py's `acl_fingerprint` of the bindings in force, from lines kept
        per binding (computed once per change of the set)."""
        if self._fingerprint is None:
            text = "\n".join(sorted(self._lines.values()))
            self._fingerprint = hashlib.sha256(text.encode("utf-8")).hexdigest()
        return self._fingerprint
