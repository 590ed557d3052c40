"""All-topics DescribeTopicPartitions pages through the real proxy, in front of a scripted
broker that pages as Kafka 4.3.1's broker does (KRaftMetadataCache.describeTopicResponse,
modelled by `kafka_pages`) over every topic, as it does for the proxy's own identity.

What the client gets through aclgate must be what Kafka gives a principal allowed to DESCRIBE
only some topics: the same model over those topics only, page for page (topics, partitions,
next cursors). Before, the proxy dropped hidden topics from the broker's page and handed on
its cursor: short or empty pages, with sealed cursors. The Kafka-backed proof is
tests/kafka/test_dtp_pages_kafka.py.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.static.primitive import i32

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.protocol.codec import encode_response
from aclgate.protocol.enforce.cursor import KEY_SIZE, PREFIX, CursorSeal
from aclgate.protocol.enforce.partitions import EXTRA_PAGES
from aclgate.protocol.versions import request_class, response_class, response_module
from aclgate.proxy.listen.server import ProxyServer
from tests.fixtures.proxy import RunningProxy, make_config
from tests.fixtures.rawclient import RawClient, module
from tests.fixtures.scripted_broker import ScriptedCluster, _defaults

ANON = "User:ANONYMOUS"
#: Kafka's default max.request.partition.size.limit
KAFKA_CAP = 2000

#: a Kafka page: [(topic, [partition indexes])], next cursor (topic, partition) or None
Page = tuple[list[tuple[str, list[int]]], tuple[str, int] | None]


def kafka_pages(
    partitions: Mapping[str, int],
    cursor: tuple[str, int] | None,
    limit: int,
    cap: int = KAFKA_CAP,
) -> Page:
    """DescribeTopicPartitionsRequestHandler (all topics) over the topics in `partitions`
    (name -> partition count), the ones the caller may DESCRIBE: every topic at or after the
    cursor's name, in name order; max(min(cap, limit), 1) partitions, the cursor topic from the
    cursor's partition; a topic cut at the limit gives the cursor (topic, next partition); a
    page ending with a whole topic gives (next topic, 0) when there is one."""
    start_name = cursor[0] if cursor else ""
    remaining = max(min(cap, limit), 1)
    topics: list[tuple[str, list[int]]] = []
    for name in sorted(n for n in partitions if n >= start_name):
        if remaining == 0:
            return topics, (name, 0)
        start = cursor[1] if cursor and name == cursor[0] else 0
        upper = min(partitions[name], start + remaining)
        topics.append((name, list(range(start, upper))))
        if upper < partitions[name]:
            return topics, (name, upper)
        remaining -= max(upper - start, 0)
    return topics, None


@dataclass
class Broker:
    """The scripted broker's state: the cluster's topics and its partition cap."""

    partitions: dict[str, int] = field(default_factory=dict)
    cap: int = KAFKA_CAP

    def answer(self, node: Any, header: Any, request: Any) -> bytes:
        assert not request.topics  # these tests ask for all topics only
        cursor = request.cursor
        topics, nxt = kafka_pages(
            self.partitions,
            (cursor.topic_name, cursor.partition_index) if cursor else None,
            request.response_partition_limit,
            self.cap,
        )
        mod = response_module(75, 0)
        body = _defaults(
            response_class(75, 0),
            topics=tuple(
                _defaults(
                    mod.DescribeTopicPartitionsResponseTopic,
                    name=name,
                    topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name),
                    partitions=tuple(
                        _defaults(
                            mod.DescribeTopicPartitionsResponsePartition,
                            partition_index=i32(p),
                            eligible_leader_replicas=None,
                            last_known_elr=None,
                        )
                        for p in parts
                    ),
                    topic_authorized_operations=i32(-1),
                )
                for name, parts in topics
            ),
            next_cursor=None
            if nxt is None
            else _defaults(mod.Cursor, topic_name=nxt[0], partition_index=i32(nxt[1])),
        )
        return encode_response(header.correlation_id, body)


#: hidden topics fall between, before and after the visible ones; partition counts vary
LAYOUT = {
    "a-hidden": 2,
    "b-pub": 3,
    "c-hidden": 5,
    "d-hidden": 1,
    "e-pub": 1,
    "f-pub": 4,
    "g-hidden": 7,
    "h-pub": 2,
    "i-hidden": 3,
    "j-hidden": 2,
    "k-pub": 5,
    "l-hidden": 1,
}


def _acl(name: str, pattern: PatternType, op: AclOperation, deny: bool = False) -> AclBinding:
    permission = AclPermissionType.DENY if deny else AclPermissionType.ALLOW
    return AclBinding(ResourceType.TOPIC, name, pattern, ANON, "*", op, permission)


def _describe(*names: str) -> list[AclBinding]:
    return [_acl(n, PatternType.LITERAL, AclOperation.DESCRIBE) for n in names]


#: ACL layouts: the ACLs, and which topics they let ANONYMOUS describe
PROFILES: dict[str, tuple[list[AclBinding], set[str]]] = {
    "literal": (_describe("b-pub", "f-pub", "k-pub"), {"b-pub", "f-pub", "k-pub"}),
    # READ implies DESCRIBE; a DENY beats the wildcard ALLOW
    "wildcard-deny": (
        [
            _acl("*", PatternType.LITERAL, AclOperation.READ),
            _acl("c-", PatternType.PREFIXED, AclOperation.ALL, deny=True),
            _acl("g-hidden", PatternType.LITERAL, AclOperation.DESCRIBE, deny=True),
            _acl("i-hidden", PatternType.LITERAL, AclOperation.ALL, deny=True),
            _acl("l-", PatternType.PREFIXED, AclOperation.DESCRIBE, deny=True),
        ],
        set(LAYOUT) - {"c-hidden", "g-hidden", "i-hidden", "l-hidden"},
    ),
    # prefixes, and ALTER, which implies DESCRIBE
    "prefixed": (
        [_acl(n, PatternType.PREFIXED, AclOperation.DESCRIBE) for n in ("b-", "e-", "h-")]
        + [_acl("k-pub", PatternType.LITERAL, AclOperation.ALTER)],
        {"b-pub", "e-pub", "h-pub", "k-pub"},
    ),
    "everything": ([_acl("*", PatternType.LITERAL, AclOperation.DESCRIBE)], set(LAYOUT)),
    "last-only": (_describe("k-pub"), {"k-pub"}),
    "first-only": (_describe("a-hidden"), {"a-hidden"}),
    # an ACL for somebody else only: nothing visible
    "none": (
        [
            AclBinding(
                ResourceType.TOPIC,
                "*",
                PatternType.LITERAL,
                "User:other",
                "*",
                AclOperation.ALL,
                AclPermissionType.ALLOW,
            )
        ],
        set(),
    ),
    # for the bound: the two ends of a cluster of hidden topics
    "ends": (_describe("a-pub", "z-pub"), {"a-pub", "z-pub"}),
}


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    yield Broker()


@pytest.fixture(scope="module")
def cluster(broker: Broker) -> Iterator[ScriptedCluster]:
    with ScriptedCluster([1]) as c:
        c.nodes[0].script[75] = broker.answer
        yield c


@pytest.fixture(scope="module")
def proxies(cluster: ScriptedCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    started: dict[str, RunningProxy] = {}

    def get(profile: str) -> RunningProxy:
        if profile not in started:
            path = tmp_path_factory.mktemp("acls") / f"{profile}.json"
            path.write_text(dump_acl_file(PROFILES[profile][0]))
            config = make_config(
                cluster.bootstrap, acl_file=path, allow_everyone_if_no_acl_found=False
            )
            started[profile] = RunningProxy(ProxyServer(config))
        return started[profile]

    yield get
    for p in started.values():
        p.stop()


@pytest.fixture
def reset(broker: Broker, cluster: ScriptedCluster) -> Broker:
    broker.partitions, broker.cap = dict(LAYOUT), KAFKA_CAP
    cluster.nodes[0].requests.clear()
    return broker


def dtp(limit: int, cursor: tuple[str, int] | None = None) -> Any:
    m = module(75, 0)
    return request_class(75, 0)(
        topics=(),
        response_partition_limit=i32(limit),
        cursor=None
        if cursor is None
        else m.Cursor(topic_name=cursor[0], partition_index=i32(cursor[1])),
    )


def page_of(body: Any) -> Page:
    topics = [(t.name, [p.partition_index for p in t.partitions]) for t in body.topics]
    c = body.next_cursor
    return topics, None if c is None else (c.topic_name, c.partition_index)


def walk(client: RawClient, limit: int, cursor: tuple[str, int] | None = None) -> list[Page]:
    """Every page from `cursor` on, following next cursors, as the client gets them."""
    pages: list[Page] = []
    for _ in range(100):
        pages.append(page_of(client.request(dtp(limit, cursor))))
        cursor = pages[-1][1]
        if cursor is None:
            return pages
    raise AssertionError(f"no end after 100 pages: {pages[-3:]}")


def kafka_walk(
    visible: Mapping[str, int], limit: int, cursor: tuple[str, int] | None, cap: int
) -> list[Page]:
    pages = [kafka_pages(visible, cursor, limit, cap)]
    while pages[-1][1] is not None:
        pages.append(kafka_pages(visible, pages[-1][1], limit, cap))
    return pages


def broker_requests(cluster: ScriptedCluster) -> list[Any]:
    return [r for h, r in list(cluster.nodes[0].requests) if h.api_key == 75]


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("limit", [1, 2, 3, 5, 100, 0, -1])
def test_pages_are_kafkas_for_the_topics_the_client_may_describe(
    proxies: Any, reset: Broker, profile: str, limit: int
) -> None:
    visible = {n: c for n, c in LAYOUT.items() if n in PROFILES[profile][1]}
    with RawClient(proxies(profile).bootstrap) as client:
        assert walk(client, limit) == kafka_walk(visible, limit, None, KAFKA_CAP)


@pytest.mark.parametrize(
    "cursor",
    [("c-hidden", 2), ("b-pub", 1), ("b-pub", 3), ("b-pub", 9), ("f-pub", 2), ("g", 0), ("zz", 0)],
)
@pytest.mark.parametrize("limit", [1, 2, 4])
def test_pages_from_a_client_cursor_are_kafkas(
    proxies: Any, reset: Broker, cursor: tuple[str, int], limit: int
) -> None:
    """Any cursor a client sends (a hidden topic's name, a partition past the topic's end, a
    name that is no topic) pages as Kafka does from it."""
    visible = {n: c for n, c in LAYOUT.items() if n in PROFILES["literal"][1]}
    with RawClient(proxies("literal").bootstrap) as client:
        assert walk(client, limit, cursor) == kafka_walk(visible, limit, cursor, KAFKA_CAP)


@pytest.mark.parametrize("cap", [5, 7, 12])
@pytest.mark.parametrize("limit", [2, 5, 100])
def test_the_brokers_partition_cap_limits_the_clients_pages(
    proxies: Any, reset: Broker, cluster: ScriptedCluster, cap: int, limit: int
) -> None:
    """A broker's max.request.partition.size.limit below the request's limit: Kafka's pages
    hold `cap` partitions; aclgate learns the cap from the broker's first page (a page with a
    next cursor holds exactly the capped limit) and its larger follow-up pages are capped too."""
    reset.cap = cap
    visible = {n: c for n, c in LAYOUT.items() if n in PROFILES["prefixed"][1]}
    with RawClient(proxies("prefixed").bootstrap) as client:
        assert walk(client, limit) == kafka_walk(visible, limit, None, cap)
    # every broker page asked is read at most once per client page, within the bound
    assert len(broker_requests(cluster)) <= len(kafka_walk(visible, limit, None, cap)) * (
        1 + EXTRA_PAGES
    )


def test_follow_up_pages_are_large_and_bounded(
    proxies: Any, reset: Broker, cluster: ScriptedCluster
) -> None:
    """Between the client's two visible topics lie 30,000 hidden partitions: the proxy reads at
    most 1 + EXTRA_PAGES broker pages per client request (the first with the client's limit,
    the others of 2,000 partitions), answers what it gathered with a sealed cursor where it
    stopped, and the client, paging on, gets every visible partition and never a hidden name."""
    reset.partitions = {"a-pub": 2, **{f"m-{i:03}": 100 for i in range(300)}, "z-pub": 3}
    node = cluster.nodes[0]
    pages: list[Page] = []
    asked: list[list[Any]] = []
    cursor = None
    with RawClient(proxies("ends").bootstrap) as client:
        while not pages or cursor is not None:
            node.requests.clear()
            pages.append(page_of(client.request(dtp(10, cursor))))
            asked.append(broker_requests(cluster))
            cursor = pages[-1][1]
    seen = [topic for topics, _ in pages for topic in topics]
    assert seen == [("a-pub", [0, 1]), ("z-pub", [0, 1, 2])]
    assert all(c is not None and c[0].startswith(PREFIX) and c[1] == 0 for _, c in pages[:-1])
    # no hidden name in a page (the cursors above are sealed tokens, whose base64url text may
    # hold "m-" by chance: a clean clone's CI run failed on that once, matching the repr)
    assert not any(name.startswith("m-") for topics, _ in pages for name, _ in topics)
    # 30,005 partitions: each client request reads 10 + 4 x 2,000 of them, the last 5,975
    assert [len(a) for a in asked] == [1 + EXTRA_PAGES] * 3 + [4]
    assert [r.response_partition_limit for r in asked[0]] == [10] + [2000] * EXTRA_PAGES
    # nothing visible: Kafka answers one empty page; past the bound the client pages through
    # empty pages with sealed cursors to the same end (the bounded difference)
    with RawClient(proxies("none").bootstrap) as client:
        pages = walk(client, 10)
    assert [topics for topics, _ in pages] == [[]] * 4 and pages[-1][1] is None
    reset.partitions = dict(LAYOUT)
    with RawClient(proxies("none").bootstrap) as client:
        assert walk(client, 10) == [([], None)]  # within the bound: one empty page, as Kafka's


def test_a_sealed_cursor_opens_only_in_the_proxy_that_sealed_it(
    proxies: Any, reset: Broker, cluster: ScriptedCluster
) -> None:
    """The token past the bound opens in this proxy; one altered by the client, or sealed by
    another proxy process, opens to nothing: it reaches the broker as the name it is, which
    sorts after every topic name, so the client sees no more topics and never a hidden one."""
    reset.partitions = {"a-pub": 1, **{f"m-{i:03}": 100 for i in range(120)}, "z-pub": 1}
    with RawClient(proxies("ends").bootstrap) as client:
        first = client.request(dtp(5))
        assert page_of(first)[0] == [("a-pub", [0])]
        token = first.next_cursor.topic_name
        assert token.startswith(PREFIX) and "m-" not in token
        altered = token[:-1] + ("A" if token[-1] != "A" else "B")
        foreign = CursorSeal(os.urandom(KEY_SIZE)).seal("m-100", 0)
        for other in (altered, foreign):
            cluster.nodes[0].requests.clear()
            assert page_of(client.request(dtp(5, (other, 0)))) == ([], None)
            assert [r.cursor.topic_name for r in broker_requests(cluster)] == [other]
        cluster.nodes[0].requests.clear()
        assert page_of(client.request(dtp(5, (token, 0)))) == ([("z-pub", [0])], None)
        assert not broker_requests(cluster)[0].cursor.topic_name.startswith(PREFIX)


def test_without_the_control_connection_the_clients_upstream_pages_as_before(
    proxies: Any, reset: Broker, cluster: ScriptedCluster
) -> None:
    """The cluster cannot be asked on the bulk control connection: the request goes up the
    client's own connection as it is, and its one page comes back filtered, with the
    broker's cursor sealed when it names a hidden topic (short pages, never a hidden name)."""
    node = cluster.nodes[0]

    def control_fails(node: Any, header: Any, request: Any) -> Any:
        return (
            "close" if header.client_id == "aclgate-bulk" else reset.answer(node, header, request)
        )

    node.script[75] = control_fails
    try:
        with RawClient(proxies("literal").bootstrap) as client:
            first = page_of(client.request(dtp(5)))
    finally:
        node.script[75] = reset.answer
    # the broker's page: a-hidden 0-1, b-pub 0-2, next cursor c-hidden 0
    assert first[0] == [("b-pub", [0, 1, 2])]
    assert first[1] is not None and first[1][0].startswith(PREFIX)
    clients = [h.client_id for h, _ in list(node.requests) if h.api_key == 75]
    assert clients.count("aclgate-bulk") == 2 and clients[-1] != "aclgate-bulk"
