"""Closing the proxy's own librdkafka producers (audit topic, ACL store) at once.

A dropped confluent-kafka client lives until its last reference goes, and references hide
in delivery callbacks and exception tracebacks; while it lives its threads keep connecting
to its bootstrap servers. The proxy closes each producer it retires instead.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

log = logging.getLogger("aclgate")

# close() tries to abort a transaction still open, and warns when that cannot be done (a
# commit in progress, a fenced producer). The producers closed here are retired after exactly
# such a failure, which the ACL store has already reported; the coordinator aborts the
# transaction when it times out.
warnings.filterwarnings(
    "ignore", message="Producer abort_transaction failed during close", category=RuntimeWarning
)


def close_producer(producer: Any, wait: float) -> None:
    """Give a producer's messages `wait` seconds, then purge it (every message left is
    reported failed to its callback) and close it: its connections and threads go now.
    A producer in a fatal state raises on these calls: each step is tried."""
    for step in (
        lambda: producer.flush(wait) if wait else None,
        producer.purge,
        lambda: producer.flush(0),
        producer.close,
    ):
        try:
            step()
        except Exception as exc:  # a producer in any state is closed as far as it can be
            log.debug("closing a producer: %r", exc)
