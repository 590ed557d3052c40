"""Read what the Fetch handler decides on straight from the request bytes.

kio's decode of a Fetch request builds an entity per topic and partition and, inside a proxy
process between requests, was the larger part of aclgate's cost on a Fetch (the handler then
reads only topic keys, partition indexes and the session fields). For a consumer's fetch
(no replica id, no tagged fields anywhere: what Java and librdkafka consumers send) those
fields are read here, every field of the schema walked by offsets and checked to lie inside
the frame, strings checked to be UTF-8, as kio reads them. Anything else (a follower fetch, a
tagged field, a null where the schema has none, a varint too long, bytes that run out)
returns None and takes the full path, so the peek never accepts a request kio would refuse,
and the handler decodes with kio only to strip or answer a denial.

The result has the field names of kio's entities that the handler reads (`topics` with
`topic` up to v12 or `topic_id` from v13, `partitions` with `partition`, `session_id`,
`session_epoch`, `forgotten_topics_data`), plus each topic's position in the request, so the
handler's decisions are the same code on both.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final, NamedTuple

from kio.serial.errors import SerialError
from kio.serial.readers import read_unsigned_varint

from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_II: Final = struct.Struct(">ii")
#: a Fetch request up to the topics, after the replica id: max wait, min bytes, max bytes,
#: isolation level (v4+: every version the proxy serves)
_FIXED: Final = 13
_ZERO_ID: Final = bytes(16)
_PEEK_ERRORS: Final = (IndexError, ValueError, struct.error, SerialError)


_tuple_new: Final = tuple.__new__


class PeekedPartition(NamedTuple):
    """A partition of a peeked Fetch topic (kio's FetchPartition: only its index is read)."""

    partition: int


class NamedFetchTopic:
    """A topic of a Fetch v4-12 request: its name and partitions."""

    __slots__ = ("index", "partitions", "topic")

    def __init__(self, index: int, topic: str, partitions: tuple[PeekedPartition, ...]):
        #: its position in the request's topics
        self.index = index
        self.topic = topic
        self.partitions = partitions


class IdFetchTopic:
    """A topic of a Fetch v13+ request, by topic id."""

    __slots__ = ("index", "partitions", "topic_id")

    def __init__(self, index: int, topic_id: uuid.UUID, partitions: tuple[PeekedPartition, ...]):
        self.index = index
        self.topic_id = topic_id
        self.partitions = partitions


class NamedForgotten:
    """A forgotten topic of a Fetch v7-12 request: its name and partition indexes."""

    __slots__ = ("partitions", "topic")

    def __init__(self, topic: str, partitions: tuple[int, ...]):
        self.topic = topic
        self.partitions = partitions


class IdForgotten:
    """A forgotten topic of a Fetch v13+ request, by topic id."""

    __slots__ = ("partitions", "topic_id")

    def __init__(self, topic_id: uuid.UUID, partitions: tuple[int, ...]):
        self.topic_id = topic_id
        self.partitions = partitions


class PeekedFetch:
    """What the Fetch handler reads of a consumer's Fetch request."""

    __slots__ = ("forgotten_topics_data", "names", "session_epoch", "session_id", "topics")

    #: only consumers' fetches are peeked
    replica_id = -1
    replica_state = None

    def __init__(
        self,
        session_id: int,
        session_epoch: int,
        topics: tuple[NamedFetchTopic | IdFetchTopic, ...],
        forgotten: tuple[NamedForgotten | IdForgotten, ...],
    ):
        self.session_id = session_id
        self.session_epoch = session_epoch
        self.topics = topics
        self.forgotten_topics_data = forgotten
        #: each topic's name, when the handler found them all before `handle` (names as
        #: given, ids known to the topic id cache): read once, not looked up again
        self.names: list[str | None] | None = None


#: topic ids repeat on every fetch of a consumer: one UUID object per id's bytes
_UUIDS: Final[dict[bytes, uuid.UUID]] = {}


def topic_uuid(raw: bytes) -> uuid.UUID:
    """The UUID of 16 bytes, made once per distinct id (uuid.UUID() runs Python code)."""
    found = _UUIDS.get(raw)
    if found is None:
        if len(raw) != 16:
            raise ValueError("a topic id shorter than 16 bytes")
        if len(_UUIDS) >= 65536:
            _UUIDS.clear()
        found = _UUIDS[raw] = uuid.UUID(bytes=raw)
    return found


class _Reader:
    """Counts and strings of one version's encoding (compact from v12)."""

    __slots__ = ("flexible",)

    def __init__(self, flexible: bool):
        self.flexible = flexible

    def count(self, frame: Frame, pos: int) -> tuple[int, int]:
        """(array length, position after it); a null array raises ValueError (none of the
        Fetch request's arrays is nullable)."""
        if self.flexible:
            b = frame[pos]
            if b < 0x80:
                n, pos = b, pos + 1
            else:
                n, used = read_unsigned_varint(frame, pos)
                pos += used
            if n == 0:
                raise ValueError("null array")
            return n - 1, pos
        (n,) = _I32.unpack_from(frame, pos)
        if n < 0:
            raise ValueError("null array")
        return n, pos + 4

    def string(self, frame: Frame, pos: int) -> tuple[str, int]:
        """(text, position after it); null raises ValueError (non-nullable here)."""
        if self.flexible:
            b = frame[pos]
            if b < 0x80:
                n, pos = b - 1, pos + 1
            else:
                n, used = read_unsigned_varint(frame, pos)
                n, pos = n - 1, pos + used
        else:
            (n,) = _I16.unpack_from(frame, pos)
            pos += 2
        if n < 0:
            raise ValueError("null string")
        end = pos + n
        if end > len(frame):
            raise IndexError("string runs past the end")
        return str(frame[pos:end], "utf-8"), end

    def no_tags(self, frame: Frame, pos: int) -> int:
        """Past an empty tagged-field section (flexible versions); any tag raises ValueError."""
        if not self.flexible:
            return pos
        if frame[pos] != 0:
            raise ValueError("tagged fields")
        return pos + 1


_READERS: Final = {False: _Reader(False), True: _Reader(True)}


class _Layout(NamedTuple):
    """Per version: the bytes of each partition entry after its index, and which fields
    exist."""

    replica_id: bool  # v4-14: a replica id field (v15+: a tagged field)
    sessions: bool  # v7+: session id and epoch, forgotten topics
    by_id: bool  # v13+: topics by id
    partition_rest: int  # current leader epoch, fetch offset, last fetched epoch, ...
    rack: bool  # v11+: rack id
    flexible: bool  # v12+


def _layout(v: int) -> _Layout:
    rest = (4 if v >= 9 else 0) + 8 + (4 if v >= 12 else 0) + (8 if v >= 5 else 0) + 4
    return _Layout(v <= 14, v >= 7, v >= 13, rest, v >= 11, v >= 12)


LAYOUTS: Final = {v: _layout(v) for v in range(4, 19)}


def peek_fetch(frame: Frame, header: RequestHeader) -> PeekedFetch | None:
    """The topics, partitions and session fields of a consumer's Fetch request (v4-18)
    without tagged fields, else None (the full path decodes it)."""
    layout = LAYOUTS.get(header.api_version)
    if layout is None:
        return None
    try:
        return _peek(frame, header.body_offset, layout)
    except _PEEK_ERRORS:  # UnicodeDecodeError is a ValueError
        return None


def _peek(frame: Frame, pos: int, layout: _Layout) -> PeekedFetch | None:
    read = _READERS[layout.flexible]
    if layout.replica_id:
        replica: int
        (replica,) = _I32.unpack_from(frame, pos)
        if replica >= 0:  # a follower: authorized on the cluster, by the full path
            return None
        pos += 4
    pos += _FIXED
    session_id, epoch = 0, -1
    if layout.sessions:
        session_id, epoch = _II.unpack_from(frame, pos)
        pos += 8
    by_id, rest = layout.by_id, layout.partition_rest
    count, pos = read.count(frame, pos)
    topics: list[NamedFetchTopic | IdFetchTopic] = []
    for i in range(count):
        key, pos = _key(frame, pos, by_id, read)
        n, pos = read.count(frame, pos)
        partitions: list[PeekedPartition] = []
        for _ in range(n):
            partition: int
            (partition,) = _I32.unpack_from(frame, pos)
            pos = read.no_tags(frame, pos + 4 + rest)
            # tuple.__new__ directly: compiled, a NamedTuple's own __new__ is a Python frame
            partitions.append(_tuple_new(PeekedPartition, (partition,)))
        pos = read.no_tags(frame, pos)
        parts = tuple(partitions)
        topics.append(
            IdFetchTopic(i, key, parts)
            if isinstance(key, uuid.UUID)
            else NamedFetchTopic(i, key, parts)
        )
    forgotten: list[NamedForgotten | IdForgotten] = []
    if layout.sessions:
        count, pos = read.count(frame, pos)
        for _ in range(count):
            key, pos = _key(frame, pos, by_id, read)
            n, pos = read.count(frame, pos)
            if pos + 4 * n > len(frame):
                return None
            indexes = struct.unpack_from(f">{n}i", frame, pos)
            pos = read.no_tags(frame, pos + 4 * n)
            forgotten.append(
                IdForgotten(key, indexes)
                if isinstance(key, uuid.UUID)
                else NamedForgotten(key, indexes)
            )
    if layout.rack:
        _rack, pos = read.string(frame, pos)
    pos = read.no_tags(frame, pos)
    if pos > len(frame):
        return None
    return PeekedFetch(session_id, epoch, tuple(topics), tuple(forgotten))


def _key(frame: Frame, pos: int, by_id: bool, read: _Reader) -> tuple[str | uuid.UUID, int]:
    if by_id:
        raw = bytes(frame[pos : pos + 16])
        if raw == _ZERO_ID:  # kio reads the zero id as null: the full path decides it
            raise ValueError("zero topic id")
        return topic_uuid(raw), pos + 16
    return read.string(frame, pos)
