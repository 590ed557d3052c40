"""Read what the data path decides on straight from the request bytes.

kio's decode of a Produce request builds an entity per topic and partition; timed inside a
proxy process between requests (cold caches) it and the handler around it cost ~12 µs of
the ~35 µs aclgate spends before forwarding. For the common shape, one named topic with
plain (non-transactional) batches and no tagged fields (the topic named, or by id from v13),
the few fields the decision needs are read here instead. Anything else, including whatever kio might reject, returns None and
takes the full path, so the peek never accepts a request kio would refuse nor reads it
differently.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

from kio.serial.errors import SerialError
from kio.serial.readers import read_unsigned_varint

from aclgate.protocol.enforce.fetchpeek import topic_uuid
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
#: acks, timeout, topic count, first topic name's length
_LEGACY_HEAD: Final = struct.Struct(">hiih")
_TRANSACTIONAL: Final = 0x10
#: Produce versions whose topics are named (3-12; a range test: two compares when compiled,
#: where `in range(...)` is a generic call); v13 names them by id (KIP-516)
_FIRST_NAMED: Final = 3
_BY_ID: Final = 13


def _uvarint(frame: Frame, pos: int) -> tuple[int, int]:
    """(value, position after it); one byte inline, longer ones through kio."""
    b = frame[pos]
    if b < 0x80:
        return b, pos + 1
    value, used = read_unsigned_varint(frame, pos)
    return value, pos + used


def _transactional(frame: Frame, start: int, size: int) -> bool:
    """data.has_transactional_records for one partition's records, read in place."""
    return size >= 23 and frame[start + 16] == 2 and bool(frame[start + 22] & _TRANSACTIONAL)


def peek_produce(frame: Frame, header: RequestHeader) -> tuple[int, str | uuid.UUID, int] | None:
    """(acks, topic name, partition count) of a plain single-topic Produce, else None; from
    v13 (current Java producers) the topic id in place of the name."""
    v = header.api_version
    if not _FIRST_NAMED <= v <= _BY_ID:
        return None
    try:
        if v == _BY_ID:
            return _flexible(frame, header.body_offset, by_id=True)
        if header.flexible:  # two direct calls: a chosen function is a generic call compiled
            return _flexible(frame, header.body_offset)
        return _legacy(frame, header.body_offset)
    except (IndexError, ValueError, struct.error, SerialError):  # UnicodeDecodeError too
        return None


def _legacy(frame: Frame, pos: int) -> tuple[int, str, int] | None:
    n: int
    (n,) = _I16.unpack_from(frame, pos)  # transactional_id
    if n < -1:
        return None
    pos += 2 + max(n, 0)
    acks: int
    _timeout: int
    topics: int
    name_len: int
    acks, _timeout, topics, name_len = _LEGACY_HEAD.unpack_from(frame, pos)
    pos += 12
    if topics != 1 or name_len <= 0:
        return None
    name = str(frame[pos : pos + name_len], "utf-8")
    pos += name_len
    partitions: int
    (partitions,) = _I32.unpack_from(frame, pos)
    pos += 4
    if partitions < 1:
        return None
    for _ in range(partitions):
        size: int
        (size,) = _I32.unpack_from(frame, pos + 4)  # after the partition index
        pos += 8
        if size < -1 or (size > 0 and _transactional(frame, pos, size)):
            return None
        pos += max(size, 0)
    if pos > len(frame):  # the last records run past the end
        return None
    return acks, name, partitions


