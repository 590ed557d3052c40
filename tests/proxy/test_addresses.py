"""Every broker address a client receives points at the proxy (decoded client-side)."""

from __future__ import annotations

import sys

import pytest
from kio.static.primitive import i8, i16

from aclgate.protocol.codec import encode_response
from aclgate.protocol.versions import request_class, response_class
from tests.fixtures.ports import free_port_block
from tests.fixtures.rawclient import RawClient, module, request_entity
from tests.fixtures.scripted_broker import ScriptedCluster, _defaults


@pytest.fixture
def cluster():
    with ScriptedCluster([1, 2, 1000]) as c:
        yield c


def proxy_map(proxy) -> dict[int, int]:
    return proxy.run(lambda: dict(proxy.server.directory.proxy_ports))


def metadata_request(version: int, topics=("t",)):
    m = module(3, version)
    fields = {
        "topics": tuple(
            m.MetadataRequestTopic(
                **({"name": t} if version < 10 else {"name": t, "topic_id": None})
            )
            for t in topics
        )
    }
    if version >= 4:
        fields["allow_auto_topic_creation"] = False
    if 8 <= version <= 10:
        fields["include_cluster_authorized_operations"] = False
    if version >= 8:
        fields["include_topic_authorized_operations"] = False
    return request_entity(3, version, **fields)


def test_metadata_all_versions_point_at_proxy_ports(cluster, proxy_factory):
    proxy = proxy_factory(cluster.bootstrap)
    with RawClient(proxy.bootstrap) as client:
        for version in range(14):
            body = client.request(metadata_request(version))
            ports = proxy_map(proxy)
            assert set(ports) == {1, 2, 1000}
            assert {(b.node_id, b.host, b.port) for b in body.brokers} == {
                (n, "127.0.0.1", ports[n]) for n in (1, 2, 1000)
            }, version


def test_each_broker_port_reaches_its_own_broker(cluster, proxy_factory):
    proxy = proxy_factory(cluster.bootstrap, advertised_host="localhost")
    ports = proxy_map(proxy)
    for node_id in (1, 2, 1000):
        with RawClient(f"127.0.0.1:{ports[node_id]}") as client:
            body = client.request(
                request_entity(60, 0, include_cluster_authorized_operations=False)
            )
            # each scripted node names itself in cluster_id
            assert body.cluster_id == f"scripted-node-{node_id}"
            assert {(b.broker_id, b.host, b.port) for b in body.brokers} == {
                (n, "localhost", ports[n]) for n in (1, 2, 1000)
            }


def test_fixed_node_ports_and_port_range(cluster, proxy_factory):
    from aclgate.proxy.demo.embedded_broker import free_port

    lo = free_port_block(21)
    fixed = free_port()
    while lo <= fixed <= lo + 20:
        fixed = free_port()
    proxy = proxy_factory(cluster.bootstrap, node_port={1000: fixed}, broker_ports=(lo, lo + 20))
    ports = proxy_map(proxy)
    assert ports == {1000: fixed, 1: lo + 1, 2: lo + 2}


def test_find_coordinator_single_and_batched(cluster, proxy_factory):
    proxy = proxy_factory(cluster.bootstrap)
    with RawClient(proxy.bootstrap) as client:
        for version in range(4):
            fields = {"key": "g", "key_type": i8(0)} if version >= 1 else {"key": "g"}
            body = client.request(request_entity(10, version, **fields))
            assert (body.node_id, body.host, body.port) == (
                1000,
                "127.0.0.1",
                proxy_map(proxy)[1000],
            )
        for version in range(4, 7):
            body = client.request(
                request_entity(10, version, key_type=i8(0), coordinator_keys=("g1", "g2"))
            )
            assert [(c.key, c.node_id, c.host, c.port) for c in body.coordinators] == [
                (k, 1000, "127.0.0.1", proxy_map(proxy)[1000]) for k in ("g1", "g2")
            ]


