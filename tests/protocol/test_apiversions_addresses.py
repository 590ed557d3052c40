"""ApiVersions trimming and broker-address rewriting, checked by decoding with kio."""

import dataclasses
import struct
import sys
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from aclgate.protocol.addresses import (
    metadata_brokers_span,
    rewrite_describe_cluster,
    rewrite_find_coordinator,
    rewrite_metadata,
    rewrite_node_endpoints,
    rewrite_tagged_fields,
)
from aclgate.protocol.answerwalk import SCHEMAS, no_node_endpoints, tail_offset
from aclgate.protocol.apiversions import trim_api_versions, unsupported_version_response
from aclgate.protocol.codec import MalformedResponse, decode_response, encode_response
from aclgate.protocol.versions import response_class
from tests.fixtures.scripted_broker import _defaults


class Directory:
    def __init__(self, ports, host="proxy.example"):
        self.ports, self.host, self.learned = ports, host, {}

    def learn(self, node_id, host, port):
        self.learned[node_id] = (host, port)

    def advertise(self, node_id):
        port = self.ports.get(node_id)
        return None if port is None else (self.host, port)


def mod(key, v):
    return sys.modules[response_class(key, v).__module__]


def api_versions_frame(version, entries, error=ErrorCode.none):
    m = mod(18, version)
    keys = tuple(
        m.ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
        for k, lo, hi in entries
    )
    body = _defaults(response_class(18, version), api_keys=keys, error_code=error)
    return encode_response(9, body)


def test_trim_keeps_intersection_drops_unknown_and_keeps_produce_min():
    for version in range(5):
        frame = api_versions_frame(
            version, [(0, 0, 11), (1, 0, 17), (3, 0, 12), (10000, 0, 3), (29, 0, 3)]
        )
        dropped = set()
        out = trim_api_versions(frame, version, {0: (3, 9), 1: (4, 12), 3: (0, 13)}, dropped)
        body = decode_response(out, 18, version)
        got = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        assert got == {0: (0, 9), 1: (4, 12), 3: (0, 12)}, version
        assert dropped == {10000, 29}


def test_trim_drops_key_with_empty_intersection():
    frame = api_versions_frame(3, [(1, 0, 3)])
    body = decode_response(trim_api_versions(frame, 3, {1: (4, 12)}), 18, 3)
    assert body.api_keys == ()


def test_trim_keeps_top_level_tagged_fields_verbatim():
    m = mod(18, 3)
    body = _defaults(
        response_class(18, 3),
        api_keys=(m.ApiVersion(api_key=i16(3), min_version=i16(0), max_version=i16(12)),),
        supported_features=(
            m.SupportedFeatureKey(name="metadata.version", min_version=i16(1), max_version=i16(27)),
        ),
        finalized_features_epoch=7,
    )
    out = decode_response(trim_api_versions(encode_response(1, body), 3, {3: (0, 13)}), 18, 3)
    assert out.supported_features == body.supported_features and out.finalized_features_epoch == 7


def test_error_answer_is_parsed_as_v0_body():
    frame = unsupported_version_response(5, 3)
    body = decode_response(trim_api_versions(frame, 4, {18: (0, 4)}), 18, 0)
    assert body.error_code == ErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 3)]


def kafka_invalid_request_answer(correlation_id: int) -> bytes:
    """Kafka's answer to an ApiVersions v3+ with an invalid client_software_name (KIP-511):
    12 bytes after the size: correlation id, INVALID_REQUEST (42), an empty compact api_keys
    array, throttle time 0, no tagged fields."""
    return struct.pack(">iihbib", 12, correlation_id, 42, 1, 0, 0)


def test_kafka_invalid_request_answer_passes_unchanged():
    frame = kafka_invalid_request_answer(7)
    assert len(frame) == 16
    own = {17: (0, 1), 36: (0, 2)}  # a SASL listener adds these to a successful answer only
    for version in (3, 4):
        assert trim_api_versions(frame, version, {18: (0, 4)}, set(), own) == frame
        body = decode_response(frame, 18, version)
        assert body.error_code == ErrorCode.invalid_request and body.api_keys == ()


def test_error_answers_in_the_request_version_pass_unchanged():
    for version in range(5):
        frame = api_versions_frame(version, [], error=ErrorCode.invalid_request)
        assert trim_api_versions(frame, version, {18: (0, 4)}, None, {17: (0, 1)}) == frame


def test_an_error_answer_matching_no_layout_still_fails_closed():
    bad = struct.pack(">iihb", 7, 7, 42, 5)  # a compact array of 4 entries that are not there
    for version in (0, 3):
        with pytest.raises(MalformedResponse):
            trim_api_versions(bad, version, {18: (0, 4)})


def metadata_frame(version, brokers, topics=("a", "b")):
    m = mod(3, version)
    bs = tuple(
        _defaults(
            m.MetadataResponseBroker, node_id=i32(n), host=f"10.0.0.{n}", port=i32(9092), rack=None
        )
        for n in brokers
    )
    ts = tuple(
        _defaults(
            m.MetadataResponseTopic,
            name=t,
            partitions=(_defaults(m.MetadataResponsePartition, leader_id=i32(brokers[0])),),
        )
        for t in topics
    )
    if version >= 10:
        ts = tuple(dataclasses.replace(t, topic_id=uuid.uuid4()) for t in ts)
    return encode_response(
        3, _defaults(response_class(3, version), brokers=bs, topics=ts, cluster_id="c")
    )


