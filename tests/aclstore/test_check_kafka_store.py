"""`aclgate check --expect --acl-store kafka`: a policy test against the ACL topic a fleet
serves, written by the store's own writer into Apache Kafka (issue 14 item 4)."""

from __future__ import annotations

import asyncio
import json

import pytest

from aclgate.authz.authorizer import Authorizer
from aclgate.proxy.aclstore.kafka.store import KafkaAclBackend, KafkaStoreSettings
from tests.authz.cli import run
from tests.authz.helpers import ALLOW, DENY, LIT, PRE, Op, T, acl

pytestmark = pytest.mark.kafka

POLICY = [
    acl(T, "orders", PRE, "User:alice", "*", Op.WRITE, ALLOW),
    acl(T, "orders-secret", LIT, "User:*", "*", Op.ALL, DENY),
]


def query(principal, op, name, expect, **extra):
    return {"principal": principal, "host": "10.0.0.1", "operation": op, "resource_type": "TOPIC",
            "resource_name": name, "expect": expect, **extra}  # fmt: skip


def test_check_expect_against_the_kafka_store(kafka_single, kafka_topic_name, tmp_path):
    settings = KafkaStoreSettings(
        bootstrap=kafka_single.bootstrap, topic=f"acls-{kafka_topic_name}"
    )

    async def write() -> None:
        backend = KafkaAclBackend(settings, Authorizer())
        await backend.start()
        try:
            await backend.change(POLICY, [])
        finally:
            await backend.stop()

    asyncio.run(write())
    queries = tmp_path / "policy-tests.jsonl"
    args = ["check", "--acl-store", "kafka", "--acl-bootstrap", settings.bootstrap,
            "--acl-topic", settings.topic, "--queries", str(queries), "--expect"]  # fmt: skip
    right = [
        query("User:alice", "WRITE", "orders", "ALLOWED", expect_rule="ACL"),
        query("User:alice", "WRITE", "orders-secret", "DENIED"),
        query("User:bob", "WRITE", "orders", "DENIED", expect_rule="DEFAULT_DENY"),
    ]
    queries.write_text("".join(json.dumps(q) + "\n" for q in right))
    result = run(*args)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "OK: 3 queries, 3 as expected, 0 different\n"

    queries.write_text(json.dumps(query("User:bob", "WRITE", "orders", "ALLOWED")) + "\n")
    result = run(*args)
    assert result.returncode == 1
    assert "-ALLOWED\n+DENIED by DEFAULT_DENY\n" in result.stdout

    # a topic that does not exist is no policy: unusable, not an empty policy
    result = run(*args[:6], "acls-never-written", *args[7:], "--acl-timeout", "5")
    assert (result.returncode, result.stdout) == (2, "")
    assert "acls-never-written" in result.stderr
