"""What clients cause in bulk on the cluster (all-topics listings for regex subscriptions,
DescribeTopicPartitions pages, auto-creation) goes on a control connection of its own: a
broker serves one request per connection at a time, so on a shared connection a slow listing
would hold every other client's topic-id lookup, and the proxy's cluster check, behind it
(docs/design.md, "The shape of it")."""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from typing import Any

from aclgate.protocol.codec import encode_response
from aclgate.protocol.versions import response_class
from tests.fixtures.scripted_broker import ScriptedCluster, ScriptedNode, _defaults

TOPIC_ID = uuid.UUID(int=7)


def _metadata(node: ScriptedNode, header: Any, topics: tuple[Any, ...]) -> bytes:
    cls = response_class(3, header.api_version)
    mod = sys.modules[cls.__module__]
    body = _defaults(
        cls,
        brokers=node.brokers(mod.MetadataResponseBroker),
        cluster_id="c",
        topics=tuple(
            _defaults(mod.MetadataResponseTopic, name=name, topic_id=topic_id)
            for name, topic_id in topics
        ),
    )
    return encode_response(header.correlation_id, body)


def test_a_stalled_listing_holds_neither_a_topic_id_lookup_nor_the_cluster_check(proxy_factory):
    release = threading.Event()
    listings = []

    def metadata(node: ScriptedNode, header: Any, request: Any) -> Any:
        if request.topics is None:  # every topic: the listing a regex subscription needs

            async def stalled() -> bytes:
                listings.append(header)
                for _ in range(200):  # until the test releases it (at most 20 s)
                    if release.is_set():
                        break
                    await asyncio.sleep(0.1)
                return _metadata(node, header, (("listed", TOPIC_ID),))

            return stalled()
        ids = tuple(t.topic_id for t in request.topics if t.topic_id is not None)
        return _metadata(node, header, tuple(("by-id", i) for i in ids))

    with ScriptedCluster([1]) as cluster:
        cluster.nodes[0].script[3] = metadata
        proxy = proxy_factory(cluster.bootstrap)
        server = proxy.server
        listed = threading.Event()
        found: dict[uuid.UUID, str] = {}
        looked_up = threading.Event()

        def lookup_done(names: dict[uuid.UUID, str]) -> None:
            found.update(names)
            looked_up.set()

        try:
            proxy.run(lambda: server.list_topic_names(0.0, lambda _names: listed.set()))
            for _ in range(100):
                if listings:
                    break
                threading.Event().wait(0.05)
            assert listings, "the listing never reached the broker"

            # the listing is held at the broker; the data path's lookup is not behind it
            proxy.run(lambda: server.lookup_topic_ids({TOPIC_ID}, lookup_done))
            assert looked_up.wait(5), "the topic-id lookup waited for another client's listing"
            assert found == {TOPIC_ID: "by-id"}
            proxy.call(server.refresh_brokers(raise_errors=True), timeout=5)
            assert not listed.is_set()
        finally:
            release.set()
        assert listed.wait(10)
