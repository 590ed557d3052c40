"""The kafka ACL store closes the producers it retires, whoever else still holds them.

Dropping the last reference was the old way; but references hide in exception tracebacks and
delivery callbacks, and a producer left alive keeps reconnecting to its bootstrap servers
(in a test run: to whatever later listens on a stopped cluster's port). Real librdkafka
producers, pointed at a port nothing listens on.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from aclgate.authz.authorizer import Authorizer
from aclgate.proxy.aclstore.kafka.store import KafkaAclBackend, KafkaStoreSettings
from aclgate.proxy.demo.embedded_broker import free_port
from tests.fixtures.rdkafka import rdkafka_clients
from tests.fixtures.wait import wait_until


def backend_with_a_producer() -> tuple[KafkaAclBackend, Producer, set[int]]:
    bootstrap = f"127.0.0.1:{free_port()}"
    before = rdkafka_clients()
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    wait_until(lambda: rdkafka_clients() - before, what="the producer's thread")
    backend = KafkaAclBackend(KafkaStoreSettings(bootstrap, "acls"), Authorizer())
    backend._producer = producer
    return backend, producer, before


def assert_closed(producer: Producer, before: set[int]) -> None:
    with pytest.raises(RuntimeError, match="closed"):
        producer.produce("t", b"x")
    wait_until(lambda: not rdkafka_clients() - before, timeout=10, what="its thread to end")


def test_a_producer_replaced_after_a_failed_change_is_closed():
    backend, producer, before = backend_with_a_producer()
    fatal = KafkaException(KafkaError(KafkaError._FATAL, "fenced", fatal=True))
    error = backend._failed(fatal)
    assert "may not have been committed" in str(error)
    assert backend._producer is None
    assert_closed(producer, before)  # although this test still holds it


@pytest.mark.asyncio
async def test_stop_closes_the_writer():
    backend, producer, before = backend_with_a_producer()
    await backend.stop()
    assert backend._producer is None
    assert_closed(producer, before)
