"""Where audit lines go: the contract every audit sink keeps (the file, the Kafka topic).

`AuditLog` (proxy/audit/log.py) builds each line once and hands it to every sink configured, on
the event loop's thread: a sink's `write` must not wait for disk flushes it can defer, or for
the network at all (the Kafka sink only queues the line for its own thread).
"""

from __future__ import annotations

from typing import Protocol


class AuditSink(Protocol):
    def write(self, line: str, key: str, urgent: bool) -> None:
        """One audit line (JSON, ending in a newline); `key` is its principal; `urgent` lines
        (denials, ACL changes) should reach durable hands at once rather than at the next tick."""

    def tick(self) -> None:
        """Called about once a second: push out what is buffered."""

    def close(self) -> None:
        """Deliver or keep what is buffered, then release everything (at shutdown)."""
