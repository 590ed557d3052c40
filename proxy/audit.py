"""The audit log: one JSON object per decision line (docs/audit.md, schema 1), and one
`acl_change` event per change of the ACL store made through the ACL Admin API.

Denied decisions are written one line each as they happen; allowed decisions are aggregated
per window (same principal, host, client id, API, operation, resource and rule) into one line
with a `count`. Past `denied_per_second` denied lines, further denials of the second are
aggregated the same way (counted in aclgate_audit_denied_aggregated_total), so a storm costs
little and nothing is lost. Denial lines reach the OS as they are written; the rest is flushed
every second (`tick`), and the aggregates of the current window when it ends or on close.

Files rotate by size: the live file is PATH; a full one is renamed to
PATH-<UTC timestamp>-<sequence>.jsonl and gzipped in the background to .jsonl.gz; at most
`keep` rotated files are kept (0, the default, keeps all). Readers (the Spark pipeline) accept plain and .gz files.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aclgate.authz.decision import Decision
from aclgate.authz.model import AclBinding

log = logging.getLogger("aclgate.audit")
SCHEMA_VERSION = 1


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class AuditLog:
    def __init__(
        self,
        path: Path,
        proxy_name: str,
        max_bytes: int = 100 * 1024 * 1024,
        keep: int = 0,
        window: float = 10.0,
        denied_per_second: int = 1000,
        compress: bool = True,
        clock=time.time,
    ):
        self.path = Path(path)
        self.proxy_name = proxy_name
        self.max_bytes = max_bytes
        self.keep = keep
        self.window = window
        self.denied_per_second = denied_per_second
        self.compress = compress
        self.clock = clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        self._size = self._file.tell()
        self._sequence = 0
        self._aggregates: dict[tuple, list] = {}
        self._window_start = clock()
        self._second = int(clock())
        self._denied_this_second = 0
        self.lines_written = 0
        self.denied_aggregated = 0
        self._compressors: list[threading.Thread] = []

    # --------------------------------------------------------------------- recording

    def record(
        self,
        listener: str,
        principal: str,
        host: str,
        client_id: str | None,
        api: str,
        api_key: int,
        api_version: int,
        operation: str,
        resource_type: str,
        resource_name: str,
        decision: Decision,
        enforced: bool,
    ) -> None:
        now = self.clock()
        key = (listener, principal, host, client_id, api, api_key, api_version, operation,
               resource_type, resource_name, decision, enforced)  # fmt: skip
        if not decision.allowed:
            second = int(now)
            if second != self._second:
                self._second, self._denied_this_second = second, 0
            self._denied_this_second += 1
            if self._denied_this_second <= self.denied_per_second:
                self._write(self._event(key, now, None, 1))
                # in the OS at once: a crash of the proxy (kill -9, OOM) loses no denial line;
                # the rate limit bounds these writes
                self._file.flush()
                return
            self.denied_aggregated += 1
        entry = self._aggregates.get(key)
        if entry is None:
            self._aggregates[key] = [now, now, 1]
        else:
            entry[1] = now
            entry[2] += 1

    def record_acl_change(
        self,
        listener: str,
        principal: str,
        host: str,
        client_id: str | None,
        api: str,
        api_key: int,
        store: str,
        added: Sequence[AclBinding],
        removed: Sequence[AclBinding],
        error: str | None,
    ) -> None:
        """One `acl_change` event (docs/audit.md): a change the ACL Admin API asked for,
        committed (error null) or not. Written and handed to the OS at once, never aggregated."""
        self._write(
            {
                "schema_version": SCHEMA_VERSION,
                "event": "acl_change",
                "ts": iso(self.clock()),
                "proxy": self.proxy_name,
                "listener": listener,
                "principal": principal,
                "host": host,
                "client_id": client_id,
                "api": api,
                "api_key": api_key,
                "store": store,
                "result": "COMMITTED" if error is None else "FAILED",
                "error": error,
                "added": [b.to_dict() for b in added],
                "removed": [b.to_dict() for b in removed],
            }
        )
        self._file.flush()

    def tick(self) -> None:
        """Write the aggregated lines of a finished window (called periodically)."""
        now = self.clock()
        if now - self._window_start >= self.window:
            self.flush_aggregates()
            self._window_start = now
        self._file.flush()

    def flush_aggregates(self) -> None:
        aggregates, self._aggregates = self._aggregates, {}
        for key, (first, last, count) in aggregates.items():
            self._write(self._event(key, last, first if count > 1 else None, count))

    def _event(self, key: tuple, ts: float, ts_first: float | None, count: int) -> dict[str, Any]:
        (listener, principal, host, client_id, api, api_key, api_version, operation, resource_type,
         resource_name, decision, enforced) = key  # fmt: skip
        return {
            "schema_version": SCHEMA_VERSION,
            "ts": iso(ts),
            "ts_first": iso(ts_first) if ts_first is not None else None,
            "count": count,
            "proxy": self.proxy_name,
            "listener": listener,
            "principal": principal,
            "host": host,
            "client_id": client_id,
            "api": api,
            "api_key": api_key,
            "api_version": api_version,
            "operation": operation,
            "resource_type": resource_type,
            "resource_name": resource_name,
            "decision": decision.verdict,
            "enforced": enforced,
            "rule": decision.rule,
            "acl": decision.acl.to_dict() if decision.acl is not None else None,
        }

    # ----------------------------------------------------------------------- writing

    def _write(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, separators=(",", ":")) + "\n"
        self._file.write(line)
        self._size += len(line)
        self.lines_written += 1
        if self._size >= self.max_bytes:
            self.rotate()

    def rotate(self) -> Path:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._sequence += 1
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        rotated = self.path.with_name(f"{self.path.stem}-{stamp}-{self._sequence:06d}.jsonl")
        os.replace(self.path, rotated)
        self._file = open(self.path, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        self._size = 0
        if self.compress:
            worker = threading.Thread(target=self._gzip, args=(rotated,), daemon=True)
            worker.start()
            self._compressors = [t for t in self._compressors if t.is_alive()] + [worker]
        else:
            self._prune()
        return rotated

    def _gzip(self, path: Path) -> None:
        target = path.with_suffix(".jsonl.gz")
        tmp = target.with_name(target.name + ".tmp")
        try:
            with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(tmp, target)
            path.unlink()
        except OSError as exc:
            log.error("could not compress rotated audit file %s: %s (kept uncompressed)", path, exc)
        self._prune()

    def _prune(self) -> None:
        if self.keep <= 0:  # keep everything (the default): the analytics jobs read these
            return
        rotated = sorted(self.path.parent.glob(f"{self.path.stem}-*.jsonl*"))
        rotated = [p for p in rotated if not p.name.endswith(".tmp")]
        for old in rotated[: max(0, len(rotated) - self.keep)]:
            try:
                old.unlink()
            except OSError:
                pass

    def close(self) -> None:
        self.flush_aggregates()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        for worker in self._compressors:
            worker.join(30)
