"""The audit topic's spool: audit lines the topic could not take yet, on disk, sent oldest first.

A directory of numbered segment files (`000000000001.jsonl`, ...), each append-only JSON Lines
holding the audit lines exactly as docs/audit.md gives them, and a `position` file: how far the
lines have been delivered (segment and byte offset). The position is replaced atomically (a
temporary file, fsynced, renamed) only after the topic confirmed every line before it, and a
fully delivered segment is then deleted: a crash at any moment loses no line that was spooled,
and may send some again (at-least-once; docs/audit.md). Appends are fsynced per batch (`sync`).

Bounded: the segment files together stay under `max_bytes`; a line that would pass it is not
written and is counted by the caller as lost. One process per directory (an exclusive lock):
two writers would interleave their segments. Not thread-safe: one thread (the sink's) owns it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger("aclgate.audit")

SUFFIX = ".jsonl"


class SpoolError(OSError):
    """The spool directory cannot be used (locked by another process, not writable): the
    proxy does not start (`aclgate serve` says why in one line)."""


@dataclass(frozen=True, order=True)
class Mark:
    """A place in the spool: just after byte `offset` of segment `segment`."""

    segment: int
    offset: int


def _segment_name(number: int) -> str:
    return f"{number:012d}{SUFFIX}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AuditSpool:
    def __init__(self, directory: Path, max_bytes: int, segment_bytes: int | None = None) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        #: a segment is closed at this size, so delivered lines leave the disk before the
        #: whole spool is drained
        self.segment_bytes = segment_bytes or max(4096, min(64 << 20, max_bytes // 4))
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock = open(self.directory / "lock", "a")  # noqa: SIM115
        except OSError as exc:
            raise SpoolError(f"audit spool {self.directory}: {exc}") from None
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise SpoolError(
                f"audit spool {self.directory} is in use by another process (one spool per "
                "process: give each instance its own --audit-spool)"
            ) from None
        #: segment number -> its size in bytes
        self._sizes: dict[int, int] = {}
        self._writer: IO[bytes] | None = None
        self._dirty = False
        #: bytes of a line cut short by a crash, removed when the spool was opened
        self.repaired_bytes = 0
        self._position = self._read_position()
        self._open_segments()

    # ------------------------------------------------------------------ start

    def _read_position(self) -> Mark:
        path = self.directory / "position"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return Mark(int(data["segment"]), int(data["offset"]))
        except FileNotFoundError:
            return Mark(0, 0)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # written atomically, so this is damage from outside: resend everything there is
            # rather than skip lines (duplicates are allowed, losses are not)
            log.error(
                "audit spool %s: unreadable position file (%s): every spooled line is sent again",
                self.directory,
                exc,
            )
            return Mark(0, 0)

    def _open_segments(self) -> None:
        for path in self.directory.glob(f"*{SUFFIX}"):
            try:
                number = int(path.stem)
            except ValueError:
                continue
            if number < self._position.segment:
                path.unlink()  # delivered: a crash came between the position and the unlink
            else:
                self._sizes[number] = path.stat().st_size
        if self._sizes:
            self._repair_tail(max(self._sizes))
        pending = self.pending_bytes
        if pending:
            log.warning(
                "audit spool %s holds %d bytes not yet delivered: sending them first",
                self.directory,
                pending,
            )

    def _repair_tail(self, number: int) -> None:
        """A crash may have cut the last line short: drop the partial line, loudly."""
        path = self.directory / _segment_name(number)
        size = self._sizes[number]
        if size == 0:
            return
        with open(path, "rb+") as f:
            start = max(0, size - (1 << 20))
            while True:
                f.seek(start)
                tail = f.read(size - start)
                cut = tail.rfind(b"\n")
                if cut >= 0 or start == 0:
                    break
                start = max(0, start - (1 << 20))
            keep = start + cut + 1 if cut >= 0 else 0
            if keep == size:
                return
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
        self.repaired_bytes = size - keep
        self._sizes[number] = keep
        log.error(
            "audit spool %s: the last line of %s was cut short (a crash while writing it): "
            "%d bytes removed; that audit line is lost",
            self.directory,
            path.name,
            size - keep,
        )

    # ------------------------------------------------------------------ state

    @property
    def size(self) -> int:
        """Bytes of the segment files on disk (what `max_bytes` bounds)."""
        return sum(self._sizes.values())

    @property
    def pending_bytes(self) -> int:
        """Bytes of lines not yet delivered."""
        pos = self._position
        return sum(
            max(0, size - (pos.offset if number == pos.segment else 0))
            for number, size in self._sizes.items()
            if number >= pos.segment
        )

    @property
    def empty(self) -> bool:
        return self.pending_bytes == 0

    # ------------------------------------------------------------------ writing

    def append(self, lines: Iterable[str]) -> int:
        """Append lines (each ending in a newline); returns how many did not fit."""
        refused = 0
        for line in lines:
            data = line.encode("utf-8")
            if self.size + len(data) > self.max_bytes:
                refused += 1
                continue
            writer = self._current_writer()
            writer.write(data)
            self._sizes[self._writing] += len(data)
            self._dirty = True
            if self._sizes[self._writing] >= self.segment_bytes:
                self._close_writer()
        return refused

    def _current_writer(self) -> IO[bytes]:
        if self._writer is None:
            last = max(self._sizes, default=self._position.segment)
            # an existing last segment below the size limit is appended to; numbers never go
            # back, so the position can never point into a later, unrelated segment
            if last in self._sizes and self._sizes[last] < self.segment_bytes:
                self._writing = last
            else:
                self._writing = last + 1
                self._sizes[self._writing] = 0
            self._writer = open(self.directory / _segment_name(self._writing), "ab")  # noqa: SIM115
        return self._writer

    def _close_writer(self) -> None:
        if self._writer is not None:
            self.sync()
            self._writer.close()
            self._writer = None

    def sync(self) -> None:
        """Make the lines appended so far durable (one fsync for the batch)."""
        if self._writer is not None and self._dirty:
            self._writer.flush()
            os.fsync(self._writer.fileno())
            self._dirty = False

    # ------------------------------------------------------------------ reading

    def read(self, max_lines: int, max_bytes: int = 1 << 20) -> list[tuple[str, Mark]]:
        """Up to `max_lines` undelivered lines, oldest first, each with the mark just after it
        (commit a line's mark once it and every line before it is delivered)."""
        if self._writer is not None:
            self._writer.flush()
        out: list[tuple[str, Mark]] = []
        pos = self._position
        budget = max_bytes
        for number in sorted(n for n in self._sizes if n >= pos.segment):
            start = pos.offset if number == pos.segment else 0
            size = self._sizes[number]
            if start >= size:
                continue
            with open(self.directory / _segment_name(number), "rb") as f:
                f.seek(start)
                data = f.read(min(size - start, max(budget, 1)))
            end = data.rfind(b"\n")
            if end < 0:  # one line longer than the budget: read it whole
                with open(self.directory / _segment_name(number), "rb") as f:
                    f.seek(start)
                    data = f.readline()
                end = len(data) - 1
            offset = start
            for raw in data[: end + 1].splitlines(keepends=True):
                offset += len(raw)
                out.append((raw.decode("utf-8", errors="replace"), Mark(number, offset)))
                if len(out) >= max_lines:
                    return out
            budget -= end + 1
            if budget <= 0:
                return out
        return out

    def commit(self, mark: Mark) -> None:
        """Every line up to `mark` is delivered: record it atomically, then delete the
        segments it leaves behind."""
        if mark <= self._position:
            return
        tmp = self.directory / "position.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"segment": mark.segment, "offset": mark.offset}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / "position")
        _fsync_dir(self.directory)
        self._position = mark
        for number in sorted(self._sizes):
            done = number < mark.segment or (
                number == mark.segment and mark.offset >= self._sizes[number]
            )
            if not done:
                break
            if self._writer is not None and number == self._writing:
                self._writer.close()
                self._writer = None
                self._dirty = False
            (self.directory / _segment_name(number)).unlink(missing_ok=True)
            del self._sizes[number]

    def close(self) -> None:
        self._close_writer()
        self._lock.close()
