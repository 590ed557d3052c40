"""KIP-227 fetch sessions kept: what each session of a connection holds, as authorized.

A broker keeps an incremental fetch session's partitions and re-authorizes them on every
fetch, but only against its own ACLs. So the proxy keeps, per client connection, the
partitions it let into each session (`Held`), authorizes every partition a request adds, and
re-authorizes what a session holds whenever the ACL snapshot has changed since it last did.
A session holding a partition the principal may no longer read is ended the way a broker
ends one (docs/design.md, "Fetch sessions").

Session ids come from the broker's answer to the request that opened the session, read from
the answer's first bytes as it goes by (`SessionAnswer`), so the answer is still streamed.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from aclgate.protocol.codec import MalformedResponse
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import MalformedRequest, RequestHeader, skip_tagged_fields
from aclgate.protocol.session import (
    UNBOUNDED,
    ProxySession,
    ResponseRewriter,
    ResponseStream,
    Slot,
)

#: session epochs with a meaning (KIP-227): open a session / fetch without one (or close it)
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
_ERROR_SESSION: Final = struct.Struct(">hi")

#: how a Fetch request names a topic: by name up to v12, by id from v13 (null in kio's class)
TopicKey = str | uuid.UUID | None


class _FetchPartition(Protocol):
    @property
    def partition(self) -> int: ...


class FetchTopic(Protocol):
    """A topic of a Fetch request of any version; its key (`topic` or `topic_id`, by
    version) is read by the field name the handler gives."""

    @property
    def partitions(self) -> Sequence[_FetchPartition]: ...


class ForgottenTopic(Protocol):
    """A forgotten topic of a Fetch v7+ request; keyed as `FetchTopic`."""

    @property
    def partitions(self) -> Sequence[int]: ...


@dataclass
class Held:
    """One session's partitions as the proxy authorized them."""

    #: topic key in the request (name, or id from Fetch v13) -> (name, partitions)
    topics: dict[TopicKey, tuple[str, set[int]]] = field(default_factory=dict)
    #: the ACL snapshot version they were last authorized under
    version: int = 0

    def add(self, entries: Iterable[FetchTopic], names: Iterable[str | None], key: str) -> None:
        for entry, name in zip(entries, names, strict=True):
            held = self.topics.setdefault(getattr(entry, key), (name or "", set()))
            held[1].update(int(p.partition) for p in entry.partitions)

    def forget(self, entries: Iterable[ForgottenTopic], key: str) -> None:
        for entry in entries:
            topic = getattr(entry, key)
            held = self.topics.get(topic)
            if held is not None:
                held[1].difference_update(int(p) for p in entry.partitions)
                if not held[1]:
                    del self.topics[topic]


#: sessions remembered per connection (a client keeps one per broker connection); past it the
#: oldest is forgotten, and a request naming it is fetched sessionless: safe, only slower
MAX_SESSIONS: Final = 8


class FetchSessions:
    """Per client connection: broker session id -> what the proxy let into it. Only sessions
    opened on this connection are known; any other id is treated as no session, so one
    client can never read, close or extend another's session."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held: dict[int, Held] = {}

    def bind(self, session_id: int, held: Held) -> None:
        """A session the broker opened for a request the proxy authorized."""
        self.held.pop(session_id, None)
        while len(self.held) >= MAX_SESSIONS:
            del self.held[next(iter(self.held))]
        self.held[session_id] = held


def sessions_of(session: ProxySession) -> FetchSessions:
    return session.owned(FetchSessions)


def answer_head(body: bytes | bytearray | memoryview, flexible: bool) -> tuple[int, int] | None:
    """(error_code, session_id) of a Fetch v7+ answer from the bytes after its correlation
    id; None if they have not all arrived yet."""
    pos = 0
    if flexible:  # the response header's tagged fields (a zero count, in practice)
        if not body:
            return None
        if body[0] != 0:
            try:
                pos = skip_tagged_fields(bytes(body), 0)
            except (MalformedRequest, IndexError):
                if len(body) < 64:
                    return None
                raise MalformedResponse("bad Fetch answer header") from None
        else:
            pos = 1
    if len(body) < pos + 10:
        return None
    return _ERROR_SESSION.unpack_from(body, pos + 4)  # after throttle_time_ms


class SessionAnswer:
    """Reads the error code and session id of a Fetch answer as it goes by, then hands them
    to `done`; the answer itself is relayed untouched (or by `inner`, the address rewrite
    the version needs). Streams: only the first bytes are looked at."""

    __slots__ = ("done", "flexible", "inner")

    def __init__(
        self, inner: ResponseRewriter | None, flexible: bool, done: Callable[[int, int], None]
    ):
        self.inner = inner
        self.flexible = flexible
        #: called once with (error_code, session_id)
        self.done = done

    def __call__(self, session: ProxySession, slot: Slot, frame: Frame) -> bytes | memoryview:
        head = answer_head(memoryview(frame)[8:], self.flexible)
        if head is None:
            raise MalformedResponse("a Fetch answer shorter than its header")
        self.done(*head)
        return self.inner(session, slot, frame) if self.inner is not None else frame

    def stream(self, session: ProxySession, slot: Slot, length: int) -> ResponseStream:
        inner = getattr(self.inner, "stream", None)
        return _HeadStream(self, inner(session, slot, length) if inner is not None else None)


class _HeadStream:
    __slots__ = ("_answer", "_inner", "_seen")

    def __init__(self, answer: SessionAnswer, inner: ResponseStream | None):
        self._answer = answer
        self._inner = inner
        self._seen: bytearray | None = bytearray()

    def feed(self, piece: memoryview) -> memoryview:
        seen = self._seen
        if seen is not None:
            seen += piece[:64]
            head = answer_head(seen, self._answer.flexible)
            if head is not None:
                self._seen = None
                self._answer.done(*head)
            elif len(seen) >= 64:
                raise MalformedResponse("bad Fetch answer header")
        return self._inner.feed(piece) if self._inner is not None else piece

    def finish(self) -> bytes | memoryview:
        if self._seen is not None:
            raise MalformedResponse("a Fetch answer shorter than its header")
        return self._inner.finish() if self._inner is not None else b""

    def opaque_ahead(self) -> int:
        if self._seen is not None:  # the head is read first
            return 0
        return self._inner.opaque_ahead() if self._inner is not None else UNBOUNDED

    def skip(self, n: int) -> None:
        if self._inner is not None:
            self._inner.skip(n)


def flexible(header: RequestHeader) -> bool:
    return header.api_version >= 12
