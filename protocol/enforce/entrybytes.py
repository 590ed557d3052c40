"""Per-topic requests walked, split and answered as bytes (issue 20).

OffsetCommit, TxnOffsetCommit, DeleteRecords, OffsetForLeaderEpoch and the other APIs the
table checks per topic (`per_topic`) have the 1 MiB limit: some 35,000 topics. Decoded with
kio, checked, and answered entry by entry, a denied one held the event loop 360 ms, whether
the group (or transactional id) or the topics were denied. A request of `ENTRY_BYTES_FROM`
bytes or more takes this path instead:

- its entries are walked in place, `ENTRIES_PER_TURN` a turn, by a function compiled from
  kio's schema (protocol/enforce/denied_bytes.py's compiler) that checks what kio's reader
  checks and renders each entry's denied answer on the way, the bytes `build` + kio make;
- its other fields are decoded by kio from a copy of the request whose array is empty: the
  `pre` checks (the group, the transactional id) and the shortcut read them there;
- a denied `pre` check is answered from the request's bytes by the compiled walk of the
  whole answer (every entry mirrored with the check's error code);
- the entries' names are decided a slice per turn (protocol/enforce/slices.py); the allowed
  entries' spans go to the broker spliced into a request of their own, and the denied
  entries' rendered answers are merged into the broker's answer (`spliced_merge_rewriter`),
  or make the whole answer when none is allowed.

A request the walk does not follow (a null array, an unknown tagged field, a cut-short or
non-UTF-8 one) takes the decoding path, which refuses what kio refuses. Smaller requests
take the decoding path too: tests/enforce/test_entry_bytes.py proves both give the same
decisions and bytes, for every version of every row this class serves.
"""

from __future__ import annotations

import dataclasses
import types
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol, cast

from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity

from aclgate.authz.model import ResourceType
from aclgate.protocol import arrays
from aclgate.protocol.codec import DECODE_ERRORS, decode_request, encode_entity, frame_with_size
from aclgate.protocol.enforce.base import (
    DENIED_CODE,
    KioBody,
    PerEntry,
    _array_item,
    first_denied,
    forward,
    knowing_ids,
    partition_by_verdict,
    refuse_not_ready,
    spliced_merge_rewriter,
)
from aclgate.protocol.enforce.build import NAME_MARK, Aliases
from aclgate.protocol.enforce.context import AuthContext, NotReady
from aclgate.protocol.enforce.denied_bytes import (
    Mirror,
    _request_plan,
    compile_shape,
    compile_walk,
)
from aclgate.protocol.enforce.fetchpeek import topic_uuid
from aclgate.protocol.enforce.producebytes import ID_MARK
from aclgate.protocol.enforce.slices import in_turns
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import MalformedRequest, RequestHeader
from aclgate.protocol.lengths import length_prefix, read_length
from aclgate.protocol.session import ProxySession, WithState
from aclgate.protocol.versions import request_class, response_class

#: requests of at least this many bytes take this path (smaller ones cost the loop little)
ENTRY_BYTES_FROM = 32 * 1024
#: entries walked in one turn of the event loop at most
ENTRIES_PER_TURN = 4_096

#: one entry at `pos`: (its denied answer, where it ends, its name's bytes; None when the
#: entry names its topic by id)
EntryWalk = Callable[[bytes, int, int], tuple[bytes, int, bytes | None]]


@dataclass(frozen=True, eq=False)
class EntryPlan:
    """How one version of one row's request is walked."""

    flexible: bool
    #: the request's top-level fields before and after its entry array, and its tags
    before: tuple[arrays.Field, ...]
    after: tuple[arrays.Field, ...]
    tagged: dict[int, arrays.Field]
    #: the entry's class, the field its name is in (`topic_id`: by id, its first field), and
    #: its walks: denied, and (by id) naming an unknown topic
    entry: type
    name_field: str
    walk: EntryWalk
    unknown_walk: EntryWalk | None = None

    @property
    def by_id(self) -> bool:
        return self.name_field == "topic_id"


