"""All-topics DescribeTopicPartitions pages, directly against Kafka and through aclgate.

alice may DESCRIBE some topics of a run of topics whose hidden ones fall before, between and
after hers. Kafka (StandardAuthorizer) pages over her topics only; aclgate, whose upstream
identity sees every topic, must give her the very same pages: topics, partitions (a topic cut
across pages), authorized operations and next cursors, for several partition limits and
cursors. tests/enforce/test_dtp_pages.py proves the same rule byte by byte against a scripted
broker, past the bound too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.protocol.versions import request_class
from aclgate.proxy.security.usersfile import add_user
from tests.equivalence.harness import Profile, _raw_client
from tests.equivalence.rawapi import build
from tests.fixtures.rawclient import RawClient
from tests.kafka.acls import KafkaAcls

pytestmark = pytest.mark.kafka

ALICE = "User:alice"
#: logical topic -> (partitions, operation alice is allowed, or None: hidden)
TOPICS = {
    "a-hid": (2, None),
    "b-pub": (3, "DESCRIBE"),
    "c-hid": (5, None),
    "d-hid": (1, None),
    "e-pub": (1, "READ"),  # READ implies DESCRIBE
    "f-pub": (4, "DESCRIBE"),
    "g-hid": (3, None),
    "h-pub": (2, "ALTER"),  # so does ALTER
    "i-hid": (2, None),
}


def dtp(limit: int, cursor: tuple[str, int] | None) -> Any:
    return build(
        request_class(75, 0),
        {
            "topics": [],
            "response_partition_limit": limit,
            "cursor": None
            if cursor is None
            else {"topic_name": cursor[0], "partition_index": cursor[1]},
        },
    )


def page(body: Any) -> dict[str, Any]:
    """Everything of an answer but the throttle time."""
    cursor = body.next_cursor
    return {
        "topics": [
            {
                "name": t.name,
                "error_code": t.error_code,
                "topic_id": t.topic_id,
                "is_internal": t.is_internal,
                "topic_authorized_operations": t.topic_authorized_operations,
                "partitions": [
                    (
                        p.partition_index,
                        p.error_code,
                        p.leader_id,
                        p.leader_epoch,
                        tuple(p.replica_nodes),
                        tuple(p.isr_nodes),
                        tuple(p.offline_replicas),
                    )
                    for p in t.partitions
                ],
            }
            for t in body.topics
        ],
        "next_cursor": None if cursor is None else (cursor.topic_name, cursor.partition_index),
    }


def walk(client: RawClient, limit: int, cursor: tuple[str, int] | None) -> list[dict[str, Any]]:
    pages: list[dict[str, Any]] = []
    for _ in range(60):
        pages.append(page(client.request(dtp(limit, cursor))))
        cursor = pages[-1]["next_cursor"]
        if cursor is None:
            return pages
    raise AssertionError(f"no end after 60 pages: {pages[-2:]}")


@pytest.fixture
def sides(
    kafka_authz: Any, kafka_acls: KafkaAcls, proxy_factory: Any, tmp_path: Path
) -> Iterator[tuple[str, RawClient, RawClient]]:
    """(prefix of the topics, alice directly on Kafka, alice through aclgate)."""
    # 'zz' first: the run sorts after the other tests' topics, so a page ending with alice's
    # last topic has no next topic on either side
    prefix = f"zz-dtp-{uuid.uuid4().hex[:6]}-"
    lst = kafka_authz.listener("SASL_PLAINTEXT")
    password = lst.users["alice"]
    for name, (count, _) in TOPICS.items():
        kafka_authz.create_topic(prefix + name, partitions=count)
    rights = [(prefix + n, op) for n, (_, op) in TOPICS.items() if op is not None]
    bindings = [KafkaAcls.binding(ALICE, op, "TOPIC", name) for name, op in rights]
    kafka_acls.add_bindings(bindings)
    users = tmp_path / "users.json"
    add_user(users, "alice", password, ["PLAIN"])
    acl_file = tmp_path / "acls.json"
    acl_file.write_text(
        dump_acl_file(
            [
                AclBinding(
                    ResourceType.TOPIC,
                    name,
                    PatternType.LITERAL,
                    ALICE,
                    "*",
                    AclOperation[op],
                    AclPermissionType.ALLOW,
                )
                for name, op in rights
            ]
        )
    )
    proxy = proxy_factory(
        kafka_authz.internal.bootstrap,  # PLAINTEXT: User:ANONYMOUS, a super user there
        acl_file=acl_file,
        allow_everyone_if_no_acl_found=False,
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms="PLAIN",
        users_file=users,
    )
    sasl = ("PLAIN", "alice", password)
    direct = _raw_client(Profile(ALICE, lst.bootstrap, sasl=sasl))
    gated = _raw_client(Profile(ALICE, proxy.bootstrap, sasl=sasl))
    try:
        yield prefix, direct, gated
    finally:
        direct.close()
        gated.close()


def test_all_topics_pages_through_aclgate_are_kafkas(
    sides: tuple[str, RawClient, RawClient],
) -> None:
    prefix, direct, gated = sides
    starts = [
        (prefix, 0),  # the run's start: no such topic, its name sorts before the run
        (prefix + "c-hid", 2),  # a hidden topic's partition
        (prefix + "b-pub", 1),  # inside a visible topic
        (prefix + "b-pub", 7),  # past a visible topic's end: Kafka returns it, no partitions
    ]
    for limit in (1, 2, 3, 4, 100):
        for start in starts:
            kafka = walk(direct, limit, start)
            assert kafka[0]["topics"], (limit, start)  # alice sees something from each start
            assert walk(gated, limit, start) == kafka, (limit, start)
