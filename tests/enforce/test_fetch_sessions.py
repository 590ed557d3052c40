"""KIP-227 incremental fetch sessions: an incremental fetch naming a session this connection
did not open, with a denied topic, is fetched sessionless with the allowed topics only; a
denied partition never reaches the broker (the kept sessions: test_fetch_sessions_kafka.py)."""

from __future__ import annotations

import dataclasses
import sys
import time

import pytest
from kio.static.primitive import i32

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import AclBinding
from aclgate.protocol.versions import request_class
from tests.fixtures.rawclient import RawClient
from tests.fixtures.scripted_broker import ScriptedCluster, _defaults


def fetch_request(version: int, topics: dict[str, list[int]], session_id: int, epoch: int):
    cls = request_class(1, version)
    mod = sys.modules[cls.__module__]
    entries = tuple(
        _defaults(
            mod.FetchTopic,
            topic=name,
            partitions=tuple(_defaults(mod.FetchPartition, partition=i32(p)) for p in parts),
        )
        for name, parts in topics.items()
    )
    return dataclasses.replace(
        _defaults(cls),
        replica_id=i32(-1),
        topics=entries,
        session_id=i32(session_id),
        session_epoch=i32(epoch),
    )


@pytest.fixture
def cluster():
    with ScriptedCluster([1]) as c:
        yield c


def acl_file(tmp_path, *topics_allowed: str):
    path = tmp_path / "acls.json"
    path.write_text(
        dump_acl_file(
            [
                AclBinding.from_dict(
                    {
                        "resource_type": "TOPIC",
                        "resource_name": t,
                        "pattern_type": "LITERAL",
                        "principal": "User:ANONYMOUS",
                        "host": "*",
                        "operation": "READ",
                        "permission_type": "ALLOW",
                    }
                )
                for t in topics_allowed
            ]
        )
    )
    return path


@pytest.mark.parametrize("version", [7, 12])
def test_incremental_fetch_is_turned_into_a_sessionless_full_fetch(
    cluster, proxy_factory, tmp_path, version
):
    node = cluster.nodes[0]
    node.script[1] = lambda n, h, r: None  # record only; the client times out, which is fine
    proxy = proxy_factory(
        cluster.bootstrap, acl_file=acl_file(tmp_path, "ok"), allow_everyone_if_no_acl_found=False
    )
    with RawClient(proxy.bootstrap, timeout=2) as client:
        client.send(fetch_request(version, {"ok": [0, 1], "denied": [0]}, session_id=77, epoch=5))
        deadline = time.monotonic() + 5  # stay connected until the broker has the request
        while time.monotonic() < deadline and not any(h.api_key == 1 for h, _ in node.requests):
            time.sleep(0.05)
    (fetched,) = [r for h, r in node.requests if h.api_key == 1]
    assert (fetched.session_id, fetched.session_epoch) == (0, -1)
    assert [t.topic for t in fetched.topics] == ["ok"], "the denied topic never reaches the broker"
    assert fetched.forgotten_topics_data == ()