#: an entry walked: (its name, or topic id; where it starts and ends; its denied answer)
Entry = tuple[str | uuid.UUID, int, int, bytes]


@dataclass(frozen=True, eq=False)
class WalkedEntries:
    buf: bytes
    #: where the entry array starts (its count) and ends
    array_at: int
    array_end: int
    #: per entry: (name, or topic id; start, end, its denied answer)
    entries: list[Entry]
    #: where each field after the array starts, then where the request's tags start
    after_at: list[int] = dataclasses.field(default_factory=list)


_PLANS: dict[tuple[int, int, int], EntryPlan | None] = {}


class EntrySource(Protocol):
    """What a plan is compiled from: a `PerEntry` row, or `EntrySpec` (Fetch's topics)."""

    @property
    def array(self) -> str: ...
    @property
    def response_array(self) -> str: ...
    @property
    def resource_type(self) -> ResourceType: ...
    @property
    def aliases(self) -> Aliases | None: ...
    @property
    def entry_overrides(self) -> dict[str, Any]: ...
    @property
    def name(self) -> Callable[[Any], str | None]: ...


@dataclass(frozen=True, eq=False)
class EntrySpec:
    """An entry array answered per entry outside the API table's PerEntry rows."""

    array: str
    response_array: str
    resource_type: ResourceType
    name: Callable[[Any], str | None]
    aliases: Aliases | None = None
    entry_overrides: dict[str, Any] = dataclasses.field(default_factory=dict)


def entry_plan(handler: EntrySource, api_key: int, api_version: int) -> EntryPlan | None:
    """The plan of `handler`'s request at this version, compiled once; None when its shape
    is not one this path follows (the decoding path serves it)."""
    key = (id(handler), api_key, api_version)
    if key not in _PLANS:
        try:
            _PLANS[key] = _compile(handler, api_key, api_version)
        except (AssertionError, KeyError, ValueError, TypeError):
            _PLANS[key] = None
    return _PLANS[key]


def _compile(handler: EntrySource, api_key: int, api_version: int) -> EntryPlan | None:
    request: type[Entity] = request_class(api_key, api_version)
    fields = _request_plan(request)
    names = [name for name, _how, _type in fields]
    if handler.array not in names:
        return None
    at = names.index(handler.array)
    how = fields[at][1]
    if how.kind != "array" or how.entity is None:
        return None
    entry = how.entity
    entry_fields = {name: (h, kafka_type) for name, h, kafka_type in _request_plan(entry)}
    name_field = _name_field(handler, entry)
    by_id = name_field is None and _named_by_id(handler, entry_fields)
    if by_id:
        name_field = "topic_id"
    elif name_field is None:
        return None
    else:
        named = entry_fields.get(name_field)
        if named is None or named[1] != "string" or named[0].nullable:
            return None
    answer_entry = _array_item(response_class(api_key, api_version), handler.response_array)
    mirror = Mirror(aliases=handler.aliases, overrides=handler.entry_overrides)

    def walk(code: ErrorCode) -> EntryWalk:
        shape = compile_shape(answer_entry, code, entry, mirror)
        return cast(EntryWalk, compile_walk(shape, "" if by_id else name_field))

    return EntryPlan(
        request.__flexible__,
        tuple(h for _n, h, _t in fields[:at]),
        tuple(h for _n, h, _t in fields[at + 1 :]),
        arrays.plan(request)[1],
        entry,
        name_field,
        walk(DENIED_CODE[handler.resource_type]),
        walk(ErrorCode.unknown_topic_id) if by_id else None,
    )


def _named_by_id(handler: EntrySource, fields: dict[str, tuple[arrays.Field, str]]) -> bool:
    """Entries naming their topic by its id, in their first field (OffsetCommit v10)."""
    first = next(iter(fields), None)
    return (
        handler.resource_type == ResourceType.TOPIC
        and first == "topic_id"
        and fields[first][1] == "uuid"
    )


