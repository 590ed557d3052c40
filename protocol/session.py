"""One client connection's protocol engine, sans-IO.

The IO layer feeds it the bytes read from the client and from the upstream broker; it calls
back `SessionIO` to write, close and pause. Its jobs:

* cut requests into frames and dispatch each by API key to a handler (forward as is, forward
  with a response rewrite, answer locally, or close);
* keep responses in request order: a FIFO of slots, one per request that expects a response.
  Local answers fill their slot at once but are written only when every earlier slot has been
  written, so they never overtake responses still on their way from the broker;
* stream pass-through responses to the client chunk by chunk (a 50 MB fetch response is never
  held in memory) and buffer only responses that must be rewritten;
* bound the requests in flight: past `max_in_flight` further frames wait in a backlog and the
  client's reads are paused until responses drain;
* bound the answers owed to a client that does not read them: while the IO layer reports the
  client's write buffer full (`client_writable(False)`), further frames wait in the backlog
  too, so answers the proxy makes itself (ApiVersions before SASL, denials) cannot pile up;
* let a request wait for the IO layer (protocol/effects.py): `wait(effect, then)` hands a
  typed effect to `SessionIO.perform(token, effect)` and holds the requests behind it; the IO
  layer answers `resume(token, result)` and `then(result)` continues with the request's own
  state. `answer_later` does the same for an answer whose place in the order is already kept.
"""

from __future__ import annotations

import itertools
import struct
import sys
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar, cast

from aclgate.protocol.addresses import AnswerCache, BrokerArrayCache, BrokerDirectory
from aclgate.protocol.codec import MalformedResponse
from aclgate.protocol.effects import NO_RESUME, Effect, Notification, Wait, Waits
from aclgate.protocol.framing import DEFAULT_MAX_FRAME, Frame, FrameSplitter, FrameTooLarge
from aclgate.protocol.header import (
    MalformedRequest,
    RequestHeader,
    UnknownApi,
    parse_request_header,
)

_SIZE_CORR: Final = struct.Struct(">ii")
_SIZE: Final = struct.Struct(">i")
T = TypeVar("T")
R = TypeVar("R")
Owned = TypeVar("Owned")

if TYPE_CHECKING:  # only for annotations: both import this module
    from aclgate.protocol.enforce.context import AuthContext
#: answers collected from one read before they are written (and the write buffer checked)
_OUTPUT_BATCH: Final = 16

#: rewrites a complete framed response; returns the framed bytes to send to the client
ResponseRewriter = Callable[["ProxySession", "Slot", Frame], bytes | memoryview]


class ResponseStream(Protocol):
    """Relays one answer as it streams in while keeping back the part it may rewrite."""

    def feed(self, piece: memoryview) -> memoryview:
        """The part of `piece` that may be relayed now (the rest is kept)."""

    def finish(self) -> bytes | memoryview:
        """What was kept, rewritten if needed, once the whole answer has been fed."""

    def opaque_ahead(self) -> int:
        """How many of the next bytes the stream would relay without looking at them (a
        record set it skips by its length): `skip`ped rather than fed, they may be moved by
        the IO layer without entering Python (`ProxySession.opaque_ahead`)."""

    def skip(self, n: int) -> None:
        """The next `n` bytes (at most `opaque_ahead()`) went by unseen."""


#: `ResponseStream.opaque_ahead` of a stream that would relay everything it has not seen
UNBOUNDED: Final = sys.maxsize


class StreamedRewrite(Protocol):
    """A rewrite of a whole answer that can also run on an answer streamed through: the
    answer's size is relayed first, so `stream` must keep the length (KIP-951 endpoints)."""

    def __call__(self, session: ProxySession, slot: Slot, frame: Frame) -> bytes | memoryview: ...

    def stream(self, session: ProxySession, slot: Slot, length: int) -> ResponseStream:
        """A stream for the `length` bytes after the answer's size and correlation id."""


#: handles one request frame on behalf of the session
RequestHandler = Callable[["ProxySession", RequestHeader, Frame], None]


