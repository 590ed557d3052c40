"""Closing the proxy's own librdkafka producers (audit topic, ACL store) at once.

A dropped confluent-kafka client lives until its last reference goes, and references hide
in delivery callbacks and exception tracebacks; while it lives its threads keep connecting
to its bootstrap servers. The proxy closes each producer it retires instead.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("aclgate")


def close_producer(producer: Any, wait: float) -> None:
    """Give a producer's messages `wait` seconds, then purge it (every message left is
    reported failed to its callback) and close it: its connections and threads go now.
    A producer in a fatal state raises on these calls: each step is tried."""
    from confluent_kafka import KafkaException

    for step in (
        lambda: producer.flush(wait) if wait else None,
        producer.purge,
        lambda: producer.flush(0),
        producer.close,
    ):
        try:
            step()
        except (KafkaException, RuntimeError) as exc:  # RuntimeError: already closed
            log.debug("closing a producer: %s", exc)
