"""Kafka's own kafka-acls (4.3.1) creating KIP-1276 CIDR ACLs through aclgate with
--acl-host-cidr: the host travels in CreateAcls unchanged (the KIP changes no Admin API), the
proxy validates it and answers INVALID_REQUEST with Kafka trunk's message for a malformed one,
and a stored network decides for every client address in it (docs/authz.md, "CIDR hosts
(KIP-1276, opt-in)"). Without the option kafka-acls gets Kafka 4.3.1's behaviour: see the
CIDR step of test_kafka_acls_tool.py, compared with Apache Kafka itself."""

from __future__ import annotations

import pytest

from aclgate.authz.model import AclOperation, ResourceType
from tests.kafka import tools

pytestmark = pytest.mark.kafka

ADD = ("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders")


def test_kafka_acls_creates_a_cidr_acl_through_aclgate(kafka_single, proxy_factory, tmp_path):
    proxy = proxy_factory(
        kafka_single.bootstrap,
        super_user=["User:ANONYMOUS"],  # plaintext: kafka-acls is User:ANONYMOUS
        allow_everyone_if_no_acl_found=False,
        acl_file=tmp_path / "acls.json",
        acl_file_missing_ok=True,
        acl_host_cidr=True,
    )
    added = tools.kafka_acls(proxy.bootstrap, *ADD, "--allow-host", "10.0.0.0/8",
                             "--allow-host", "2001:db8::/32")  # fmt: skip
    assert added.returncode == 0, added
    refused = tools.kafka_acls(proxy.bootstrap, *ADD, "--allow-host", "10.0.0.0/33")
    assert "InvalidRequestException: Invalid CIDR notation '10.0.0.0/33': " in (
        refused.stdout + refused.stderr
    ), refused
    listed = tools.kafka_acls(proxy.bootstrap, "--list", "--topic", "orders")
    assert "host=10.0.0.0/8" in listed.stdout and "host=2001:db8::/32" in listed.stdout
    assert "10.0.0.0/33" not in listed.stdout

    def allowed(host: str) -> bool:
        decision = proxy.server.authorizer.authorize(
            "User:alice", host, AclOperation.READ, ResourceType.TOPIC, "orders"
        )
        return decision.allowed

    assert allowed("10.20.30.40") and allowed("2001:db8:0:0:0:0:0:7")
    assert not allowed("11.0.0.1") and not allowed("2001:db9:0:0:0:0:0:7")
    assert {b.host for b in proxy.server.acl_backend.store.load()} == {  # type: ignore[union-attr]
        "10.0.0.0/8",
        "2001:db8::/32",
    }
