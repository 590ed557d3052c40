"""Real clients through aclgate, unchanged: tansu upstream, and Apache Kafka (1 and 3 nodes)."""

from __future__ import annotations

import uuid

import pytest

from tests.scenarios import clients

UPSTREAMS = [
    "tansu",
    pytest.param("kafka_single", marks=pytest.mark.kafka),
    pytest.param("kafka_cluster3", marks=pytest.mark.kafka),
]


@pytest.fixture(params=UPSTREAMS)
def proxied(request, proxy_factory):
    upstream = request.getfixturevalue(request.param)
    return proxy_factory(upstream.bootstrap)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def proxy_ports(proxied) -> set[int]:
    return proxied.run(lambda: set(proxied.server.directory.proxy_ports.values()))


def test_confluent_kafka(proxied):
    clients.confluent_roundtrip(
        proxied.bootstrap, unique("cf"), unique("cfg"), proxy_ports(proxied)
    )


def test_confluent_kafka_idempotent_and_transactional(proxied, request):
    clients.confluent_idempotent_and_transactions(
        proxied.bootstrap,
        unique("txn"),
        unique("txid"),
        hides_aborted=request.node.callspec.params["proxied"] != "tansu",
    )


def test_kafka_python(proxied):
    clients.kafka_python_roundtrip(
        proxied.bootstrap, unique("kp"), unique("kpg"), proxy_ports(proxied)
    )


@pytest.mark.asyncio
async def test_aiokafka(proxied):
    await clients.aiokafka_roundtrip(
        proxied.bootstrap, unique("ak"), unique("akg"), proxy_ports(proxied)
    )