def _flexible(
    frame: Frame, pos: int, by_id: bool = False
) -> tuple[int, str | uuid.UUID, int] | None:
    # Lengths and counts are unsigned varints holding value + 1 (0 = null). Apart from the
    # records' sizes they fit in one byte in the shape peeked here; a longer one (a very
    # long transactional id or name, 127+ partitions) takes the full path.
    n = frame[pos]  # transactional_id
    if n >= 0x80:
        return None
    pos += 1 + max(n - 1, 0)
    acks: int
    (acks,) = _I16.unpack_from(frame, pos)
    pos += 6  # acks, timeout
    if frame[pos] != 2:  # one topic
        return None
    pos += 1
    topic: str | uuid.UUID
    if by_id:
        topic = topic_uuid(bytes(frame[pos : pos + 16]))
        pos += 16
    else:
        name_len = frame[pos]
        if not 1 < name_len < 0x80:
            return None
        topic = str(frame[pos + 1 : pos + name_len], "utf-8")
        pos += name_len
    partitions = frame[pos] - 1
    if not 0 < partitions < 0x7F:
        return None
    pos += 1
    for _ in range(partitions):
        pos += 4  # the partition index
        size = frame[pos]  # records' length + 1 (0 = null), in one or two bytes inline
        if size < 0x80:
            pos += 1
        elif frame[pos + 1] < 0x80:
            size = (size & 0x7F) | (frame[pos + 1] << 7)
            pos += 2
        else:
            size, pos = _uvarint(frame, pos)
        size -= 1
        if size >= 23 and frame[pos + 16] == 2 and frame[pos + 22] & _TRANSACTIONAL:
            return None  # data.has_transactional_records, read in place
        pos += max(size, 0)
        if frame[pos] != 0:  # partition tagged fields
            return None
        pos += 1
    if frame[pos] != 0 or frame[pos + 1] != 0:  # topic, then request tagged fields
        return None
    return acks, topic, partitions


def peek_metadata(frame: Frame, header: RequestHeader) -> tuple[str, ...] | None:
    """The topic names of a Metadata request (v9-13) that names its topics and asks for
    nothing more (no auto-creation, no authorized operations), else None."""
    v = header.api_version
    if not 9 <= v <= 13:
        return None
    try:
        return _metadata(frame, header.body_offset, v)
    except (IndexError, ValueError, SerialError):  # UnicodeDecodeError is a ValueError
        return None


def _metadata(frame: Frame, pos: int, v: int) -> tuple[str, ...] | None:
    value, used = read_unsigned_varint(frame, pos)  # compact array: value + 1, 0 = null
    count = int(value) - 1
    if count <= 0:  # all topics, or none
        return None
    pos += used
    names: list[str] = []
    for _ in range(count):
        if v >= 10:
            # topic_id: with any non-zero id Kafka answers by ids and ignores every name
            # (v10-11 reject it): only the full path may handle that
            if any(frame[pos : pos + 16]):
                return None
            pos += 16
        n = frame[pos]  # name length + 1: null, empty and long names take the full path
        if not 1 < n < 0x80:
            return None
        names.append(str(frame[pos + 1 : pos + n], "utf-8"))
        pos += n
        if frame[pos] != 0:  # topic tagged fields
            return None
        pos += 1
    # allow_auto_topic_creation, [include_cluster_authorized_operations,]
    # include_topic_authorized_operations: all false; then no tagged fields
    flags = 3 if v <= 10 else 2
    if any(frame[pos : pos + flags]) or frame[pos + flags] != 0:
        return None
    return tuple(names)


#: a flexible ListOffsets partition: partition_index, current_leader_epoch, timestamp, tags
LIST_OFFSETS_PARTITION: Final = struct.Struct(">iiqB")


def peek_list_offsets(frame: Frame, header: RequestHeader) -> list[tuple[str, bytes]] | None:
    """(name, its partitions' bytes) of each topic of a flexible ListOffsets request (v6+,
    what clients send), read in place, every length checked against the frame; None for
    anything else (null or empty names or arrays, tagged fields, a cut-short or non-UTF-8
    request): the full path reads that one, so the peek never accepts what kio refuses."""
    if header.api_version < 6:
        return None
    try:
        return _list_offsets(
            frame, header.body_offset + 5, header.api_version
        )  # replica, isolation
    except (IndexError, ValueError, SerialError):  # UnicodeDecodeError is a ValueError
        return None


def _list_offsets(frame: Frame, pos: int, v: int) -> list[tuple[str, bytes]] | None:
    size = LIST_OFFSETS_PARTITION.size
    count, pos = _uvarint(frame, pos)  # compact array: count + 1, 0 = null
    if count <= 1:
        return None
    end = len(frame)
    topics: list[tuple[str, bytes]] = []
    for _ in range(count - 1):
        n = frame[pos]  # name length + 1: one byte inline (names under 127 bytes)
        pos += 1
        if n >= 0x80:
            n, pos = _uvarint(frame, pos - 1)
        if n <= 1 or pos + n - 1 > end:
            return None
        name = str(frame[pos : pos + n - 1], "utf-8")
        pos += n - 1
        parts = frame[pos]  # partition count + 1, likewise
        after = pos + 1
        if parts >= 0x80:
            parts, after = _uvarint(frame, pos)
        if parts == 0:
            return None
        stop = after + (parts - 1) * size
        if stop >= end:  # the topic's tagged fields follow
            return None
        shape = bytes(frame[pos:stop])
        if any(shape[after - pos + size - 1 :: size]) or frame[stop] != 0:
            return None  # partition or topic tagged fields
        topics.append((name, shape))
        pos = stop + 1
    if v >= 10:
        pos += 4  # timeout_ms
    if pos >= end or frame[pos] != 0:  # request tagged fields
        return None
    return topics


