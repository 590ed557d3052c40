"""Issue 20, B6, through a real ProxyServer and real sockets: a denied ACL change is answered
without decoding its entries, and a request over its API's size limit is refused from its
first bytes, with a close reason naming the API, the size and the limit, while the other
clients are served."""

from __future__ import annotations

import logging
import struct

from kio.schema.errors import ErrorCode

from aclgate.protocol.codec import decode_response
from aclgate.protocol.enforce import base
from aclgate.protocol.enforce.acls import DENIED_MESSAGE
from tests.fixtures.rawclient import RawClient, module, request_entity
from tests.protocol.test_request_limits import create_acls
from tests.proxy.test_bad_input import assert_still_serves, wait_for_log

MiB = 1 << 20


def _denying_proxy(tansu, proxy_factory, **overrides):
    """User:ANONYMOUS with no ACL at all: every check denied."""
    return proxy_factory(tansu.bootstrap, allow_everyone_if_no_acl_found=False, **overrides)


def test_denied_create_acls_of_200000_creations_is_answered_undecoded(
    tansu, proxy_factory, monkeypatch
):
    decoded: list[int] = []
    real = base.decode_request
    monkeypatch.setattr(
        base,
        "decode_request",
        lambda frame, header: decoded.append(header.api_key) or real(frame, header),
    )
    # 200,000 creations are 3.2 MB: over CreateAcls' 1 MiB default, so the test raises it
    proxy = _denying_proxy(tansu, proxy_factory, max_request_bytes={30: 8 * MiB})
    with RawClient(proxy.bootstrap, timeout=30) as client:
        client.send_raw(create_acls(200_000, corr=5))
        answer = client.recv_frame()
    assert answer is not None
    body = decode_response(answer, 30, 3)
    assert len(body.results) == 200_000
    assert {(r.error_code, r.error_message) for r in body.results} == {
        (ErrorCode.cluster_authorization_failed, DENIED_MESSAGE)
    }
    assert 30 not in decoded  # before: all 200,000 decoded (~1 s of the loop) before the check


def test_first_64k_of_a_50mb_delete_acls_closes_the_connection(tansu, proxy_factory, caplog):
    caplog.set_level(logging.INFO, logger="aclgate")
    proxy = _denying_proxy(tansu, proxy_factory)
    prefix = struct.pack(">ihhi", 50 * MiB, 31, 3, 1)
    with RawClient(proxy.bootstrap) as good, RawClient(proxy.bootstrap) as bad:
        good.request(request_entity(18, 0))
        bad.send_raw(prefix + bytes(64 * 1024 - len(prefix)))
        assert bad.is_closed_by_peer()  # before: the proxy waited for the other 49.9 MB
        good.request(request_entity(18, 0))
    record = wait_for_log(caplog, "DeleteAcls")
    assert f"frame size {50 * MiB}" in record.getMessage()
    assert f"limit of {MiB} bytes" in record.getMessage()
    assert proxy.metric("aclgate_errors_total", {"kind": "frame_too_large"}) == 1
    assert_still_serves(proxy)


def _metadata(names: int, width: int) -> bytes:
    """A Metadata v12 request naming `names` topics of `width` characters."""
    from aclgate.protocol.codec import encode_request

    m = module(3, 12)
    topics = tuple(
        m.MetadataRequestTopic(topic_id=None, name=f"{i:0{width}d}") for i in range(names)
    )
    body = request_entity(
        3, 12, topics=topics, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )  # fmt: skip
    return encode_request(9, body)


def test_metadata_is_bounded_to_its_limit(tansu, proxy_factory):
    """Metadata naming denied topics: answered up to 256 KiB, refused past it (before: up to
    100 MiB, some 4,000,000 names decoded and checked in one go)."""
    proxy = _denying_proxy(tansu, proxy_factory)
    at_limit = _metadata(10_000, 8)  # 10,000 names of 8 characters: 256 KiB - a little
    assert MiB // 4 - 25_000 < len(at_limit) - 4 <= MiB // 4
    over = _metadata(11_250, 8)
    with RawClient(proxy.bootstrap, timeout=30) as client:
        client.send_raw(at_limit)
        answer = client.recv_frame()
        assert answer is not None
        topics = decode_response(answer, 3, 12).topics
        assert len(topics) == 10_000
        assert {t.error_code for t in topics} == {ErrorCode.topic_authorization_failed}
        client.send_raw(over)
        assert client.is_closed_by_peer()
    assert proxy.metric("aclgate_errors_total", {"kind": "frame_too_large"}) == 1
