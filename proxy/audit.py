"""The audit log: one JSON object per decision line (docs/audit.md, schema 1), and one
`acl_change` event per change of the ACL store made through the ACL Admin API.

Denied decisions are written one line each as they happen; allowed decisions are aggregated
per window (same principal, host, client id, API, operation, resource and rule) into one line
with a `count`. Past `denied_per_second` denied lines, further denials of the second are
aggregated the same way (counted in aclgate_audit_denied_aggregated_total) but written at the
next tick, within a second: a storm costs little, and every denial is in the trail, as a line
of its own or in the `count` of an aggregated line.

Each line is built once and handed to every sink (proxy/auditsink.py): the file
(proxy/auditfile.py, rotated by size) and/or the Kafka topic (proxy/auditkafka.py).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aclgate.authz.decision import Decision
from aclgate.authz.model import AclBinding
from aclgate.proxy.auditfile import AuditFile
from aclgate.proxy.auditsink import AuditSink

log = logging.getLogger("aclgate.audit")
SCHEMA_VERSION = 1


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class AuditLog:
    def __init__(
        self,
        path: Path | None,
        proxy_name: str,
        max_bytes: int = 100 * 1024 * 1024,
        keep: int = 0,
        window: float = 10.0,
        denied_per_second: int = 1000,
        compress: bool = True,
        clock=time.time,
        sinks: Sequence[AuditSink] = (),
    ):
        """`path`: the audit file (None: no file); `sinks`: more sinks (the Kafka topic)."""
        self.file = AuditFile(path, max_bytes, keep, compress) if path is not None else None
        self.sinks: list[AuditSink] = ([self.file] if self.file is not None else []) + list(sinks)
        self.proxy_name = proxy_name
        self.window = window
        self.denied_per_second = denied_per_second
        self.clock = clock
        self._aggregates: dict[tuple, list] = {}
        #: denials past the per-second limit: written at the next tick, not the window's end
        self._denied_aggregates: dict[tuple, list] = {}
        self._window_start = clock()
        self._second = int(clock())
        self._denied_this_second = 0
        self.lines_written = 0
        self.denied_aggregated = 0

    @property
    def path(self) -> Path:
        """The live audit file (only with a file sink)."""
        if self.file is None:
            raise AttributeError("this audit log writes no file")
        return self.file.path

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
                # urgent: in the OS (and queued for the topic) at once, so a crash of the
                # proxy (kill -9, OOM) loses no denial line; the rate limit bounds these writes
                self._write(self._event(key, now, None, 1), urgent=True)
                return
            self.denied_aggregated += 1
            aggregates = self._denied_aggregates
        else:
            aggregates = self._aggregates
        entry = aggregates.get(key)
        if entry is None:
            aggregates[key] = [now, now, 1]
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
            },
            urgent=True,
        )

    def tick(self) -> None:
        """Write the aggregated denials, and the aggregated lines of a finished window
        (called about once a second)."""
        now = self.clock()
        if self._denied_aggregates:
            denied, self._denied_aggregates = self._denied_aggregates, {}
            self._write_aggregates(denied, urgent=True)
        if now - self._window_start >= self.window:
            self.flush_aggregates()
            self._window_start = now
        for sink in self.sinks:
            sink.tick()

    def flush_aggregates(self) -> None:
        denied, self._denied_aggregates = self._denied_aggregates, {}
        self._write_aggregates(denied, urgent=True)
        aggregates, self._aggregates = self._aggregates, {}
        self._write_aggregates(aggregates, urgent=False)

    def _write_aggregates(self, aggregates: dict[tuple, list], urgent: bool) -> None:
        for key, (first, last, count) in aggregates.items():
            self._write(self._event(key, last, first if count > 1 else None, count), urgent)

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

    def _write(self, event: dict[str, Any], urgent: bool = False) -> None:
        line = json.dumps(event, separators=(",", ":")) + "\n"
        key = event["principal"]
        for sink in self.sinks:
            sink.write(line, key, urgent)
        self.lines_written += 1

    def rotate(self) -> Path:
        """Rotate the audit file now (only with a file sink)."""
        if self.file is None:
            raise AttributeError("this audit log writes no file")
        return self.file.rotate()

    def close(self) -> None:
        self.flush_aggregates()
        for sink in self.sinks:
            sink.close()