def _name_field(handler: EntrySource, entry: type) -> str | None:
    """The field `handler.name` reads an entry's name from (asked of a stand-in entry)."""
    stand_in = types.SimpleNamespace(**{f.name: f"\0{f.name}" for f in dataclasses.fields(entry)})
    try:
        name = handler.name(stand_in)
    except Exception:  # a name read some other way
        return None
    if not isinstance(name, str) or not name.startswith("\0"):
        return None
    return name[1:]


def walking(
    plan: EntryPlan, frame: Frame, header: RequestHeader
) -> Generator[None, None, WalkedEntries | None]:
    """The request's entries, `ENTRIES_PER_TURN` a step. A request kio would refuse (a
    count past the frame, a null array, an unknown tagged field, a non-UTF-8 string) raises
    MalformedRequest as the walk finds it, as the decoding path closes on it (decoding it to
    find the same cost 60-125 ms at 1 MiB)."""
    buf = bytes(frame)
    end, flexible = len(buf), plan.flexible
    try:
        pos = header.body_offset
        for field in plan.before:
            pos = arrays.read_field(field, flexible, buf, pos, end)
        array_at = pos
        count, used = read_length(buf, pos, flexible)
        pos += used
        if count < 0 or count > end - pos:
            raise MalformedRequest(f"{count} entries in {end - pos} remaining bytes")
        entries: list[Entry] = []
        add, walk = entries.append, plan.walk
        by_id = plan.by_id
        for done in range(count):
            if done and not done % ENTRIES_PER_TURN:
                yield
            rendered, after, name = walk(buf, pos, end)
            key = topic_uuid(buf[pos : pos + 16]) if by_id else cast(bytes, name).decode()
            add((key, pos, after, rendered))
            pos = after
        array_end = pos
        after_at: list[int] = []
        for field in plan.after:
            after_at.append(pos)
            pos = arrays.read_field(field, flexible, buf, pos, end)
        after_at.append(pos)
        if flexible:
            pos = arrays.skip_tags(plan.tagged, buf, pos, end, True)
        if pos > end:
            raise MalformedRequest("a field runs past the end of the frame")
    except (*DECODE_ERRORS, UnicodeDecodeError) as exc:
        raise MalformedRequest(f"cannot walk the request: {exc!r}") from exc
    return WalkedEntries(buf, array_at, array_end, entries, after_at)


def splice_entries(walked: WalkedEntries, flexible: bool, kept: list[Entry]) -> bytes:
    """The request with only the entries `kept` (their bytes as they came)."""
    buf = walked.buf
    return frame_with_size(
        buf[4 : walked.array_at]
        + length_prefix(len(kept), flexible)
        + b"".join([buf[start:end] for _name, start, end, _answer in kept])
        + buf[walked.array_end :]
    )


_WHOLE: dict[tuple[int, int, int, Any], Callable[[Frame, int, int], bytes]] = {}


