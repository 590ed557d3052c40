"""Topic ids -> names, for the requests that name topics only by id.

Fetch v13+, Produce v13, OffsetCommit/OffsetFetch v10 and DeleteTopics v6+ carry topic ids.
ACLs are on names, so ids are resolved through a cache fed by every response that pairs them
(Metadata v10+, CreateTopics v7+, DescribeTopicPartitions). On a miss the handler raises
NeedTopicIds: the request is parked, the proxy asks upstream on its own control connection,
and the request is handled again; an id still unknown then is answered as Kafka does
(UNKNOWN_TOPIC_ID), never forwarded. Topic ids are never reused and topics are never
renamed, so a cached pair can never grant access to another topic.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import TypeVar

ZERO = uuid.UUID(int=0)
#: a topic id as a request names it: kio reads the zero id as None (which names no topic),
#: a request read in place keeps the UUID
TopicId = TypeVar("TopicId", uuid.UUID, uuid.UUID | None)


class NeedTopicIds(Exception):
    def __init__(self, ids: Iterable[uuid.UUID]):
        self.ids = frozenset(ids)
        super().__init__(f"{len(self.ids)} unknown topic id(s)")


class TopicIdCache:
    """One per upstream cluster, shared by all connections. Keyed by the id's 128-bit integer:
    `uuid.UUID.__hash__` is Python code, an int's hash is not (a lookup on every Fetch and
    Produce by topic id)."""

    def __init__(self, limit: int = 1_000_000):
        self._names: dict[int, str] = {}
        self.limit = limit

    def learn(self, topic_id: uuid.UUID | None, name: str | None) -> None:
        if topic_id is None or not name:
            return
        key = topic_id.int
        if self._names.get(key) == name or key == 0:  # known already; ZERO names nothing
            return
        if len(self._names) >= self.limit and key not in self._names:
            self._names.pop(next(iter(self._names)))
        self._names[key] = name

    def name(self, topic_id: uuid.UUID) -> str | None:
        return self._names.get(topic_id.int)

    def clear(self) -> None:
        self._names.clear()

    def __len__(self) -> int:
        return len(self._names)


def resolve(
    cache: TopicIdCache,
    looked_up: frozenset[uuid.UUID],
    ids: Iterable[TopicId],
    found: Mapping[uuid.UUID, str] | None = None,
) -> dict[TopicId, str | None]:
    """Names for `ids` (None: unknown to the cluster), from what the lookup made for this
    request found, then the cache. Every id of a request is looked up before its handler
    runs (`unknown_ids`, ApiHandler.dispatch): a miss not looked up is a bug of ours, raised
    as NeedTopicIds (the connection is closed, nothing forwarded)."""
    out: dict[TopicId, str | None] = {}
    missing = set()
    for topic_id in ids:
        name: str | None = None  # kio reads the zero id as None: it names no topic
        if topic_id is not None:
            name = found.get(topic_id) if found else None
            if name is None:
                name = cache.name(topic_id)
            # the zero id (read in place, not by kio) names no topic either: unknown, as
            # Kafka answers it; compared by its int only when the cache misses (UUID == is
            # Python code)
            if name is None and topic_id not in looked_up and topic_id.int != 0:
                missing.add(topic_id)
        out[topic_id] = name
    if missing:
        raise NeedTopicIds(missing)
    return out


def unknown_ids(cache: TopicIdCache, ids: Iterable[uuid.UUID | None]) -> frozenset[uuid.UUID]:
    """The ids among `ids` the cache cannot name (ZERO and None name nothing)."""
    # UUID's == is Python code: ZERO is compared only with the (rare) ids the cache lacks
    return frozenset(i for i in ids if i is not None and cache.name(i) is None and i != ZERO)


def ids_at(request: object, paths: Iterable[tuple[str, ...]]) -> list[uuid.UUID | None]:
    """The `topic_id` of every entry at each path of arrays (("topics",), ("groups",
    "topics"), ...) of a decoded request: the ids its handler will resolve."""
    out: list[uuid.UUID | None] = []
    for path in paths:
        level: list[object] = [request]
        for field in path:
            level = [e for parent in level for e in (getattr(parent, field, None) or ())]
        out.extend(getattr(e, "topic_id", None) for e in level)
    return out
