"""Kafka's own kafka-acls (AclCommand) through aclgate prints what it prints against Apache
Kafka holding the same ACLs, step by step: --add, --list, --remove, --producer, --consumer
--group, --resource-pattern-type literal|prefixed|match|any, over SASL (--command-config)."""

from __future__ import annotations

import re

import pytest

from tests.acladmin.conftest import Side
from tests.kafka import tools

pytestmark = pytest.mark.kafka

#: one kafka-acls call per step; `{T}` and friends are resource names
STEPS: list[tuple[str, ...]] = [
    ("--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Write",
     "--topic", "orders", "--transactional-id", "tx-1"),
    ("--add", "--producer", "--allow-principal", "User:bob", "--topic", "pay-",
     "--resource-pattern-type", "prefixed"),
    ("--add", "--consumer", "--allow-principal", "User:charlie", "--allow-host", "10.0.0.1",
     "--topic", "orders", "--group", "billing"),
    ("--add", "--deny-principal", "User:bob", "--operation", "Describe", "--topic", "*"),
    # a KIP-1276 CIDR host: Kafka 4.3.1 stores it as a string, so does aclgate by default
    ("--add", "--allow-principal", "User:alice", "--allow-host", "10.0.0.0/8",
     "--allow-host", "2001:db8::/32", "--operation", "Read", "--topic", "orders"),
    ("--list",),
    ("--list", "--topic", "orders", "--resource-pattern-type", "match"),
    ("--list", "--topic", "pay-in", "--resource-pattern-type", "match"),
    ("--list", "--topic", "pay-", "--resource-pattern-type", "any"),
    ("--remove", "--force", "--allow-principal", "User:alice", "--operation", "Write",
     "--topic", "orders"),
    ("--remove", "--force", "--topic", "orders", "--resource-pattern-type", "match"),
    ("--list",),
]  # fmt: skip

_BLOCK = re.compile(r"^(Current ACLs for resource|Adding ACLs for resource|ACLs for principal)")


def normalized(stdout: str) -> list[str]:
    """The output with each resource's ACL lines sorted and the resource blocks sorted:
    AclCommand groups ACLs in Java hash maps and sets, so their order varies from one JVM
    run to the next, also against Kafka itself."""
    blocks: list[list[str]] = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        if _BLOCK.match(line) or not blocks:
            blocks.append([line])
        else:
            blocks[-1].append(line)
    return sorted("\n".join([b[0], *sorted(b[1:])]) for b in blocks)


def test_normalized_keeps_content_and_drops_order():
    a = "Current ACLs for resource `X`: \n \t(b)\n \t(a)\n\nCurrent ACLs for resource `W`: \n \t(c)\n"
    b = "Current ACLs for resource `W`: \n \t(c)\n\nCurrent ACLs for resource `X`: \n \t(a)\n \t(b)\n"
    assert normalized(a) == normalized(b)
    assert normalized(a) != normalized(a.replace("(b)", "(d)"))


def test_kafka_acls_prints_the_same_through_aclgate(reference: Side, candidate: Side, kafka_authz):
    differences = []
    for step in STEPS:
        outputs = {}
        for side in (reference, candidate):
            result = tools.kafka_acls(side.bootstrap, *step, config=side.java_properties())
            outputs[side.name] = (result.returncode, normalized(result.stdout))
        if outputs["kafka"] != outputs["aclgate"]:
            differences.append((step, outputs))
    assert not differences, "\n\n".join(
        f"kafka-acls {' '.join(step)}\n  kafka:   {o['kafka']}\n  aclgate: {o['aclgate']}"
        for step, o in differences
    )
    # the proxy's ACL file holds what Kafka's StandardAuthorizer holds
    assert candidate.proxy is not None
    in_file = candidate.proxy.server.acl_backend.store.load()  # type: ignore[union-attr]
    in_kafka = kafka_authz.acls.list()
    assert len(in_file) == len(in_kafka) == 4
    assert sorted(b.resource_name for b in in_file) == sorted(b.name for b in in_kafka)


def test_a_user_without_alter_on_the_cluster_gets_the_same_refusal(
    reference: Side, candidate: Side
):
    """bob may not change ACLs: CLUSTER_AUTHORIZATION_FAILED on both sides."""
    for side in (reference, candidate):
        result = tools.kafka_acls(
            side.bootstrap,
            "--add",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Read",
            "--topic",
            "t",
            config=side.java_properties("bob"),
        )
        assert "ClusterAuthorizationException" in result.stdout + result.stderr, result