class SessionIO(Protocol):
    """What the IO layer provides to a session."""

    def write_client(self, data: bytes | memoryview) -> None: ...

    def write_upstream(self, data: bytes | memoryview) -> None: ...

    def close(self, reason: str, kind: str | None) -> None:
        """Close both sides. `kind` names a problem (for metrics and a warning), None is a
        deliberate close such as Kafka's acks=0 denial."""

    def pause_client_reading(self) -> None: ...

    def resume_client_reading(self) -> None: ...

    def perform(self, token: int, effect: Effect) -> None:
        """Carry out `effect` (protocol/effects.py); for a wait, call
        `session.resume(token, result)` when done (now or later, on the session's thread).
        Notifications come with token NO_RESUME (0) and are never resumed."""


class SessionObserver(Protocol):
    """Metrics and logging hooks; all optional to implement meaningfully."""

    def request(self, header: RequestHeader, size: int) -> None: ...

    def response(self, api_key: int, size: int, local: bool) -> None: ...

    def refused(self, api_key: int) -> None:
        """A request with an API key or version the proxy does not serve."""


class _NullObserver:
    def request(self, header: RequestHeader, size: int) -> None:
        pass

    def response(self, api_key: int, size: int, local: bool) -> None:
        pass

    def refused(self, api_key: int) -> None:
        pass


class Slot:
    """A place in the response order, owned by the request it answers: its header (the
    answer's correlation id, key and version come from it) and the plan for the broker's
    answer (`rewrite`: None to relay it as it is). Filled by the upstream or by the proxy."""

    __slots__ = (
        "api_key",
        "api_version",
        "close_after",
        "close_kind",
        "correlation_id",
        "data",
        "done",
        "header",
        "rewrite",
    )

    def __init__(self, header: RequestHeader | None, rewrite: ResponseRewriter | None = None):
        #: None for the slots that answer no Kafka request (SASL v0 tokens, a close marker)
        self.header = header
        if header is None:
            self.correlation_id = self.api_key = self.api_version = -1
        else:
            self.correlation_id = header.correlation_id
            self.api_key = header.api_key
            self.api_version = header.api_version
        self.rewrite = rewrite
        self.data: bytes | memoryview = b""
        self.done = False
        self.close_after: str | None = None
        #: the problem that close is counted as (None: a deliberate close)
        self.close_kind: str | None = None


class WithState(Generic[T]):
    """A response rewrite that needs what the request's handler decided (denied entries to
    merge, topics to hide, ...): that state travels with the request, typed, as the rewrite's
    fourth argument. (A plain slotted class: mypyc compiles no generic slotted dataclass.)"""

    __slots__ = ("fn", "state")

    def __init__(
        self, fn: Callable[[ProxySession, Slot, Frame, T], bytes | memoryview], state: T
    ) -> None:
        self.fn = fn
        self.state = state

    def __call__(self, session: ProxySession, slot: Slot, frame: Frame) -> bytes | memoryview:
        return self.fn(session, slot, frame, self.state)


class _NoBrokers:
    """A directory that serves no broker: every address is withheld."""

    def learn(self, node_id: int, host: str, port: int) -> None:
        pass

    def advertise(self, node_id: int) -> tuple[str, int] | None:
        return None


_NO_BROKERS: Final = _NoBrokers()


