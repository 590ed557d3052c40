"""`python -m tests.aclstore.midchange SERVE-ARGS...`: an `aclgate serve` instance's ACL writer
stopped in the middle of a change, to be killed there (tests/aclstore/test_kafka_store_restart.py).

The store is built from the serve arguments exactly as `aclgate serve` builds it
(proxy/aclstore/kafka/client.py `store_settings`: same transactional id), replays the topic, and writes
one change (a DENY of WRITE on the topic named by $MIDCHANGE_TOPIC) with the real writer code,
up to its commit: the records are in the log, the transaction open. It then prints `open` and
waits to be killed. Its transaction timeout is raised to 60 s (`TRANSACTION_TIMEOUT_MS`), so
that only fencing, not the timeout, can release the readers within the test's bound.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.proxy.aclstore.kafka import store as kafkaaclstore
from aclgate.proxy.aclstore.kafka.client import store_settings
from aclgate.proxy.config import add_arguments, from_args

#: far beyond the test's bound: only fencing can end this transaction in time
HELD_TRANSACTION_MS = 60_000


class StoppedBeforeCommit(kafkaaclstore.KafkaAclBackend):
    """The real store, whose writer stops where a kill -9 mid-change leaves it."""

    def _commit(self, producer: Any) -> None:
        producer.flush(30)  # the change's records are in the log: the transaction is open
        print("open", flush=True)
        while True:
            time.sleep(3600)


def denied(topic: str) -> AclBinding:
    """The ACL the interrupted change adds (no reader may ever apply it)."""
    return AclBinding(
        ResourceType.TOPIC,
        topic,
        PatternType.LITERAL,
        "User:ANONYMOUS",
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = store_settings(from_args(parser.parse_args(argv)))
    kafkaaclstore.TRANSACTION_TIMEOUT_MS = HELD_TRANSACTION_MS
    backend = StoppedBeforeCommit(settings, Authorizer())
    await backend.start()
    await backend.change([denied(os.environ["MIDCHANGE_TOPIC"])], [])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
