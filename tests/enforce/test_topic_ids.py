"""Requests that name topics only by id: resolved through the cache, or asked upstream on a
miss (the request waits meanwhile); an id that stays unknown is answered UNKNOWN_TOPIC_ID and
never forwarded (fail closed)."""

from __future__ import annotations

import dataclasses
import sys
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import AclBinding
from aclgate.protocol.codec import encode_response
from aclgate.protocol.versions import request_class, response_class
from tests.fixtures.rawclient import RawClient
from tests.fixtures.scripted_broker import ScriptedCluster, _defaults

KNOWN = {uuid.UUID(int=1): "ok", uuid.UUID(int=2): "secret"}


def metadata_by_id(node, header, request):
    """Answers id lookups (Metadata v12+) for the ids in KNOWN; others get UNKNOWN_TOPIC_ID."""
    cls = response_class(3, header.api_version)
    mod = sys.modules[cls.__module__]
    topics = []
    for t in request.topics or ():
        name = t.name or KNOWN.get(t.topic_id)
        code = ErrorCode.none if name else ErrorCode.unknown_topic_id
        topics.append(
            _defaults(mod.MetadataResponseTopic, error_code=code, name=name, topic_id=t.topic_id)
        )
    body = _defaults(
        cls, brokers=node.brokers(mod.MetadataResponseBroker), cluster_id="c", topics=tuple(topics)
    )
    return encode_response(header.correlation_id, body)


@pytest.fixture
def setup(tmp_path, proxy_factory):
    with ScriptedCluster([1]) as cluster:
        node = cluster.nodes[0]
        node.script[3] = metadata_by_id
        node.script[1] = lambda n, h, r: encode_response(
            h.correlation_id, _defaults(response_class(1, h.api_version))
        )
        node.script[0] = lambda n, h, r: encode_response(
            h.correlation_id, _defaults(response_class(0, h.api_version))
        )
        acls = tmp_path / "acls.json"
        acls.write_text(
            dump_acl_file(
                [
                    AclBinding.from_dict(
                        {
                            "resource_type": "TOPIC",
                            "resource_name": "ok",
                            "pattern_type": "LITERAL",
                            "principal": "User:ANONYMOUS",
                            "host": "*",
                            "operation": op,
                            "permission_type": "ALLOW",
                        }
                    )
                    for op in ("READ", "WRITE")
                ]
            )
        )
        proxy = proxy_factory(
            cluster.bootstrap, acl_file=acls, allow_everyone_if_no_acl_found=False
        )
        yield proxy, node


def fetch_by_id(topic_id):
    cls = request_class(1, 13)
    mod = sys.modules[cls.__module__]
    topic = _defaults(
        mod.FetchTopic,
        topic_id=topic_id,
        partitions=(_defaults(mod.FetchPartition, partition=i32(0)),),
    )
    return dataclasses.replace(
        _defaults(cls), replica_id=i32(-1), topics=(topic,), session_epoch=i32(-1)
    )


def produce_by_id(topic_id):
    cls = request_class(0, 13)
    mod = sys.modules[cls.__module__]
    data = _defaults(
        mod.TopicProduceData,
        topic_id=topic_id,
        partition_data=(_defaults(mod.PartitionProduceData, index=i32(0), records=b""),),
    )
    return dataclasses.replace(_defaults(cls), acks=i16(1), topic_data=(data,))


def forwarded(node, api_key: int) -> list:
    return [r for h, r in node.requests if h.api_key == api_key]


def test_fetch_by_an_id_never_seen_is_resolved_upstream_then_authorized(setup):
    proxy, node = setup
    ok = next(i for i, n in KNOWN.items() if n == "ok")
    assert proxy.run(lambda: proxy.server.policy.topic_ids.name(ok)) is None
    with RawClient(proxy.bootstrap) as client:
        body = client.request(fetch_by_id(ok))
    assert body.error_code == ErrorCode.none
    (fetch,) = forwarded(node, 1)
    assert [t.topic_id for t in fetch.topics] == [ok]
    lookups = [
        r
        for h, r in node.requests
        if h.api_key == 3 and h.client_id == "aclgate-control" and r.topics
    ]
    assert any(t.topic_id == ok for r in lookups for t in r.topics), (
        "asked upstream on the control connection"
    )
    assert proxy.run(lambda: proxy.server.policy.topic_ids.name(ok)) == "ok"


@pytest.mark.parametrize("make", [fetch_by_id, produce_by_id], ids=["fetch", "produce"])
def test_unknown_id_is_answered_unknown_topic_id_and_not_forwarded(setup, make):
    proxy, node = setup
    missing = uuid.UUID(int=99)
    with RawClient(proxy.bootstrap) as client:
        body = client.request(make(missing))
    (topic,) = body.responses
    partitions = topic.partitions if hasattr(topic, "partitions") else topic.partition_responses
    assert topic.topic_id == missing and [p.error_code for p in partitions] == [
        ErrorCode.unknown_topic_id
    ]
    assert forwarded(node, 1) == [] and forwarded(node, 0) == []


@pytest.mark.parametrize("make", [fetch_by_id, produce_by_id], ids=["fetch", "produce"])
def test_id_of_a_denied_topic_is_refused_without_naming_it(setup, make):
    proxy, node = setup
    secret = next(i for i, n in KNOWN.items() if n == "secret")
    with RawClient(proxy.bootstrap) as client:
        body = client.request(make(secret))
    (topic,) = body.responses
    partitions = topic.partitions if hasattr(topic, "partitions") else topic.partition_responses
    assert topic.topic_id == secret and [p.error_code for p in partitions] == [
        ErrorCode.topic_authorization_failed
    ]
    assert forwarded(node, 1) == [] and forwarded(node, 0) == []


def test_requests_behind_a_parked_one_keep_their_order(setup):
    proxy, _node = setup
    ok = next(i for i, n in KNOWN.items() if n == "ok")
    with RawClient(proxy.bootstrap) as client:
        first = client.send(fetch_by_id(ok))  # parked while the id is looked up
        second = client.send(request_class(18, 0)())
        frames = [client.recv_frame(), client.recv_frame()]
    assert [int.from_bytes(f[4:8], "big") for f in frames] == [first, second]