def node_endpoints_answer(api_key):
    """A Produce/Fetch answer carrying every node's real endpoint (KIP-951)."""

    def answer(node, header, request):
        cls = response_class(api_key, header.api_version)
        m = sys.modules[cls.__module__]
        eps = node.brokers(m.NodeEndpoint)
        return encode_response(header.correlation_id, _defaults(cls, node_endpoints=eps))

    return answer


@pytest.mark.parametrize(("api_key", "version"), [(0, 10), (0, 13), (1, 16), (1, 18)])
def test_kip951_endpoints_in_produce_and_fetch(cluster, proxy_factory, api_key, version):
    for node in cluster.nodes:
        node.script[api_key] = node_endpoints_answer(api_key)
    proxy = proxy_factory(cluster.bootstrap)
    ports = proxy_map(proxy)
    fields = {"acks": i16(1)} if api_key == 0 else {}
    with RawClient(proxy.bootstrap) as client:
        body = client.request(_defaults(request_class(api_key, version), **fields))
    assert {(e.node_id, e.host, e.port) for e in body.node_endpoints} == {
        (n, "127.0.0.1", ports[n]) for n in (1, 2, 1000)
    }


def test_two_proxies_in_one_process_hand_out_their_own_ports(cluster, proxy_factory):
    """Rewritten brokers arrays are cached per proxy: the same upstream bytes must not make one
    proxy advertise another's ports (a process-wide cache once did)."""
    first, second = proxy_factory(cluster.bootstrap), proxy_factory(cluster.bootstrap)
    for proxy in (first, second, first):
        with RawClient(proxy.bootstrap) as client:
            body = client.request(metadata_request(12))
        assert {(b.node_id, b.port) for b in body.brokers} == set(proxy_map(proxy).items())


def test_broker_ports_are_the_same_on_every_instance(proxy_factory):
    """Two instances (or one restarted) hand out FIRST + node id, whatever order brokers
    appear in: the second instance learns them from a cluster listing them in reverse."""
    lo = free_port_block(42)
    with ScriptedCluster([1, 2, 1000]) as one, ScriptedCluster([1000, 2, 1]) as other:
        a = proxy_factory(one.bootstrap, broker_ports=(lo, lo + 20))
        b = proxy_factory(other.bootstrap, broker_ports=(lo + 21, lo + 41))
        ports_a, ports_b = proxy_map(a), proxy_map(b)
    assert ports_a == {1: lo + 1, 2: lo + 2, 1000: lo + 1000 % 21}
    assert {n: p - 21 for n, p in ports_b.items()} == ports_a


def test_broker_ports_survive_a_restart_with_a_broker_missing(proxy_factory):
    """A restart while broker 1 is down used to shift every later broker's port."""
    lo = free_port_block(21)
    with ScriptedCluster([1, 2, 1000]) as full:
        first = proxy_factory(full.bootstrap, broker_ports=(lo, lo + 20))
        before = proxy_map(first)
        first.stop()
    with ScriptedCluster([2, 1000]) as degraded:
        after = proxy_map(proxy_factory(degraded.bootstrap, broker_ports=(lo, lo + 20)))
    assert after == {2: before[2], 1000: before[1000]}


def test_broker_port_collision_hides_the_broker_and_says_why(proxy_factory, caplog):
    """1 and 1000 share a port in a 3-port range: the second is hidden, never given another
    broker's port (which would send its clients to the wrong broker)."""
    lo = free_port_block(3)
    with (
        caplog.at_level("ERROR", logger="aclgate.directory"),
        ScriptedCluster([1, 2, 1000]) as cluster,
    ):
        ports = proxy_map(proxy_factory(cluster.bootstrap, broker_ports=(lo, lo + 2)))
    assert ports == {1: lo + 1, 2: lo + 2}
    assert "no port for broker 1000" in caplog.text and "taken by broker 1" in caplog.text