class EntriesAsBytes(PerEntry):
    """`PerEntry` whose large requests take the byte path of this module."""

    def __call__(self, session: ProxySession, header: RequestHeader, frame: Frame) -> None:
        if len(frame) >= ENTRY_BYTES_FROM:
            plan = entry_plan(self, header.api_key, header.api_version)
            if plan is not None:
                in_turns(
                    session,
                    walking(plan, frame, header),
                    lambda walked: self._walked(session, header, frame, plan, walked),
                )
                return
        super().__call__(session, header, frame)

    def _walked(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        plan: EntryPlan,
        walked: WalkedEntries | None,
    ) -> None:
        if walked is None:
            super().__call__(session, header, frame)
            return
        stub = decode_request(splice_entries(walked, plan.flexible, []), header)
        ctx = session.context
        try:
            denied_pre = first_denied(ctx, header, stub, self.pre)
            if denied_pre is not None:
                session.respond(header, self._whole_denied(header, walked, denied_pre.error))
                return
            if self.shortcut is not None and ctx.check(
                header,
                self.shortcut.operation,
                self.shortcut.resource_type,
                self.shortcut.resource(stub),
                self.shortcut.log_if_denied,
            ):
                forward(session, header, frame)
                return
            if plan.by_id:
                ids = [cast(uuid.UUID, key) for key, _s, _e, _a in walked.entries]
                knowing_ids(
                    session,
                    ctx,
                    ids,
                    lambda known: self._decide(session, known, header, frame, plan, walked, stub),
                )
            else:
                self._decide(session, ctx, header, frame, plan, walked, stub)
        except NotReady:  # raised by the first check, before anything was recorded
            refuse_not_ready(session)

    def _decide(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        plan: EntryPlan,
        walked: WalkedEntries,
        stub: KioBody,
    ) -> None:
        """Each distinct name once (refCount = its entries), a slice per turn."""
        names: list[str | None]
        if plan.by_id:
            ids = [cast(uuid.UUID, key) for key, _s, _e, _a in walked.entries]
            resolved = ctx.topic_names_of(ids)
            names = [resolved[i] for i in ids]
        else:
            names = [cast(str, key) for key, _s, _e, _a in walked.entries]
        counts: dict[str, int] = {}
        for name in names:
            if name is not None:
                counts[name] = counts.get(name, 0) + 1
        self.decide_names(
            session,
            ctx,
            header,
            counts,
            lambda verdict: self._split(session, header, frame, plan, walked, stub, names, verdict),
        )

    def _split(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        plan: EntryPlan,
        walked: WalkedEntries,
        stub: KioBody,
        names: list[str | None],
        verdict: dict[str, bool],
    ) -> None:
        allowed, denied, unknown = partition_by_verdict(walked.entries, names, verdict)
        if not denied and not unknown:
            forward(session, header, frame)
            return
        items = b"".join([rendered for _n, _s, _e, rendered in denied])
        if unknown:  # as the decoding path answers them: after the denied ones
            assert plan.unknown_walk is not None  # only entries named by id are unknown
            walk, buf = plan.unknown_walk, walked.buf
            items += b"".join([walk(buf, start, end)[0] for _n, start, end, _a in unknown])
        first = denied[0] if denied else unknown[0]
        code = DENIED_CODE[self.resource_type] if denied else ErrorCode.unknown_topic_id
        marked = self._marked(header, plan, walked, first, code)
        count = len(denied) + len(unknown)
        if not allowed and not self.forward_empty:
            session.respond(header, self.all_denied(header, stub, marked, count, items))
            return
        spliced = (self.response_array, marked, items, count)
        forward(
            session,
            header,
            splice_entries(walked, plan.flexible, allowed),
            WithState(spliced_merge_rewriter, spliced),
        )

    def _marked(
        self,
        header: RequestHeader,
        plan: EntryPlan,
        walked: WalkedEntries,
        entry: Entry,
        code: ErrorCode,
    ) -> KioBody:
        """The answer's entry for a request entry named NAME_MARK (or ID_MARK), shaped as
        `entry` with `code` (found nowhere else in an answer: base.spliced_answer)."""
        one = decode_request(splice_entries(walked, plan.flexible, [entry]), header)
        first = getattr(one, self.array)[0]
        mark = ID_MARK if plan.by_id else NAME_MARK
        return self.error_entry(header, dataclasses.replace(first, **{plan.name_field: mark}), code)

    def _whole_denied(self, header: RequestHeader, walked: WalkedEntries, code: Any) -> bytes:
        """The answer to a request whose `pre` check was denied, rendered from its bytes:
        what error_body(request, code, aliases, **pre_overrides) encodes."""
        key = (id(self), header.api_key, header.api_version, code)
        walk = _WHOLE.get(key)
        if walk is None:
            shape = compile_shape(
                response_class(header.api_key, header.api_version),
                code,
                request_class(header.api_key, header.api_version),
                Mirror(aliases=self.aliases, overrides=self.pre_overrides),
            )
            walk = _WHOLE[key] = compile_walk(shape)
        body = walk(walked.buf, header.body_offset, len(walked.buf))
        head = response_class(header.api_key, header.api_version).__header_schema__
        return frame_with_size(encode_entity(head(correlation_id=header.correlation_id)) + body)
