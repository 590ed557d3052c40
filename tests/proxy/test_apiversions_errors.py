"""Kafka's error answers to ApiVersions reach the client as Kafka sent them.

An ApiVersions v3+ whose client_software_name is not valid (KIP-511) gets INVALID_REQUEST
written in the request's own version: 12 bytes after the size. aclgate used to read every
error answer as a v0 body, failed on this one, closed the connection and counted an upstream
error.
"""

from __future__ import annotations

from typing import Any

from tests.fixtures.rawclient import RawClient, request_entity
from tests.fixtures.scripted_broker import ScriptedCluster, answer_api_versions
from tests.protocol.test_apiversions_addresses import kafka_invalid_request_answer

BAD_NAME = "bad name!"  # a space and "!" are outside KIP-511's [a-zA-Z0-9.-]


def api_versions(name: str) -> Any:
    return request_entity(18, 3, client_software_name=name, client_software_version="1.0")


def exchange(address: str) -> tuple[bytes | None, bytes | None]:
    """The raw answer to an invalid ApiVersions, then to a valid one on the same connection
    (None: the connection was closed instead)."""
    with RawClient(address) as client:
        client.send(api_versions(BAD_NAME), correlation_id=41)
        bad = client.recv_frame()
        if bad is None:
            return None, None
        client.send(api_versions("ok-client"), correlation_id=42)
        return bad, client.recv_frame()


def test_scripted_kafka_invalid_request_answer_passes_unchanged(proxy_factory):
    def script(node: Any, header: Any, request: Any) -> bytes:
        if getattr(request, "client_software_name", None) == BAD_NAME:
            return kafka_invalid_request_answer(header.correlation_id)
        return answer_api_versions(node, header, request)

    with ScriptedCluster([1]) as cluster:
        cluster.nodes[0].script[18] = script
        proxy = proxy_factory(cluster.bootstrap)
        bad, good = exchange(proxy.bootstrap)
    assert bad == kafka_invalid_request_answer(41)
    assert good is not None  # the connection still serves
    assert proxy.metric("aclgate_errors_total", {"kind": "bad_upstream_response"}) == 0


def test_real_kafka_answers_an_invalid_software_name_the_same_through_the_proxy(
    kafka_single, proxy_factory
):
    proxy = proxy_factory(kafka_single.bootstrap.split(",")[0])
    direct = exchange(kafka_single.bootstrap.split(",")[0])
    through = exchange(proxy.bootstrap)
    assert direct[0] == kafka_invalid_request_answer(41)  # what the scripted test sends
    assert through[0] == direct[0]
    assert (through[1] is None) == (direct[1] is None)
    assert proxy.metric("aclgate_errors_total", {"kind": "bad_upstream_response"}) == 0
