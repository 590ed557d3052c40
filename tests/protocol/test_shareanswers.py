"""ShareFetch/ShareAcknowledge answers: node_endpoints found by offsets and mapped to proxy
addresses; an answer without endpoints goes back as the same object (no copy)."""

from __future__ import annotations

import uuid

import pytest
from kio.static.primitive import i32

from aclgate.protocol.codec import decode_response, encode_response
from aclgate.protocol.shareanswers import rewrite_share_endpoints
from aclgate.protocol.versions import response_module
from tests.fixtures.scripted_broker import _defaults
from tests.protocol.test_apiversions_addresses import Directory


def _answer(key: int, version: int, endpoints: bool) -> bytes:
    m = response_module(key, version)
    top = m.ShareFetchResponse if key == 78 else m.ShareAcknowledgeResponse
    topic = m.ShareFetchableTopicResponse if key == 78 else m.ShareAcknowledgeTopicResponse
    extra = {"records": b"\x00" * 50} if key == 78 else {}
    part = _defaults(m.PartitionData, partition_index=i32(0), **extra)
    nodes = (_defaults(m.NodeEndpoint, node_id=i32(2), host="real-2", port=i32(9092), rack=None),)
    body = _defaults(
        top,
        responses=(_defaults(topic, topic_id=uuid.uuid4(), partitions=(part,)),),
        node_endpoints=nodes if endpoints else (),
    )
    return encode_response(7, body)


@pytest.mark.parametrize(("key", "version"), [(78, 1), (78, 2), (79, 1), (79, 2)])
def test_endpoints_rewritten(key, version):
    directory = Directory({2: 19002})
    plain = _answer(key, version, False)
    assert rewrite_share_endpoints(plain, key, version, directory) is plain
    out = rewrite_share_endpoints(_answer(key, version, True), key, version, directory)
    body = decode_response(out, key, version)
    assert [(n.node_id, n.host, n.port) for n in body.node_endpoints] == [
        (2, "proxy.example", 19002)
    ]
    assert "real-2" not in bytes(out).decode("latin-1")