@dataclass
class SessionConfig:
    """Shared, read-mostly settings for every session of a listener."""

    handlers: Mapping[int, RequestHandler]
    #: api_key -> (min, max) request versions this proxy accepts
    allowed_versions: Mapping[int, tuple[int, int]]
    #: maps upstream node ids to the proxy's addresses for them (address rewriting)
    directory: BrokerDirectory | None = None
    #: rewritten Metadata brokers arrays of this proxy's cluster
    broker_arrays: BrokerArrayCache = field(default_factory=BrokerArrayCache)
    #: whole rewritten answers by the broker's bytes
    answers: AnswerCache = field(default_factory=AnswerCache)
    max_frame: int = DEFAULT_MAX_FRAME
    #: api_key -> largest request of that API, below `max_frame` (protocol/framing.py)
    max_request_bytes: Mapping[int, int] = field(default_factory=dict)
    max_in_flight: int = 1000
    #: called with (header) for an ApiVersions request newer than the proxy can parse
    unsupported_api_versions: Callable[[int], bytes] | None = None

    @property
    def brokers(self) -> BrokerDirectory:
        """The directory, for the address rewrites: every proxy has one; sessions built
        without (tests of the framing and of the checks alone) serve no broker address."""
        return self.directory if self.directory is not None else _NO_BROKERS

    #: APIs the listener serves itself whatever the cluster announces (SASL), added to the
    #: ApiVersions answers the cluster gives
    own_api_versions: Mapping[int, tuple[int, int]] | None = None


