"""DescribeTopicPartitions paging through aclgate in front of Apache Kafka, past the bound on
the broker pages read for one client page (here no more than the first: EXTRA_PAGES = 0): the
next cursor that would name a hidden topic reaches the client sealed
(protocol/enforce/cursor.py), opens again on the proxy that sealed it, and opens nowhere else.
Within the bound the pages are Kafka's own: tests/kafka/test_dtp_pages_kafka.py."""

from __future__ import annotations

import pytest
from kio.static.primitive import i32

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import AclBinding
from aclgate.protocol.enforce import partitions
from tests.fixtures.rawclient import RawClient, module, request_entity

pytestmark = pytest.mark.kafka


def dtp(cursor: tuple[str, int] | None = None, limit: int = 1):
    """All-topics DescribeTopicPartitions v0, `limit` partitions per answer."""
    m = module(75, 0)
    return request_entity(
        75,
        0,
        topics=(),
        response_partition_limit=i32(limit),
        cursor=None
        if cursor is None
        else m.Cursor(topic_name=cursor[0], partition_index=i32(cursor[1])),
    )


def describe_acl(topic: str) -> AclBinding:
    return AclBinding.from_dict(
        {
            "resource_type": "TOPIC",
            "resource_name": topic,
            "pattern_type": "LITERAL",
            "principal": "User:ANONYMOUS",
            "host": "*",
            "operation": "DESCRIBE",
            "permission_type": "ALLOW",
        }
    )


def page_all(raw: RawClient, cursor: tuple[str, int] | None = None) -> tuple[list[str], list]:
    """Every topic name of every page from `cursor` on, and the next cursors handed out."""
    names, cursors = [], []
    for _ in range(500):
        answer = raw.request(dtp(cursor))
        names += [t.name for t in answer.topics]
        if answer.next_cursor is None:
            return names, cursors
        cursors.append(answer.next_cursor)
        cursor = (answer.next_cursor.topic_name, answer.next_cursor.partition_index)
    raise AssertionError("paging did not end")


def test_paging_never_names_a_hidden_topic(
    kafka_single, kafka_topic_name, proxy_factory, tmp_path, monkeypatch
):
    monkeypatch.setattr(partitions, "EXTRA_PAGES", 0)  # every page is the broker's first
    ok, secret, zz = (f"{kafka_topic_name}-{s}" for s in ("a", "b", "c"))
    kafka_single.create_topic(ok)
    kafka_single.create_topic(secret, partitions=3)
    kafka_single.create_topic(zz)
    acls = tmp_path / "acls.json"
    acls.write_text(dump_acl_file([describe_acl(ok), describe_acl(zz)]))
    config = dict(acl_file=acls, allow_everyone_if_no_acl_found=False)
    proxy = proxy_factory(kafka_single.bootstrap, **config)
    with RawClient(proxy.bootstrap) as raw:
        names, cursors = page_all(raw)
        assert names == [ok, zz]  # one partition a page: every other topic's pages were hidden
        sealed = [c.topic_name for c in cursors if c.topic_name not in (ok, zz)]
        assert sealed and all(name.startswith("~aclgate:") for name in sealed)
        assert not any(secret in repr(c) for c in cursors)
        # the sealed cursor at `secret` (the page before it is `ok`'s) opens on this proxy
        at_secret = cursors[[c.topic_name for c in cursors].index(zz) - 1]
        assert page_all(raw, (at_secret.topic_name, 0))[0] == [zz]
        # altered by the client: not opened; Kafka pages on from a name after every topic
        altered = at_secret.topic_name[:-1] + ("A" if at_secret.topic_name[-1] != "A" else "B")
        assert page_all(raw, (altered, 0)) == ([], [])
    # another proxy process (another key): not opened either
    other = proxy_factory(kafka_single.bootstrap, **config)
    with RawClient(other.bootstrap) as raw:
        assert page_all(raw, (at_secret.topic_name, 0)) == ([], [])
    with RawClient(kafka_single.bootstrap) as raw:  # what Kafka does with such a name
        assert page_all(raw, (at_secret.topic_name, 0)) == ([], [])
