"""A Metadata request is answered with the topics it asked for, never more.

When every named topic is denied and the proxy has not seen the cluster yet, the request goes
upstream with its topic list stripped empty. Kafka answers an empty list (v1+) with no topics,
but tansu answers it with every topic (and Kafka itself does at v0): the client got the denied
topic's full entry next to its denial (found by the issue 25 work). Any entry the request did
not ask for is now dropped, and such a rewrite is never replayed from the answer memo."""

from __future__ import annotations

import uuid

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import AclBinding
from tests.fixtures.rawclient import RawClient, module, request_entity


def _metadata(version: int, *names: str):
    m = module(3, version)
    fields = {"allow_auto_topic_creation": False} if version >= 4 else {}
    if version >= 8:
        fields["include_topic_authorized_operations"] = False
    if 8 <= version <= 10:
        fields["include_cluster_authorized_operations"] = False
    ids = {"topic_id": uuid.UUID(int=0)} if version >= 10 else {}
    topics = tuple(m.MetadataRequestTopic(name=n, **ids) for n in names)
    return request_entity(3, version, topics=topics, **fields)


def _describe(topic: str) -> AclBinding:
    return AclBinding.from_dict(
        {"resource_type": "TOPIC", "resource_name": topic, "pattern_type": "LITERAL",
         "principal": "User:ANONYMOUS", "host": "*", "operation": "DESCRIBE",
         "permission_type": "ALLOW"}
    )  # fmt: skip


def test_a_denied_topic_alone_gets_its_denial_and_nothing_else(tansu, proxy_factory, tmp_path):
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    for future in admin.create_topics([NewTopic("ok", 1, 1), NewTopic("secret", 3, 1)]).values():
        future.result(20)
    acls = tmp_path / "acls.json"
    acls.write_text(dump_acl_file([_describe("ok")]))
    proxy = proxy_factory(tansu.bootstrap, acl_file=acls, allow_everyone_if_no_acl_found=False)
    with RawClient(tansu.bootstrap) as raw:  # what tansu itself does with an empty list
        assert {t.name for t in raw.request(_metadata(9)).topics} >= {"ok", "secret"}
    with RawClient(proxy.bootstrap) as raw:
        # the first request: the proxy has no view of the cluster to answer alone from
        for version in (9, 1, 12):
            (topic,) = raw.request(_metadata(version, "secret")).topics
            assert topic.name == "secret" and topic.partitions == ()
            assert topic.error_code == ErrorCode.topic_authorization_failed
        # an allowed topic next to it: that one, with its data, and the denial
        answer = raw.request(_metadata(9, "ok", "secret"))
        assert [(t.name, t.error_code) for t in answer.topics] == [
            ("ok", ErrorCode.none),
            ("secret", ErrorCode.topic_authorization_failed),
        ]
        # the same request twice (the second answer may come from the memo)
        for _ in range(2):
            (topic,) = raw.request(_metadata(9, "ok")).topics
            assert topic.name == "ok" and topic.error_code == ErrorCode.none
