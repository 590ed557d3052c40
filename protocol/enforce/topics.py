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
from collections.abc import Iterable

ZERO = uuid.UUID(int=0)


class NeedTopicIds(Exception):
    def __init__(self, ids: Iterable[uuid.UUID]):
        self.ids = frozenset(ids)
        super().__init__(f"{len(self.ids)} unknown topic id(s)")


class TopicIdCache:
    """One per upstream cluster, shared by all connections."""

    def __init__(self, limit: int = 1_000_000):
        self._names: dict[uuid.UUID, str] = {}
        self.limit = limit

    def learn(self, topic_id: uuid.UUID | None, name: str | None) -> None:
        if topic_id is None or not name or self._names.get(topic_id) == name:
            return  # the common case: already known
        if topic_id == ZERO:
            return
        if len(self._names) >= self.limit and topic_id not in self._names:
            self._names.pop(next(iter(self._names)))
        self._names[topic_id] = name

    def name(self, topic_id: uuid.UUID) -> str | None:
        return self._names.get(topic_id)

    def __len__(self) -> int:
        return len(self._names)


def resolve(
    cache: TopicIdCache, looked_up: frozenset[uuid.UUID], ids: Iterable[uuid.UUID]
) -> dict[uuid.UUID, str | None]:
    """Names for `ids`; raises NeedTopicIds for misses not already looked up upstream."""
    out: dict[uuid.UUID, str | None] = {}
    missing = set()
    for topic_id in ids:
        name = cache.name(topic_id)
        if name is None and topic_id not in looked_up:
            missing.add(topic_id)
        out[topic_id] = name
    if missing:
        raise NeedTopicIds(missing)
    return out
