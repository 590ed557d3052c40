"""Metadata v12+ with a name *and* an id in one entry, against Apache Kafka.

Kafka answers by ids as soon as one entry carries a non-zero id and ignores every name
(KafkaApis.handleTopicMetadataRequest, useTopicId). A proxy that authorized the name would let
an allowed name vouch for any topic's id and leak that topic's name and partitions."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import AclBinding
from tests.fixtures.rawclient import RawClient, module, request_entity

pytestmark = pytest.mark.kafka

ZERO = uuid.UUID(int=0)


def metadata_v12(*entries: tuple[str | None, uuid.UUID]):
    m = module(3, 12)
    return request_entity(
        3,
        12,
        topics=tuple(m.MetadataRequestTopic(name=n, topic_id=i) for n, i in entries),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
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


@pytest.fixture
def topics(kafka_single, kafka_topic_name):
    ok, secret = f"{kafka_topic_name}-ok", f"{kafka_topic_name}-secret"
    kafka_single.create_topic(ok)
    kafka_single.create_topic(secret, partitions=3)
    with RawClient(kafka_single.bootstrap) as raw:
        answer = raw.request(metadata_v12((ok, ZERO), (secret, ZERO)))
    ids = {t.name: t.topic_id for t in answer.topics}
    return ok, secret, ids


def test_a_name_never_vouches_for_another_topics_id(kafka_single, topics, proxy_factory, tmp_path):
    ok, secret, ids = topics
    acls = tmp_path / "acls.json"
    acls.write_text(dump_acl_file([describe_acl(ok)]))
    proxy = proxy_factory(
        kafka_single.bootstrap, acl_file=acls, allow_everyone_if_no_acl_found=False
    )
    with RawClient(kafka_single.bootstrap) as raw:  # what Kafka itself answers
        direct = raw.request(metadata_v12((ok, ids[secret])))
    assert [t.name for t in direct.topics] == [secret]  # by id: the name is ignored
    with RawClient(proxy.bootstrap) as raw:
        through = raw.request(metadata_v12((ok, ids[secret])))
        (topic,) = through.topics
        assert topic.error_code == ErrorCode.topic_authorization_failed
        assert topic.name is None and topic.topic_id == ids[secret] and topic.partitions == ()
        # the allowed topic, by id, with a denied name next to it: answered for the id
        (topic,) = raw.request(metadata_v12((secret, ids[ok]))).topics
        assert (topic.error_code, topic.name, topic.topic_id) == (ErrorCode.none, ok, ids[ok])
        # one id in the request: name-only entries are ignored, as Kafka does
        answer = raw.request(metadata_v12((ok, ZERO), (None, ids[ok])))
        assert [(t.name, t.topic_id) for t in answer.topics] == [(ok, ids[ok])]
    with RawClient(kafka_single.bootstrap) as raw:
        answer = raw.request(metadata_v12((ok, ZERO), (None, ids[ok])))
    assert [(t.name, t.topic_id) for t in answer.topics] == [(ok, ids[ok])]  # Kafka agrees