def peek_first_string(frame: Frame, header: RequestHeader) -> str | None:
    """The request's first field, a non-nullable (compact) string (the group id of JoinGroup,
    SyncGroup, Heartbeat and LeaveGroup at every version), read in place; None when it is
    null, cut short or not UTF-8 (the full path reads that request, and closes on it)."""
    pos = header.body_offset
    try:
        if header.flexible:
            n, pos = _uvarint(frame, pos)  # length + 1, 0 = null
            n -= 1
        else:
            (n,) = _I16.unpack_from(frame, pos)
            pos += 2
        if n < 0 or pos + n > len(frame):
            return None
        return str(frame[pos : pos + n], "utf-8")
    except (IndexError, ValueError, struct.error, SerialError):  # UnicodeDecodeError too
        return None


def peek_offset_fetch_groups(frame: Frame, header: RequestHeader) -> list[str] | None:
    """The group ids of an OffsetFetch v8+ request (groups batched), in order, read in place
    with every field walked and checked as kio reads it (strings UTF-8, counts within the
    frame); None for anything else (an empty group id, tagged fields, a cut-short request):
    the full path reads that one."""
    if header.api_version < 8:
        return None
    try:
        return _offset_fetch_groups(frame, header.body_offset, header.api_version)
    except (IndexError, ValueError, SerialError):  # UnicodeDecodeError is a ValueError
        return None


def _compact_string(frame: Frame, pos: int, nullable: bool) -> tuple[str | None, int]:
    """(a compact string read in place, position after it); ValueError when cut short."""
    n, pos = _uvarint(frame, pos)  # length + 1, 0 = null
    if n == 0:
        if not nullable:
            raise ValueError("null string")
        return None, pos
    stop = pos + n - 1
    if stop > len(frame):
        raise ValueError("string past the end")
    return str(frame[pos:stop], "utf-8"), stop


def _offset_fetch_groups(frame: Frame, pos: int, v: int) -> list[str] | None:
    count, pos = _uvarint(frame, pos)  # compact array: count + 1, 0 = null
    if count <= 1:
        return None
    end = len(frame)
    groups: list[str] = []
    member = v >= 9
    for _ in range(count - 1):
        n = frame[pos]  # group id length + 1: one byte inline (ids under 127 bytes)
        if n >= 0x80:
            group_id, pos = _compact_string(frame, pos, False)
        else:
            stop = pos + n
            if n <= 1 or stop > end:
                return None  # empty or null: the full path reads it
            group_id = str(frame[pos + 1 : stop], "utf-8")
            pos = stop
        if not group_id:
            return None
        if member:
            if frame[pos] == 0:  # member_id null: what clients outside a group send
                pos += 5  # and member_epoch
            else:
                _member, pos = _compact_string(frame, pos, True)
                pos += 4  # member_epoch
        topics = frame[pos]  # 0 = null (every partition)
        if topics >= 0x80:
            topics, pos = _uvarint(frame, pos)
        else:
            pos += 1
        for _ in range(topics - 1):
            if v >= 10:
                pos += 16  # topic_id
            else:
                _name, pos = _compact_string(frame, pos, False)
            partitions, pos = _uvarint(frame, pos)
            if partitions == 0:
                return None  # a null partition list: kio refuses it
            pos += (partitions - 1) * 4
            if pos >= end or frame[pos] != 0:  # the topic's tagged fields
                return None
            pos += 1
        if pos >= end or frame[pos] != 0:  # the group's tagged fields
            return None
        pos += 1
        groups.append(group_id)
    if pos + 1 >= end or frame[pos] > 1 or frame[pos + 1] != 0:  # require_stable, tags
        return None
    return groups
