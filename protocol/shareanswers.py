"""Node endpoints in ShareFetch and ShareAcknowledge answers, found by offsets.

Both answers (KIP-932) end with `node_endpoints`, a plain (untagged) array of the current
leaders' real host and port for partitions that failed with NOT_LEADER_OR_FOLLOWER; the
top-level tagged fields follow it. The array is found by walking the answer's structure with
offsets (protocol.answerwalk ops: fixed fields skipped by size, strings and record sets by
length, never decoded). It is empty in the common case, and then the frame goes back as it
came; otherwise only the array is decoded, mapped to proxy addresses (leaders the proxy has
no port for are left out, as in Metadata) and spliced back.
"""

from __future__ import annotations

import struct

from aclgate.protocol.addresses import (
    BrokerDirectory,
    advertised_endpoints,
    encode_endpoints,
)
from aclgate.protocol.answerwalk import ARRAY, BLOB, SKIP, TAGS, Op, tail_offset

SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79
_SIZE = struct.Struct(">i")

_LEADER: tuple[Op, ...] = ((SKIP, 8), (TAGS,))  # current leader: id, epoch, tags


def _share_fetch() -> tuple[Op, ...]:
    partition = (
        (SKIP, 6),  # index, error code
        (BLOB,),  # error message
        (SKIP, 2),  # acknowledge error code
        (BLOB,),  # acknowledge error message
        *_LEADER,
        (BLOB,),  # records: skipped by their length, never read
        (ARRAY, ((SKIP, 18), (TAGS,))),  # acquired records
        (TAGS,),
    )
    return (
        (TAGS,),  # response header
        (SKIP, 6),  # throttle, error code
        (BLOB,),  # error message
        (SKIP, 4),  # acquisition lock timeout (v1+)
        (ARRAY, ((SKIP, 16), (ARRAY, partition), (TAGS,))),
    )


def _share_acknowledge(version: int) -> tuple[Op, ...]:
    partition = ((SKIP, 6), (BLOB,), *_LEADER, (TAGS,))
    return (
        (TAGS,),
        (SKIP, 6),
        (BLOB,),
        *(((SKIP, 4),) if version >= 2 else ()),  # acquisition lock timeout (v2+)
        (ARRAY, ((SKIP, 16), (ARRAY, partition), (TAGS,))),
    )


#: (api_key, api_version) -> the answer's structure up to its node_endpoints array
BEFORE_ENDPOINTS: dict[tuple[int, int], tuple[Op, ...]] = {
    (SHARE_FETCH, 1): _share_fetch(),
    (SHARE_FETCH, 2): _share_fetch(),
    (SHARE_ACKNOWLEDGE, 1): _share_acknowledge(1),
    (SHARE_ACKNOWLEDGE, 2): _share_acknowledge(2),
}
_ENDPOINT: Op = (ARRAY, ((SKIP, 4), (BLOB,), (SKIP, 4), (BLOB,), (TAGS,)))


def rewrite_share_endpoints(
    frame: bytes | memoryview, api_key: int, api_version: int, directory: BrokerDirectory
) -> bytes | memoryview:
    """The answer with proxy addresses in its node_endpoints (untouched when it has none)."""
    start = tail_offset(BEFORE_ENDPOINTS[api_key, api_version], frame)
    if frame[start] == 1:  # an empty compact array: the common case
        return frame
    end = tail_offset(BEFORE_ENDPOINTS[api_key, api_version] + (_ENDPOINT,), frame)
    view = memoryview(frame)
    mapped = advertised_endpoints(view[start:end], api_key, api_version, directory)
    payload = b"".join((view[4:start], encode_endpoints(mapped, api_key, api_version), view[end:]))
    return _SIZE.pack(len(payload)) + payload
