"""ListOffsets: a request whose topics are all denied is answered from its peeked bytes.

A lag exporter asks one broker for the end offsets of every partition it leads, so a
ListOffsets can be large (its limit is 256 KiB, table.py `OTHER_LIMITS`); an all-denied one of
1 MiB (some 35,000 topics) cost ~110 ms in kio's decode and ~47 ms in protocol/arrays.py's
check before any topic was authorized (issue 20). Its topics are read in place instead (peek.py `peek_list_offsets`), each distinct name is
decided once, and when none is allowed the answer is rendered as bytes, one `NamedEntry` per
partitions shape: the bytes the decoding path builds. Otherwise the request is decoded and
handled as before, with the decisions already made.
"""

from __future__ import annotations

import datetime
from typing import Any

from aclgate.protocol.codec import decode_request
from aclgate.protocol.enforce.base import DENIED_CODE, KioBody, PerEntry
from aclgate.protocol.enforce.build import NAME_MARK, NamedEntry
from aclgate.protocol.enforce.context import NotReady
from aclgate.protocol.enforce.peek import LIST_OFFSETS_PARTITION, _uvarint, peek_list_offsets
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.session import ProxySession
from aclgate.protocol.versions import request_class, request_module


class ListOffsetsHandler(PerEntry):
    """`PerEntry` over `topics`, deciding from the peeked names first."""

    def __call__(self, session: ProxySession, header: RequestHeader, frame: Frame) -> None:
        topics = peek_list_offsets(frame, header)
        if topics is None:
            return super().__call__(session, header, frame)
        ctx = session.context
        counts: dict[str, int] = {}
        for name, _shape in topics:
            counts[name] = counts.get(name, 0) + 1
        try:
            self.decide_names(
                session,
                ctx,
                header,
                counts,
                lambda verdict: self._decided(session, header, frame, topics, verdict),
            )
        except NotReady:  # raised by the first check, before anything was recorded
            return super().__call__(session, header, frame)

    def _decided(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        topics: list[tuple[str, bytes]],
        verdict: dict[str, bool],
    ) -> None:
        if not any(verdict.values()):
            session.respond(header, self._all_denied(header, topics))
            return
        request = decode_request(frame, header)
        entries = request.topics
        allowed = [e for e in entries if verdict[e.name]]
        denied = [e for e in entries if not verdict[e.name]]
        self.finish(session, header, frame, request, allowed, denied)

    def _all_denied(self, header: RequestHeader, topics: list[tuple[str, bytes]]) -> bytes:
        """The answer `finish` gives a request whose `topics` are all denied, as bytes."""
        mod = request_module(header.api_key, header.api_version)
        code = DENIED_CODE[self.resource_type]
        shapes: dict[bytes, NamedEntry] = {}
        marked: KioBody | None = None
        items: list[bytes] = []
        for name, shape in topics:
            template = shapes.get(shape)
            if template is None:
                mark = mod.ListOffsetsTopic(name=NAME_MARK, partitions=_partitions(mod, shape))
                marked = self.error_entry(header, mark, code)
                template = shapes[shape] = NamedEntry(marked)
            items.append(template.render(name))
        assert marked is not None, "a peeked request names at least one topic"
        fields: dict[str, Any] = {"replica_id": -1, "isolation_level": 0, "topics": ()}
        if header.api_version >= 10:
            fields["timeout"] = datetime.timedelta(0)
        empty = request_class(header.api_key, header.api_version)(**fields)
        return self.all_denied(header, empty, marked, len(topics), b"".join(items))


def _partitions(mod: Any, shape: bytes) -> tuple[KioBody, ...]:
    """The request partitions of a peeked topic: its partition count, then the partitions."""
    _count, at = _uvarint(shape, 0)
    return tuple(
        mod.ListOffsetsPartition(partition_index=p, current_leader_epoch=e, timestamp=t)
        for p, e, t, _tags in LIST_OFFSETS_PARTITION.iter_unpack(shape[at:])
    )
