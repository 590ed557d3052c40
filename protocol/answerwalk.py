"""Find the top-level tagged fields of Produce v10+ and Fetch v16+ answers by offsets.

KIP-951 puts new leaders' endpoints (`node_endpoints`, tag 0) in the answer's top-level
tagged fields, the very last bytes of the frame. To find them the answer's structure is
walked with offsets only: fixed fields are skipped by their size, strings and record sets by
their length, arrays by their count; nothing is decoded and no record is read. The walk is
resumable, so a 50 MB fetch answer can be relayed as it streams in: every byte before the
tagged fields is passed on at once, only the tagged fields (a byte or two when there are no
endpoints) are held until the end (docs/design.md, "Hot path").

The structures are data (`SCHEMAS`): tuples of ops run by one small interpreter.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Final, cast

from kio.serial.readers import read_unsigned_varint

from aclgate.protocol.codec import DECODE_ERRORS, MalformedResponse

#: skip a fixed number of bytes
SKIP: Final = "skip"
#: a compact string, nullable string, bytes or record set: uvarint (length + 1), then bytes
BLOB: Final = "blob"
#: a tagged-fields section: uvarint count, then (uvarint tag, uvarint size, bytes) each
TAGS: Final = "tags"
#: a compact (nullable) array: uvarint (count + 1), then the body ops once per element
ARRAY: Final = "array"

#: (SKIP, n) | (BLOB,) | (TAGS,) | (ARRAY, ops): an op code and its operand, read by position
#: after an identity test on the code; a union of tuple shapes would need a narrowing test per
#: op on the streaming walk, so the operand stays untyped here
Op = tuple[Any, ...]


def _fetch(topic_key: Op) -> tuple[Op, ...]:
    partition = (
        (SKIP, 30),  # index, error, high watermark, last stable offset, log start offset
        (ARRAY, ((SKIP, 16), (TAGS,))),  # aborted transactions (nullable)
        (SKIP, 4),  # preferred read replica
        (BLOB,),  # records (nullable): skipped by their length, never read
        (TAGS,),  # diverging epoch, current leader, snapshot id
    )
    return (
        (TAGS,),  # response header
        (SKIP, 10),  # throttle, error code, session id
        (ARRAY, (topic_key, (ARRAY, partition), (TAGS,))),
    )


def _produce(topic_key: Op) -> tuple[Op, ...]:
    partition = (
        (SKIP, 30),  # index, error, base offset, log append time, log start offset
        (ARRAY, ((SKIP, 4), (BLOB,), (TAGS,))),  # record errors
        (BLOB,),  # error message (nullable)
        (TAGS,),  # current leader
    )
    return (
        (TAGS,),  # response header
        (ARRAY, (topic_key, (ARRAY, partition), (TAGS,))),
        (SKIP, 4),  # throttle
    )


_UUID: Final[Op] = (SKIP, 16)
_NAME: Final[Op] = (BLOB,)
#: (api_key, api_version) -> the answer's structure after its size and correlation id, up to
#: its top-level tagged fields
SCHEMAS: Final[dict[tuple[int, int], tuple[Op, ...]]] = {
    **{(1, v): _fetch(_UUID) for v in range(16, 19)},
    **{(0, v): _produce(_NAME) for v in range(10, 13)},
    (0, 13): _produce(_UUID),
}

#: what the walk asks for: 1 = the next byte (sent back as an int), -n = skip n bytes,
#: 0 = the top-level tagged fields start here
Walk = Generator[int, int, None]


def _uvarint() -> Generator[int, int, int]:
    value = shift = 0
    while True:
        byte = yield 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
        if shift > 28:
            raise MalformedResponse("a varint longer than 5 bytes")


def _run(ops: tuple[Op, ...]) -> Generator[int, int, None]:
    for op in ops:
        kind = op[0]
        if kind is SKIP:
            yield -op[1]
        elif kind is BLOB:
            n = (yield from _uvarint()) - 1
            if n > 0:
                yield -n
        elif kind is TAGS:
            for _ in range((yield from _uvarint())):
                yield from _uvarint()
                size = yield from _uvarint()
                if size:
                    yield -size
        else:  # ARRAY
            body = op[1]
            for _ in range((yield from _uvarint()) - 1):
                yield from _run(body)


def walk(ops: tuple[Op, ...]) -> Walk:
    yield from _run(ops)
    yield 0


class AnswerWalk:
    """A resumable walk over one answer's bytes after its 8-byte head (size, correlation id).

    `feed` each piece in order; it returns how many leading bytes of the piece lie before the
    top-level tagged fields (they may be relayed now). The tagged fields are kept in `tail`.
    """

    __slots__ = ("_left", "_steps", "_want", "tail")

    def __init__(self, ops: tuple[Op, ...], length: int):
        self._steps = walk(ops)
        self._want = next(self._steps)
        #: bytes of the answer not fed yet
        self._left = length
        self.tail: bytearray | None = None

    def feed(self, piece: memoryview | bytes) -> int:
        n = len(piece)
        self._left -= n
        if self._left < 0:
            raise MalformedResponse("more bytes fed than the answer holds")
        if self.tail is not None:
            self.tail += piece
            return 0
        pos, want, steps = 0, self._want, self._steps
        while pos < n:
            if want < 0:
                take = min(-want, n - pos)
                pos += take
                want += take
                if want:
                    break
                want = steps.send(0)
            elif want:
                want = steps.send(piece[pos])
                pos += 1
            else:
                self.tail = bytearray(piece[pos:])
                self._want = 0
                return pos
        self._want = want
        if want == 0 and self.tail is None:
            self.tail = bytearray()
        return n

    def opaque(self) -> int:
        """Bytes the walk would pass over next without reading them (the rest of a string
        or record set it skips by its length)."""
        return -self._want if self._want < 0 and self.tail is None else 0

    def skip(self, n: int) -> None:
        """Pass over the next `n` bytes (at most `opaque()`) without being given them: as
        `feed` with bytes it would not read."""
        if not 0 < n <= self.opaque():
            raise ValueError(f"cannot skip {n} bytes, {self.opaque()} are opaque")
        self._left -= n
        want = self._want + n
        if not want:
            want = self._steps.send(0)
        self._want = want
        if want == 0:
            self.tail = bytearray()

    def finish(self) -> bytearray:
        """The top-level tagged fields, once every byte has been fed."""
        if self._left or self.tail is None:
            raise MalformedResponse(
                "the answer ends inside its structure" if not self._left else "answer incomplete"
            )
        return self.tail


def _compile(ops: tuple[Op, ...]) -> Callable[[bytes | memoryview, int], int]:
    """The walk over bytes that are all here, as one Python function made from the ops:
    straight-line offset arithmetic with the one-byte varint (nearly every count and length on
    this path) read inline. An interpreter over the ops costs a call per op and per array
    element, which on a small Produce answer made the walk slower than kio's native decode."""
    lines = ["def walk(buf, pos):"]

    def varint(indent: str, target: str) -> None:
        lines.extend(
            [
                f"{indent}b = buf[pos]",
                f"{indent}if b < 0x80:",
                f"{indent}    {target} = b",
                f"{indent}    pos += 1",
                f"{indent}else:",
                f"{indent}    {target}, used = uvarint(buf, pos)",
                f"{indent}    pos += used",
            ]
        )

    def emit(body: tuple[Op, ...], indent: str, depth: int) -> None:
        for op in body:
            kind = op[0]
            if kind is SKIP:
                lines.append(f"{indent}pos += {op[1]}")
            elif kind is BLOB:
                varint(indent, "n")
                lines.append(f"{indent}if n > 1:")
                lines.append(f"{indent}    pos += n - 1")
            elif kind is TAGS:
                lines.append(f"{indent}if buf[pos] == 0:")
                lines.append(f"{indent}    pos += 1")
                lines.append(f"{indent}else:")
                lines.append(f"{indent}    pos = tags(buf, pos)")
            else:  # ARRAY
                count = f"c{depth}"
                varint(indent, count)
                lines.append(f"{indent}for _ in range({count} - 1):")
                emit(op[1], indent + "    ", depth + 1)
        lines.append(f"{indent}if pos > len(buf):")
        lines.append(f"{indent}    raise IndexError('past the end')")

    emit(ops, "    ", 0)
    lines.append("    return pos")
    namespace: dict[str, object] = {"uvarint": read_unsigned_varint, "tags": _skip_tags}
    exec("\n".join(lines), namespace)  # the source is built above from SCHEMAS only
    return cast("Callable[[bytes | memoryview, int], int]", namespace["walk"])


