"""The audit log: one JSON object per decision line (docs/audit.md, schema 1), and one
`acl_change` event per change of the ACL store made through the ACL Admin API.

Denied decisions are written one line each as they happen; allowed decisions are aggregated
per window (same principal, host, client id, API, operation, resource and rule) into one line
with a `count`. Past `denied_per_second` denied lines, further denials of the second are
aggregated the same way (counted in aclgate_audit_denied_aggregated_total) but written at the
next tick, within a second: a storm costs little, and every denial is in the trail, as a line
of its own or in the `count` of an aggregated line.

Client-chosen strings (principal, client id, resource name) are cut to protocol/bounds.py's
lengths in every decision line and key, when a line is written or a key is new to its
aggregation: counting a known key costs what it did before. Both aggregations are bounded,
whatever the clients send: at most `max_keys` keys and `max_key_bytes` bytes of those strings
(and the host). A decision that would pass a bound first has the aggregation written out
early (counted in aclgate_audit_aggregation_overflow_total), so nothing leaves the trail; a
written aggregation is dropped whole, its memory returned.

Each line is built once and handed to every sink (proxy/audit/sink.py): the file
(proxy/audit/file.py, rotated by size) and/or the Kafka topic (proxy/audit/kafka.py). With
`--audit-format cloudevents` or `ocsf` the event is converted once per line, before it is
written (proxy/audit/formats.py); the default, `aclgate`, writes it as it is.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aclgate.authz.model import AclBinding
from aclgate.protocol.bounds import CLIENT_ID, PRINCIPAL, RESOURCE_NAME, bounded, bounded_or_none
from aclgate.protocol.enforce.context import DecisionRecord
from aclgate.protocol.versions import api_name
from aclgate.proxy.audit.file import AuditFile
from aclgate.proxy.audit.formats import formatter
from aclgate.proxy.audit.sink import AuditSink

log = logging.getLogger("aclgate.audit")
SCHEMA_VERSION = 1


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


#: the AuditLog attribute holding each aggregation (key -> [first, last, count]), by `urgent`
_AGGREGATION = {False: "_allowed", True: "_denied"}
#: where a decision key holds the strings clients choose
_PRINCIPAL, _HOST, _CLIENT_ID, _NAME = 1, 2, 3, 9


def _cut(key: tuple) -> tuple:
    """`key` with its principal, client id and resource name cut to protocol/bounds.py's
    lengths; `key` itself when nothing had to be cut."""
    principal = bounded(key[_PRINCIPAL], PRINCIPAL)
    client_id = bounded_or_none(key[_CLIENT_ID], CLIENT_ID)
    name = bounded(key[_NAME], RESOURCE_NAME)
    if principal is key[_PRINCIPAL] and client_id is key[_CLIENT_ID] and name is key[_NAME]:
        return key
    return (key[0], principal, key[_HOST], client_id, *key[4:_NAME], name, *key[_NAME + 1 :])


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
        max_keys: int = 2_000,
        max_key_bytes: int = 2 * 1024 * 1024,
        format: str = "aclgate",
    ):
        """`path`: the audit file (None: no file); `sinks`: more sinks (the Kafka topic);
        `max_keys`, `max_key_bytes`: the bound of each aggregation (module docstring);
        `format`: the lines' format, for every sink (proxy/audit/formats.py)."""
        self.file = AuditFile(path, max_bytes, keep, compress) if path is not None else None
        self.sinks: list[AuditSink] = ([self.file] if self.file is not None else []) + list(sinks)
        self.proxy_name = proxy_name
        #: the event -> what is written (None: the event itself, the `aclgate` format)
        self._convert = formatter(format, proxy_name)
        self.window = window
        self.denied_per_second = denied_per_second
        self.clock = clock
        self.max_keys = max_keys
        self.max_key_bytes = max_key_bytes
        #: the allowed decisions of the window (plain dicts: counting a known key costs what it
        #: did before the bound)
        self._allowed: dict[tuple, list] = {}
        #: denials past the per-second limit: written at the next tick, not the window's end
        self._denied: dict[tuple, list] = {}
        #: by `urgent`: bytes of the client-chosen strings the aggregation's keys hold
        self._key_bytes = {False: 0, True: 0}
        self._window_start = clock()
        self._second = int(clock())
        self._denied_this_second = 0
        self.lines_written = 0
        self.denied_aggregated = 0
        #: aggregations written early at their bound (aclgate_audit_aggregation_overflow_total)
        self.aggregation_overflows = 0

    @property
    def path(self) -> Path:
        """The live audit file (only with a file sink)."""
        if self.file is None:
            raise AttributeError("this audit log writes no file")
        return self.file.path

    # --------------------------------------------------------------------- recording

    def record(self, record: DecisionRecord) -> None:
        now = self.clock()
        decision = record.outcome
        key = (record.listener, record.principal, record.host, record.client_id,
               api_name(record.api_key), record.api_key, record.api_version, record.operation.name,
               record.resource_type.name, record.resource_name, decision, record.enforced,
               record.groups)  # fmt: skip
        if decision.allowed:
            aggregates = self._allowed
        else:
            key = _cut(key)
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
            aggregates = self._denied
        entry = aggregates.get(key)
        if entry is None:
            self._add(not decision.allowed, key, now)
        else:
            entry[1] = now
            entry[2] += 1

    def _add(self, urgent: bool, key: tuple, now: float) -> None:
        """A key new to its aggregation: cut (it may then be one the aggregation holds), and
        added, the aggregation written out first if the key would take it past its bound."""
        key = _cut(key)
        aggregates: dict[tuple, list] = getattr(self, _AGGREGATION[urgent])
        entry = aggregates.get(key)
        if entry is not None:
            entry[1] = now
            entry[2] += 1
            return
        size = sum(sys.getsizeof(key[i]) for i in (_PRINCIPAL, _HOST, _CLIENT_ID, _NAME))
        if len(aggregates) >= self.max_keys or self._key_bytes[urgent] + size > self.max_key_bytes:
            self.aggregation_overflows += 1
            aggregates = self._flush(urgent)
        aggregates[key] = [now, now, 1]
        self._key_bytes[urgent] += size

    def held(self) -> tuple[int, int]:
        """(keys, bytes of their client-chosen strings) the aggregations hold now."""
        return len(self._allowed) + len(self._denied), sum(self._key_bytes.values())

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
        if self._denied:
            self._flush(urgent=True)
        if now - self._window_start >= self.window:
            self.flush_aggregates()
            self._window_start = now
        for sink in self.sinks:
            sink.tick()

    def flush_aggregates(self) -> None:
        self._flush(urgent=True)
        self._flush(urgent=False)

    def _flush(self, urgent: bool) -> dict[tuple, list]:
        """Write one aggregation and return the new one in its place (a new dict: the written
        one's memory goes back whole, not kept at its high-water size)."""
        aggregates: dict[tuple, list] = getattr(self, _AGGREGATION[urgent])
        fresh: dict[tuple, list] = {}
        setattr(self, _AGGREGATION[urgent], fresh)
        self._key_bytes[urgent] = 0
        last_key = next(reversed(aggregates), None)
        for key, (first, last, count) in aggregates.items():
            # urgent lines reach the OS together, once, after the last of them
            event = self._event(key, last, first if count > 1 else None, count)
            self._write(event, urgent and key is last_key)
        return fresh

    def _event(self, key: tuple, ts: float, ts_first: float | None, count: int) -> dict[str, Any]:
        (listener, principal, host, client_id, api, api_key, api_version, operation, resource_type,
         resource_name, decision, enforced, groups) = key  # fmt: skip
        return {
            "schema_version": SCHEMA_VERSION,
            "ts": iso(ts),
            "ts_first": iso(ts_first) if ts_first is not None else None,
            "count": count,
            "proxy": self.proxy_name,
            "listener": listener,
            "principal": principal,
            "groups": sorted(groups),
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
        key = event["principal"]
        if self._convert is not None:
            event = self._convert(event)
        line = json.dumps(event, separators=(",", ":")) + "\n"
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