class ProxySession:
    """Per-connection engine; see the module docstring."""

    def __init__(
        self,
        config: SessionConfig,
        io: SessionIO,
        observer: SessionObserver | None = None,
        context: AuthContext | None = None,
    ):
        self.config = config
        self.io = io
        self.observer = observer or _NullObserver()
        #: who is asking (principal, host, listener); None only in tests of framing alone
        self.context = cast("AuthContext", context)
        self.closed = False
        #: a close is scheduled after the responses ahead of it: read no more requests
        self.closing = False
        self._handlers = config.handlers
        self._allowed = config.allowed_versions
        #: consulted for every request: returns a reason to close the connection, or None
        #: (e.g. "not authenticated yet", "SASL session expired"); `set_gate`
        self._gate: Callable[[RequestHeader], str | None] | None = None
        #: when set, frames are not Kafka requests (SASL v0 raw tokens) and go here;
        #: `set_raw_handler`
        self._raw_handler: Callable[[ProxySession, Frame], None] | None = None
        #: the connection closes because authentication failed (closed after a delay);
        #: `authentication_failed`
        self.auth_failed = False
        #: state handlers keep per connection, by kind (`owned`, `own`, `state`): SASL
        #: progress, KIP-227 fetch sessions, regex members
        self._owned: dict[type, Any] = {}  # kind -> a `kind` (see `owned`)
        self._splitter = FrameSplitter(config.max_frame, config.max_request_bytes)
        #: token -> what continues a request waiting for an effect, and whether it holds
        #: the requests behind it
        self._waiting: dict[int, tuple[Callable[[object], None], bool]] = {}
        self._tokens = itertools.count(1)
        self._fifo: deque[Slot] = deque()  # client order
        self._awaiting: deque[Slot] = deque()  # sent upstream, response not yet started
        self._backlog: deque[Frame] = deque()
        self._stalls = 0
        self._draining = False
        self._client_paused = False
        #: the client's write buffer is over its high-water mark (a client not reading)
        self._output_blocked = False
        self._to_upstream: list[bytes | memoryview] = []
        self._to_client: list[bytes | memoryview] = []
        # response stream state
        self._head = bytearray()
        #: bytes of a streamed response still to relay (read by the IO layer, a plain
        #: attribute, before it asks `opaque_ahead`: zero-copy relay of large answers)
        self.stream_left = 0
        self._stream: ResponseStream | None = None  # the streamed response's rewrite, if any
        self._buffer_left = 0  # bytes of a buffered response still to collect
        self._rbuf = bytearray()
        self._rslot: Slot | None = None

    # ------------------------------------------------------------------ client side

    @property
    def in_flight(self) -> int:
        return len(self._fifo)

    @property
    def partial_request(self) -> bool:
        """Part of a request frame has arrived and the rest has not (yet)."""
        return bool(self._splitter.buffered)

    @property
    def upstream_idle(self) -> bool:
        """The upstream owes no response (nothing awaited, none half-read): a KIP-368
        re-authentication may use the connection."""
        return not (self._awaiting or self._rslot is not None or self._head)

    def owned(self, kind: type[Owned]) -> Owned:
        """The connection's own `kind()` (e.g. a handler's per-connection state), made on
        first use and dropped with the connection."""
        state = self._owned.get(kind)
        if state is None:
            state = self._owned[kind] = kind()
        return state  # the kind it was made of (`owned`, `own`): no cast() call per use

    def own(self, state: object) -> None:
        """Keep `state` as the connection's own of its kind (one made with arguments)."""
        self._owned[type(state)] = state

    def state(self, kind: type[Owned]) -> Owned | None:
        """The connection's own `kind`, if it has one."""
        return cast("Owned | None", self._owned.get(kind))

    def set_gate(self, gate: Callable[[RequestHeader], str | None] | None) -> None:
        """Consult `gate` for every request from now on (SASL: before and between logins)."""
        self._gate = gate

    def set_raw_handler(self, handler: Callable[[ProxySession, Frame], None] | None) -> None:
        """Frames go to `handler` rather than to the API table (SASL v0's bare tokens)."""
        self._raw_handler = handler

    def authentication_failed(self) -> None:
        """The close that follows is an authentication failure (the IO layer delays it)."""
        self.auth_failed = True

    def set_client_host(self, host: str) -> None:
        """Where the client really is (a PROXY protocol header): authorized from there on."""
        self.context.host = host

    def connection_lost(self) -> None:
        """The IO layer closed the connection: nothing more is sent or resumed."""
        self.closed = True

    def set_handlers(
        self, handlers: Mapping[int, RequestHandler], allowed: Mapping[int, tuple[int, int]]
    ) -> None:
        """Swap the dispatch table, e.g. once a SASL client has authenticated."""
        self._handlers = handlers
        self._allowed = allowed

    @property
    def allowed_versions(self) -> Mapping[int, tuple[int, int]]:
        return self._allowed

    def respond_raw(self, data: bytes) -> None:
        """A frame without a response header (SASL v0 tokens), in order like any answer."""
        slot = Slot(None)
        self._fifo.append(slot)
        self._fill(slot, data)

    def set_max_frame(self, size: int) -> None:
        """E.g. a small cap before SASL authentication, the full one after."""
        self._splitter.limit(size)

    def client_data(self, data: bytes) -> None:
        if self.closed or self.closing:
            return
        # Fast path: one whole request in this read, nothing buffered, waiting or parked.
        if (
            len(data) >= 4
            and not (
                self._splitter.buffered
                or self._backlog
                or self._stalls
                or self._client_paused
                or self._output_blocked
            )
            and len(self._fifo) < self.config.max_in_flight
        ):
            size: int
            (size,) = _SIZE.unpack_from(data)
            if size + 4 == len(data) and size <= self._splitter.unchecked:
                self._process(data)
                if self._backlog or len(self._fifo) >= self.config.max_in_flight:
                    self._update_pause()
                self._flush()
                return
        try:
            frames = self._splitter.feed(data)
        except FrameTooLarge as exc:
            self.fail(f"request {exc}; closing (Kafka closes too)", "frame_too_large")
            return
        if self._backlog or self._stalls or self._output_blocked:
            self._backlog.extend(frames)
        else:
            limit = self.config.max_in_flight
            for i, frame in enumerate(frames):
                if len(self._fifo) >= limit or self._output_blocked:
                    self._backlog.extend(frames[i:])
                    break
                self._process(frame)
                if self.closed or self.closing:
                    break
                if self._stalls:  # the frame itself may have been parked at the front
                    self._backlog.extend(frames[i + 1 :])
                    break
                if len(self._to_client) >= _OUTPUT_BATCH:
                    self._flush()  # may report the client's buffer full: the rest waits
        self._update_pause()
        self._flush()

    def _drain_backlog(self) -> None:
        if self._draining:  # a local answer completed while we were already draining
            return
        self._draining = True
        try:
            limit = self.config.max_in_flight
            backlog = self._backlog
            while (
                backlog
                and not (self._stalls or self.closed or self.closing or self._output_blocked)
                and len(self._fifo) < limit
            ):
                self._process(backlog.popleft())
                if len(self._to_client) >= _OUTPUT_BATCH:
                    self._flush()
        finally:
            self._draining = False
        self._update_pause()

    def client_writable(self, writable: bool) -> None:
        """The IO layer's write buffer towards the client went over its high-water mark
        (False) or back under its low-water mark (True)."""
        self._output_blocked = not writable
        if writable and self._backlog and not self._stalls and not self.closed:
            self._drain_backlog()
            self._flush()

    def _update_pause(self) -> None:
        want_pause = bool(self._backlog) or len(self._fifo) >= self.config.max_in_flight
        if want_pause != self._client_paused and not self.closed:
            self._client_paused = want_pause
            if want_pause:
                self.io.pause_client_reading()
            else:
                self.io.resume_client_reading()

    def _process(self, frame: Frame) -> None:
        if self._raw_handler is not None:
            self._raw_handler(self, frame)
            return
        try:
            header = parse_request_header(frame)
        except UnknownApi as exc:
            if exc.api_key == 18 and self.config.unsupported_api_versions is not None:
                # KIP-511: answer an ApiVersions newer than we parse with UNSUPPORTED_VERSION.
                slot = Slot(RequestHeader(18, exc.api_version, exc.correlation_id, None, False, 0))
                self._fifo.append(slot)
                self._fill(slot, self.config.unsupported_api_versions(exc.correlation_id))
                return
            self.observer.refused(exc.api_key)
            self.fail(f"{exc}; closing (not advertised, as Kafka would)", "unsupported_api")
            return
        except MalformedRequest as malformed:
            self.fail(f"malformed request header: {malformed}", "malformed_request")
            return
        # The gate first: before SASL authentication only the SASL APIs exist, so anything
        # else is a SASL-state error (Kafka's "Unexpected Kafka request of type ... during
        # SASL handshake"), whatever its version.
        if self._gate is not None:
            reason = self._gate(header)
            if reason is not None:
                self.fail(reason, "sasl_state")
                return
        allowed = self._allowed.get(header.api_key)
        handler = self._handlers.get(header.api_key)
        if allowed is None or handler is None:
            self.observer.refused(header.api_key)
            self.fail(
                f"api_key={header.api_key} is not supported by the proxy; closing",
                "unsupported_api",
            )
            return
        if not allowed[0] <= header.api_version <= allowed[1]:
            self.observer.refused(header.api_key)
            self.fail(
                f"api_key={header.api_key} api_version={header.api_version} is outside the "
                f"advertised range {allowed[0]}-{allowed[1]}; closing",
                "unsupported_api",
            )
            return
        self.observer.request(header, len(frame))
        try:
            handler(self, header, frame)
        except MalformedRequest as malformed:
            self.fail(
                f"malformed api_key={header.api_key} v{header.api_version} request: {malformed}",
                "malformed_request",
            )
        except Exception as bug:  # a bug of ours: fail closed rather than hang or forward
            self.internal_error(f"api_key={header.api_key} v{header.api_version} request", bug)

    # ------------------------------------------------------------ handler primitives

    def forward(
        self,
        header: RequestHeader,
        frame: bytes | memoryview,
        rewrite: ResponseRewriter | None = None,
    ) -> Slot:
        """Send `frame` upstream; the response (rewritten by `rewrite`, if given) fills the
        request's slot."""
        slot = Slot(header, rewrite)
        self._fifo.append(slot)
        self._awaiting.append(slot)
        self._to_upstream.append(frame)
        return slot

    def forward_without_response(self, frame: bytes | memoryview) -> None:
        """Produce with acks=0: the broker sends nothing back, so no slot."""
        self._to_upstream.append(frame)

    def respond(self, header: RequestHeader, response: bytes) -> None:
        """A locally built framed response, delivered in request order."""
        slot = Slot(header)
        self._fifo.append(slot)
        self.observer.response(header.api_key, len(response), True)
        self._fill(slot, response)

    def flush(self) -> None:
        """Write what is ready now (before a `fail`, which writes nothing more)."""
        self._flush()

    def stop_accepting(self) -> None:
        """Shutting down: read no more requests and drop the ones not yet sent (the client
        sends them again elsewhere); what is in flight is still answered."""
        self.closing = True
        self._backlog.clear()

    def close_after_flush(self, reason: str, kind: str | None = None) -> None:
        """Write every response ahead of this point, then close (Produce acks=0 denial, a
        refused SASL exchange). `kind` names a problem, as in `SessionIO.close`."""
        slot = Slot(None)
        slot.close_after = reason
        slot.close_kind = kind
        slot.done = True
        self._fifo.append(slot)
        self._backlog.clear()
        self.closing = True
        if self._fifo[0] is slot:  # nothing ahead of it (e.g. a local answer): close now
            self._collect()

    # ------------------------------------------------------------- waiting for the IO layer

    def wait(self, effect: Waits[R], then: Callable[[R], None], hold: bool = True) -> None:
        """Ask the IO layer for `effect`; `then(result)` continues once it resumes. With
        `hold`, the requests behind this one wait in the backlog meanwhile (their answers
        must not overtake this one's, nor their effects happen first)."""
        token = next(self._tokens)
        # `resume` hands back what the IO layer made for this very effect: an R
        self._waiting[token] = (cast("Callable[[object], None]", then), hold)
        if hold:
            self._stalls += 1
        # every Waits subclass is a member of the Wait union (tests/protocol/test_effects.py)
        self.io.perform(token, cast(Wait, effect))

    def answer_later(
        self, header: RequestHeader, effect: Waits[R], build: Callable[[R], bytes]
    ) -> None:
        """Keep this request's place in the response order and go on with the next
        requests; once `effect` is resumed, `build(result)` makes the framed answer."""
        slot = Slot(header)
        self._fifo.append(slot)

        def fill(result: R) -> None:
            response = build(result)
            self.observer.response(slot.api_key, len(response), True)
            self._fill(slot, response)

        self.wait(effect, fill, hold=False)

    def notify(self, effect: Notification) -> None:
        """Tell the IO layer something; nothing is resumed."""
        self.io.perform(NO_RESUME, effect)

    def resume(self, token: int, result: object = None) -> None:
        """The IO layer's answer to `perform(token, effect)`."""
        waiting = self._waiting.pop(token, None)
        if waiting is None:
            return  # resumed twice, or after the connection closed: nothing to continue
        then, held = waiting
        if not self.closed:
            try:
                then(result)
            except MalformedRequest as exc:  # found while its handling went on (a walk)
                self.fail(f"malformed request: {exc}", "malformed_request")
            except Exception as bug:  # a bug of ours: fail closed rather than hang
                self.internal_error("a request resumed after a wait", bug)
        if held:
            self._stalls -= 1
        if not self._stalls and not self.closed:
            self._drain_backlog()
        self._flush()

    @property
    def waiting(self) -> int:
        """Requests waiting for the IO layer now."""
        return len(self._waiting)

    def hold(self) -> None:
        """The IO layer holds further requests (e.g. while it renews the upstream login);
        they wait in the backlog until `release`."""
        self._stalls += 1

    def release(self) -> None:
        self._stalls -= 1
        if not self._stalls:
            self._drain_backlog()
            self._flush()

    def internal_error(self, what: str, exc: BaseException) -> None:
        """An unexpected exception while handling `what`: a bug of ours. The connection is
        closed, so nothing unchecked is forwarded; the reason carries the traceback, for the
        proxy's close log line and a bug report."""
        trace = "".join(traceback.format_exception(exc)).rstrip()
        self.fail(f"internal error handling {what}: {exc!r}\n{trace}", "internal_error")

    def fail(self, reason: str, kind: str = "protocol_error") -> None:
        """Protocol violation: close both sides now, nothing more is written."""
        if not self.closed:
            self.closed = True
            self._to_client.clear()
            self._to_upstream.clear()
            self.io.close(reason, kind)

    # ------------------------------------------------------------------ upstream side

    def upstream_data(self, data: bytes | memoryview) -> None:
        if self.closed:
            return
        # Fast path, by far the common case: the read holds exactly one whole answer to the
        # oldest request, which needs no rewrite and is next in line: hand the bytes on as they
        # are. (Between requests the client and the broker evict the CPU caches, so every
        # Python call saved on this path shows in latency.)
        if (
            not (self._head or self.stream_left or self._buffer_left or self._to_client)
            and len(data) >= 8
        ):
            size: int
            correlation_id: int
            size, correlation_id = _SIZE_CORR.unpack_from(data)
            awaiting = self._awaiting
            if size + 4 == len(data) and awaiting:
                slot = awaiting[0]
                fifo = self._fifo
                if slot.correlation_id == correlation_id and fifo[0] is slot:
                    awaiting.popleft()
                    if slot.rewrite is not None:  # e.g. Metadata: rewrite, then the same
                        try:
                            data = slot.rewrite(self, slot, memoryview(data))
                        except MalformedResponse as exc:
                            self.fail(
                                f"cannot rewrite upstream response: {exc}", "bad_upstream_response"
                            )
                            return
                        except Exception as bug:
                            self.internal_error(f"api_key={slot.api_key} response", bug)
                            return
                        if self.closed:
                            return
                        size = len(data)
                    fifo.popleft()
                    self.observer.response(slot.api_key, size, False)
                    self.io.write_client(data)
                    if (
                        (fifo and fifo[0].done)
                        or self._backlog
                        or self._client_paused
                        or self._to_upstream
                    ):
                        self._collect()
                        self._flush()
                    return
        view = memoryview(data)
        pos, end = 0, len(data)
        try:
            while pos < end and not self.closed:
                if self.stream_left:
                    take = min(self.stream_left, end - pos)
                    piece = view[pos : pos + take]
                    if self._stream is not None:
                        piece = self._stream.feed(piece)
                    if piece:
                        self._to_client.append(piece)
                    pos += take
                    self.stream_left -= take
                    if not self.stream_left:
                        self._end_streamed()
                elif self._buffer_left:
                    take = min(self._buffer_left, end - pos)
                    self._rbuf += view[pos : pos + take]
                    pos += take
                    self._buffer_left -= take
                    if not self._buffer_left:
                        buf, self._rbuf = self._rbuf, bytearray()
                        self._end_buffered(memoryview(buf).toreadonly())
                elif self._head or end - pos < 8:
                    take = min(8 - len(self._head), end - pos)
                    self._head += view[pos : pos + take]
                    pos += take
                    if len(self._head) == 8:
                        head, self._head = bytes(self._head), bytearray()
                        self._start_response(head, None, 0, 0)
                else:
                    pos = self._start_response(view[pos : pos + 8], view, pos, end)
        except Exception as error:
            self._answer_failed(error)
            return
        self._flush()

    def _answer_failed(self, exc: Exception) -> None:
        """An answer that cannot be relayed: malformed (the broker's), or a bug of ours."""
        if isinstance(exc, MalformedResponse):
            self.fail(f"cannot rewrite upstream response: {exc}", "bad_upstream_response")
        else:
            self.internal_error("a response", exc)

    def opaque_ahead(self) -> int:
        """How many of the broker's next bytes the session need not see: the rest of an
        answer it is relaying to the client untouched, or the record set of one it walks
        (a Fetch answer's records). The IO layer may move them from the broker's socket to
        the client's itself (zero-copy, proxy/listen/splice.py), in order, and report each
        part moved with `relayed_opaque`. 0 when no answer is being relayed, or when
        something is still to be written to the client before those bytes."""
        left = self.stream_left
        if not left or self._to_client or self.closed:
            return 0
        stream = self._stream
        return left if stream is None else min(left, stream.opaque_ahead())

    def relayed_opaque(self, n: int) -> None:
        """The IO layer moved the broker's next `n` bytes (at most `opaque_ahead()`) to the
        client: the answer goes on, or ends (and what follows it is written) as if the bytes
        had been fed through `upstream_data`."""
        if not 0 < n <= self.opaque_ahead():
            raise ValueError(f"{n} bytes relayed, {self.opaque_ahead()} were opaque")
        try:
            if self._stream is not None:
                self._stream.skip(n)
            self.stream_left -= n
            if not self.stream_left:
                self._end_streamed()
        except Exception as exc:  # as upstream_data fails on it
            self._answer_failed(exc)
            return
        self._flush()

    def _start_response(
        self, head: bytes | memoryview, view: memoryview | None, pos: int, end: int
    ) -> int:
        """Begin a response whose 8-byte head (size, correlation id) is `head`.

        When the head lies inside `view` at `pos`, returns the position after what was
        consumed; a buffered response found complete in `view` is handled zero-copy.
        """
        size: int
        correlation_id: int
        size, correlation_id = _SIZE_CORR.unpack_from(head)
        if not self._awaiting:
            self.fail(
                f"unexpected response (correlation id {correlation_id}) from upstream",
                "bad_upstream_response",
            )
            return end
        slot = self._awaiting.popleft()
        if correlation_id != slot.correlation_id:
            self.fail(
                f"upstream answered correlation id {correlation_id}, expected {slot.correlation_id}",
                "bad_upstream_response",
            )
            return end
        if size < 4:
            self.fail(f"upstream sent a response frame of {size} bytes", "bad_upstream_response")
            return end
        left = size - 4
        self._rslot = slot
        whole = view is not None and pos + 8 + left <= end
        rewrite = slot.rewrite
        if self._fifo[0] is slot and (
            rewrite is None or (not whole and getattr(rewrite, "stream", None) is not None)
        ):
            if rewrite is not None:  # relayed as it comes, its end rewritten in place
                self._stream = cast("StreamedRewrite", rewrite).stream(self, slot, left)
            self._to_client.append(head)
            self.stream_left = left
            if not left:
                self._end_streamed()
            return pos + 8
        if view is not None and whole:
            self._end_buffered(view[pos : pos + 8 + left])
            return pos + 8 + left
        self._rbuf = bytearray(head)
        self._buffer_left = left
        if not left:
            self._end_buffered(memoryview(bytes(self._rbuf)))
            self._rbuf = bytearray()
        return pos + 8

    def _end_streamed(self) -> None:
        slot = self._rslot
        assert slot is not None  # set by _start_response for the response being relayed
        self._rslot = None
        if self._stream is not None:
            stream, self._stream = self._stream, None
            end = stream.finish()
            if end:
                self._to_client.append(end)
        self._fifo.popleft()
        self.observer.response(slot.api_key, -1, False)
        self._collect()

    def _end_buffered(self, frame: memoryview) -> None:
        slot = self._rslot
        assert slot is not None  # set by _start_response for the response being collected
        self._rslot = None
        out = frame if slot.rewrite is None else slot.rewrite(self, slot, frame)
        self._fill(slot, out)
        self.observer.response(slot.api_key, len(out), False)

    # ------------------------------------------------------------------------ output

    def _fill(self, slot: Slot, data: bytes | memoryview) -> None:
        slot.data = data
        slot.done = True
        self._collect()

    def _collect(self) -> None:
        """Move completed slots from the head of the FIFO to the client output."""
        fifo = self._fifo
        while fifo and fifo[0].done:
            slot = fifo.popleft()
            if slot.close_after is not None:
                self._flush()
                if not self.closed:
                    self.closed = True
                    self.io.close(slot.close_after, slot.close_kind)
                return
            self._to_client.append(slot.data)
        if self._backlog:
            self._drain_backlog()
        elif self._client_paused:
            self._update_pause()

    def _flush(self) -> None:
        if self.closed:
            return
        up, client = self._to_upstream, self._to_client
        if up:
            self.io.write_upstream(up[0] if len(up) == 1 else b"".join(up))
            up.clear()
        if client:
            self.io.write_client(client[0] if len(client) == 1 else b"".join(client))
            client.clear()