def _skip_tags(buf: bytes | memoryview, pos: int) -> int:
    count, used = read_unsigned_varint(buf, pos)
    pos += used
    for _ in range(count):
        _tag, used = read_unsigned_varint(buf, pos)
        size, used2 = read_unsigned_varint(buf, pos + used)
        pos += used + used2 + size
    return pos


#: op codes of a flat program (`_program`), the form the compiled walk runs
_P_SKIP: Final = 0
_P_BLOB: Final = 1
_P_TAGS: Final = 2
_P_ARRAY: Final = 3


def _program(ops: tuple[Op, ...]) -> tuple[int, ...]:
    """The ops as a flat tuple of ints: SKIP n -> (0, n), BLOB -> (1,), TAGS -> (2,),
    ARRAY body -> (3, length of the body's program, *the body's program)."""
    out: list[int] = []
    for op in ops:
        kind = op[0]
        if kind is SKIP:
            out += (_P_SKIP, op[1])
        elif kind is BLOB:
            out.append(_P_BLOB)
        elif kind is TAGS:
            out.append(_P_TAGS)
        else:
            body = _program(op[1])
            out += (_P_ARRAY, len(body), *body)
    return tuple(out)


def _uvarint_at(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at `pos` (at most 5 bytes, as kio
    reads them): its own loop, so the compiled walk calls nothing interpreted."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 28:
            raise ValueError("a varint longer than 5 bytes")


def _skip_tags_at(buf: bytes | memoryview, pos: int) -> int:
    """`_skip_tags` with `_uvarint_at`: the compiled walk's."""
    count, pos = _uvarint_at(buf, pos)
    for _ in range(count):
        _tag, pos = _uvarint_at(buf, pos)
        size, pos = _uvarint_at(buf, pos)
        pos += size
    return pos


def _run_program(
    prog: tuple[int, ...], start: int, end: int, buf: bytes | memoryview, pos: int
) -> int:
    """The walk of `_compile`, as a loop over a flat program: what the module runs when mypyc
    compiled it (typed int arithmetic in C; the generated Python of `_compile` would stay
    interpreted, since mypyc does not compile code made at run time)."""
    i = start
    while i < end:
        op = prog[i]
        if op == _P_SKIP:
            pos += prog[i + 1]
            i += 2
        elif op == _P_BLOB:
            n, pos = _uvarint_at(buf, pos)
            if n > 1:
                pos += n - 1
            i += 1
        elif op == _P_TAGS:
            pos = pos + 1 if buf[pos] == 0 else _skip_tags_at(buf, pos)
            i += 1
        else:
            body = prog[i + 1]
            count, pos = _uvarint_at(buf, pos)
            for _ in range(count - 1):
                pos = _run_program(prog, i + 2, i + 2 + body, buf, pos)
            i += 2 + body
        if pos > len(buf):
            raise IndexError("past the end")
    return pos


_WALKS: Final[dict[tuple[Op, ...], Callable[[bytes | memoryview, int], int]]] = {}
_PROGRAMS: Final[dict[tuple[Op, ...], tuple[int, ...]]] = {}
#: this module is a mypyc-compiled extension (aclgate/native.py), not interpreted Python
COMPILED: Final = not __file__.endswith(".py")


def tail_offset(ops: tuple[Op, ...], frame: bytes | memoryview) -> int:
    """Where the top-level tagged fields of a whole framed answer start."""
    try:
        if COMPILED:
            prog = _PROGRAMS.get(ops)
            if prog is None:
                prog = _PROGRAMS[ops] = _program(ops)
            pos = _run_program(prog, 0, len(prog), frame, 8)
        else:
            walk = _WALKS.get(ops)
            if walk is None:
                walk = _WALKS[ops] = _compile(ops)
            pos = walk(frame, 8)
    except DECODE_ERRORS as exc:
        raise MalformedResponse(f"the answer ends inside its structure: {exc!r}") from exc
    if pos >= len(frame):
        raise MalformedResponse("the answer ends inside its structure")
    return pos


def no_node_endpoints(frame: bytes | memoryview, start: int) -> bool:
    """Whether the top-level tagged fields at `start` (tail_offset), which close the frame,
    carry no KIP-951 node endpoints, the common case: no field at all (one zero byte, what
    Kafka writes) or only tag 0 with an empty array (count 1, tag 0, size 1, array length + 1
    = 1: what tansu writes)."""
    left = len(frame) - start
    if left == 1:
        return frame[start] == 0
    return (
        left == 4
        and frame[start] == 1
        and frame[start + 1] == 0
        and frame[start + 2] == 1
        and frame[start + 3] == 1
    )