def test_metadata_splice_every_version():
    for version in range(14):
        frame = metadata_frame(version, [1, 2, 1000])
        directory = Directory({1: 19001, 2: 19002, 1000: 19003})
        out = rewrite_metadata(frame, version, directory)
        body = decode_response(out, 3, version)
        assert {(b.node_id, b.host, b.port) for b in body.brokers} == {
            (1, "proxy.example", 19001),
            (2, "proxy.example", 19002),
            (1000, "proxy.example", 19003),
        }, version
        assert directory.learned[1000] == ("10.0.0.1000", 9092)
        # everything after the brokers array is byte-identical
        _, end_in, _ = metadata_brokers_span(frame, version)
        _, end_out, _ = metadata_brokers_span(out, version)
        assert bytes(out[end_out:]) == bytes(frame[end_in:])


def test_unmappable_broker_is_dropped_never_leaked():
    frame = metadata_frame(12, [1, 2])
    body = decode_response(rewrite_metadata(frame, 12, Directory({1: 19001})), 3, 12)
    assert [(b.node_id, b.host) for b in body.brokers] == [(1, "proxy.example")]


def test_find_coordinator_single_and_batched():
    d = Directory({5: 19005})
    for version in range(4):
        body = _defaults(
            response_class(10, version), node_id=i32(5), host="10.1.1.1", port=i32(9093)
        )
        out = decode_response(
            rewrite_find_coordinator(encode_response(1, body), version, d), 10, version
        )
        assert (out.node_id, out.host, out.port) == (5, "proxy.example", 19005)
        body = _defaults(
            response_class(10, version), node_id=i32(6), host="10.1.1.1", port=i32(9093)
        )
        out = decode_response(
            rewrite_find_coordinator(encode_response(1, body), version, d), 10, version
        )
        assert (
            out.error_code == ErrorCode.coordinator_not_available
            and out.host == ""
            and out.node_id == -1
        )
    for version in range(4, 7):
        m = mod(10, version)
        coords = (
            _defaults(m.Coordinator, key="g1", node_id=i32(5), host="10.1.1.1", port=i32(1)),
            _defaults(m.Coordinator, key="g2", node_id=i32(7), host="10.1.1.2", port=i32(1)),
        )
        body = _defaults(response_class(10, version), coordinators=coords)
        out = decode_response(
            rewrite_find_coordinator(encode_response(1, body), version, d), 10, version
        )
        assert [(c.key, c.host, c.port, c.error_code) for c in out.coordinators] == [
            ("g1", "proxy.example", 19005, ErrorCode.none),
            ("g2", "", -1, ErrorCode.coordinator_not_available),
        ]


def test_describe_cluster_and_controller_endpoints():
    d = Directory({1: 19001})
    for version in range(3):
        m = mod(60, version)
        brokers = (
            _defaults(m.DescribeClusterBroker, broker_id=i32(1), host="10.0.0.1", port=i32(9092)),
        )
        extra = {"endpoint_type": 1} if version >= 1 else {}
        body = _defaults(response_class(60, version), brokers=brokers, cluster_id="c", **extra)
        out = decode_response(
            rewrite_describe_cluster(encode_response(1, body), version, d), 60, version
        )
        assert [(b.broker_id, b.host, b.port) for b in out.brokers] == [(1, "proxy.example", 19001)]
    body = dataclasses.replace(body, endpoint_type=2)
    out = decode_response(rewrite_describe_cluster(encode_response(1, body), 2, d), 60, 2)
    assert out.brokers == ()


def test_kip951_node_endpoints_rewritten_and_common_case_untouched():
    d = Directory({2: 19002})
    for key, version in ((0, 10), (0, 13), (1, 16), (1, 18)):
        cls = response_class(key, version)
        plain = encode_response(3, _defaults(cls))
        assert rewrite_node_endpoints(plain, key, version, d) is plain
        m = mod(key, version)
        eps = (
            _defaults(m.NodeEndpoint, node_id=i32(2), host="10.0.0.2", port=i32(9092), rack=None),
            _defaults(m.NodeEndpoint, node_id=i32(3), host="10.0.0.3", port=i32(9092), rack=None),
        )
        out = decode_response(
            rewrite_node_endpoints(
                encode_response(3, _defaults(cls, node_endpoints=eps)), key, version, d
            ),
            key,
            version,
        )
        assert [(e.node_id, e.host, e.port) for e in out.node_endpoints] == [
            (2, "proxy.example", 19002)
        ]


def test_kip951_an_empty_endpoints_field_is_the_common_case_too():
    """tansu writes tag 0 with an empty array where Kafka writes no tag: nothing to advertise
    either way, so the answer goes on untouched, decided where it is compiled
    (answerwalk.no_node_endpoints) without decoding the tagged fields."""
    d = Directory({2: 19002})
    for key, version in ((0, 10), (0, 13), (1, 16), (1, 18)):
        plain = encode_response(3, _defaults(response_class(key, version)))
        assert plain.endswith(b"\x00")
        payload = plain[4:-1] + b"\x01\x00\x01\x01"  # count 1, tag 0, size 1, empty array
        frame = struct.pack(">i", len(payload)) + payload
        assert decode_response(frame, key, version).node_endpoints == ()
        start = tail_offset(SCHEMAS[key, version], frame)
        assert start == len(frame) - 4
        assert no_node_endpoints(frame, start) and no_node_endpoints(plain, len(plain) - 1)
        assert rewrite_node_endpoints(frame, key, version, d) is frame
        section = memoryview(frame)[start:]
        for keep_length in (True, False):
            assert rewrite_tagged_fields(section, key, version, d, keep_length) is section
        m = mod(key, version)
        one = _defaults(m.NodeEndpoint, node_id=i32(2), host="10.0.0.2", port=i32(9092), rack=None)
        carrying = encode_response(
            3, _defaults(response_class(key, version), node_endpoints=(one,))
        )
        assert not no_node_endpoints(carrying, tail_offset(SCHEMAS[key, version], carrying))
