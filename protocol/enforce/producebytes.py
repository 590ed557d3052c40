"""A Produce request of many topics read, split and answered as bytes.

Produce has no size limit of its own (record batches are large), so one request may name
tens of thousands of topics: 55,000 denied topics in 1 MiB (the Java producer's default
max.request.size) took ~1.5 s of the event loop, decoding the whole request with kio and
building each denied topic's answer as kio objects (issue 20). Here the request is walked in
place: each topic's span, its name (or id, v13) and its partitions' indexes, and whether any
partition's first batch is transactional, without reading a record. The handler decides the
names (a slice per turn: protocol/enforce/slices.py) and then

- forwards the frame as it came when every topic is allowed (a multi-topic producer's
  request is never decoded);
- forwards the allowed topics' spans, spliced into a request of their own, when some are
  denied (with acks=1 for an acks=0 request, as data.py's full path does);
- renders each denied topic's answer from one template per version and error code: the
  topic's name bytes as the request has them, then per partition its index and the
  template's fixed bytes: the bytes `build` + kio encode (tests/enforce/test_produce_bytes.py
  compares them for every version).

A request the walk does not follow (tagged fields, a null array, a non-UTF-8 name, a count
past the frame) returns None: data.py's full path reads it, and refuses what kio refuses.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Generator
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from kio.schema.errors import ErrorCode
from kio.serial.errors import SerialError
from kio.serial.readers import read_unsigned_varint

from aclgate.protocol.codec import encode_entity, frame_with_size
from aclgate.protocol.enforce.build import NAME_MARK, Aliases, build
from aclgate.protocol.enforce.fetchpeek import topic_uuid
from aclgate.protocol.enforce.slices import at_once
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import MalformedRequest, RequestHeader
from aclgate.protocol.lengths import length_prefix
from aclgate.protocol.versions import request_module, response_module

T = TypeVar("T")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_TRANSACTIONAL = 0x10
#: the first flexible version (compact lengths, tagged fields) and the first naming by id
FLEXIBLE, BY_ID = 9, 13
#: the topic id of the marked entry of a v13 answer (found nowhere else in it)
ID_MARK = uuid.UUID("a0c19a7e-0000-4000-8000-00000000beef")


class WalkedTopic(NamedTuple):
    """One topic entry of a Produce request, where it is in the frame (a tuple: one is made
    per topic of a request that may name 55,000)."""

    #: the topic's name, or (v13) its id
    key: str | uuid.UUID
    #: the entry's span; where its name (or id) ends; where its partition count ends
    start: int
    end: int
    name_end: int
    count_end: int
    #: its partitions' indexes: `WalkedProduce.index_at[first : first + partitions]`
    first: int
    partitions: int


_new_topic = tuple.__new__


@dataclass(frozen=True, slots=True)
class WalkedProduce:
    frame: Frame
    transactional_id: str | None
    acks: int
    #: where acks is, and where the topic array starts and ends
    acks_at: int
    topics_at: int
    topics_end: int
    topics: list[WalkedTopic]
    #: where each partition's index is, topic after topic
    index_at: list[int]
    #: the first batch of some partition is transactional (data.has_transactional_records)
    transactional: bool


#: topics walked, or rendered, in one turn of the event loop at most (some 5-7 ms)
TOPICS_PER_TURN = 8_192


def walking(frame: Frame, header: RequestHeader) -> Generator[None, None, WalkedProduce | None]:
    """The request's topics read in place, `TOPICS_PER_TURN` a step (slices.in_turns);
    None for a version this walk does not read. A request kio would refuse (a field past
    the end, a bad length, a non-UTF-8 name, a tagged field: Produce defines none) raises
    MalformedRequest, found as cheaply as the walk goes: decoding it to find the same took
    125 ms at 1 MiB, and Produce has no size limit of its own."""
    v = header.api_version
    if not 3 <= v <= BY_ID:
        return None
    try:
        return (yield from _walk(frame, header.body_offset, v >= FLEXIBLE, v >= BY_ID))
    # UnicodeDecodeError is a ValueError; kio's SerialError: a varint cut off by the frame's end
    except (IndexError, ValueError, struct.error, SerialError) as exc:
        raise MalformedRequest(f"cannot walk the Produce request: {exc!r}") from exc


def walk_produce(frame: Frame, header: RequestHeader) -> WalkedProduce | None:
    """`walking`, all at once."""
    return at_once(walking(frame, header))


def _length(frame: Frame, pos: int, flexible: bool, legacy: struct.Struct) -> tuple[int, int]:
    """(a length or count, -1 for null; the position after it)."""
    if flexible:
        b = frame[pos]
        if b < 0x80:
            return b - 1, pos + 1
        value, used = read_unsigned_varint(frame, pos)
        return value - 1, pos + used
    return legacy.unpack_from(frame, pos)[0], pos + legacy.size


def _walk(
    frame: Frame, pos: int, flexible: bool, by_id: bool
) -> Generator[None, None, WalkedProduce]:
    end = len(frame)
    n, pos = _length(frame, pos, flexible, _I16)  # transactional_id
    if n < -1 or pos + max(n, 0) > end:
        raise MalformedRequest(f"transactional_id: a length of {n}")
    txn = str(frame[pos : pos + n], "utf-8") if n >= 0 else None
    pos += max(n, 0)
    acks_at = pos
    (acks,) = _I16.unpack_from(frame, pos)
    pos += 6  # acks, timeout
    topics_at = pos
    count, pos = _length(frame, pos, flexible, _I32)
    if count < 0:
        raise MalformedRequest("non-nullable field topic_data was serialized as null")
    topics: list[WalkedTopic] = []
    index_at: list[int] = []
    add_topic, add_index = topics.append, index_at.append
    transactional = False
    for done in range(count):
        if done and not done % TOPICS_PER_TURN:
            yield
        start = pos
        key: str | uuid.UUID
        if by_id:
            key = topic_uuid(bytes(frame[pos : pos + 16]))
            pos += 16
        else:
            n = frame[pos] - 1 if flexible else -2
            if 0 <= n < 0x7F:  # a compact name's length in one byte: inline
                pos += 1
            else:
                n, pos = _length(frame, pos, flexible, _I16)
                if n < 0:
                    raise MalformedRequest("non-nullable field name was serialized as null")
            if pos + n > end:
                raise MalformedRequest("name: a field runs past the end of the frame")
            key = str(frame[pos : pos + n], "utf-8")
            pos += n
        name_end = pos
        partitions, pos = _length(frame, pos, flexible, _I32)
        if partitions < 0:
            raise MalformedRequest("non-nullable field partition_data was serialized as null")
        count_end = pos
        first = len(index_at)
        for _ in range(partitions):
            add_index(pos)
            size, pos = _length(frame, pos + 4, flexible, _I32)
            if size < -1 or pos + size > end:
                raise MalformedRequest(f"records: a length of {size} at {pos} of {end} bytes")
            if size >= 23 and frame[pos + 16] == 2 and frame[pos + 22] & _TRANSACTIONAL:
                transactional = True
            if size > 0:
                pos += size
            if flexible:
                if frame[pos] != 0:  # partition tagged fields: Produce defines none
                    raise MalformedRequest("unknown tagged field in a partition")
                pos += 1
        if flexible:
            if frame[pos] != 0:  # topic tagged fields
                raise MalformedRequest("unknown tagged field in a topic")
            pos += 1
        add_topic(
            _new_topic(WalkedTopic, (key, start, pos, name_end, count_end, first, partitions))
        )
    if pos > end or (flexible and frame[pos] != 0):  # cut short; request tagged fields
        raise MalformedRequest("a field runs past the end of the frame, or a tagged field")
    return WalkedProduce(frame, txn, acks, acks_at, topics_at, pos, topics, index_at, transactional)


def stripped(
    frame: Frame, header: RequestHeader, walk: WalkedProduce, kept: list[WalkedTopic], acks: int
) -> bytes:
    """The request with only the topics `kept` (their spans as they came) and `acks`."""
    flexible = header.api_version >= FLEXIBLE
    return frame_with_size(
        bytes(frame[4 : walk.acks_at])
        + _I16.pack(acks)
        + bytes(frame[walk.acks_at + 2 : walk.topics_at])
        + length_prefix(len(kept), flexible)
        + b"".join([frame[t.start : t.end] for t in kept])
        + bytes(frame[walk.topics_end :])
    )


class TopicTemplate:
    """The answer to one denied topic entry of a version, for one error code: the bytes
    around the name and the partitions, cut from the entry `build` makes for a marked topic
    of one partition."""

    __slots__ = ("marked", "partition_tail", "topic_tail")

    def __init__(self, header: RequestHeader, code: ErrorCode, aliases: Aliases) -> None:
        v = header.api_version
        flexible, by_id = v >= FLEXIBLE, v >= BY_ID
        request = request_module(header.api_key, v)
        key = {"topic_id": ID_MARK} if by_id else {"name": NAME_MARK}
        one = request.TopicProduceData(
            **key, partition_data=(request.PartitionProduceData(index=0, records=None),)
        )
        cls = response_module(header.api_key, v).TopicProduceResponse
        #: the marked entry (an answer's array holds it once: base.spliced_answer)
        self.marked = build(cls, code, one, aliases)
        encoded = encode_entity(self.marked)
        name = 16 if by_id else len(_string(NAME_MARK, flexible))
        head = name + len(length_prefix(1, flexible)) + 4  # the name, the count, the index
        tail = 1 if flexible else 0  # the topic's tagged fields
        self.partition_tail = encoded[head : len(encoded) - tail]
        self.topic_tail = encoded[len(encoded) - tail :]

    def render(
        self, walk: WalkedProduce, topics: list[WalkedTopic]
    ) -> Generator[None, None, bytes]:
        """The answer's entries for `topics` of `walk`: each name as it came, each
        partition's index; `TOPICS_PER_TURN` a step."""
        frame, index_at = walk.frame, walk.index_at
        tail, topic_tail = self.partition_tail, self.topic_tail
        out: list[bytes | memoryview] = []
        add = out.append
        for done, topic in enumerate(topics):
            if done and not done % TOPICS_PER_TURN:
                yield
            add(frame[topic.start : topic.count_end])  # the name (or id), the count
            first = topic.first
            for at in index_at[first : first + topic.partitions]:
                add(frame[at : at + 4])
                add(tail)
            add(topic_tail)
        return b"".join(out)


def _string(value: str, flexible: bool) -> bytes:
    raw = value.encode()
    return (length_prefix(len(raw), True) if flexible else _I16.pack(len(raw))) + raw


@functools.lru_cache(maxsize=64)
def template(
    api_version: int, code: ErrorCode, aliases: tuple[tuple[str, str], ...]
) -> TopicTemplate:
    """The template of a version and code (made once each)."""
    header = RequestHeader(0, api_version, 0, None, api_version >= FLEXIBLE, 0)
    return TopicTemplate(header, code, dict(aliases))
