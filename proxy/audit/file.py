"""The audit file sink: JSON Lines in a file rotated by size, rotated files gzipped.

The live file is PATH; a full one is renamed to PATH-<UTC timestamp>-<sequence>.jsonl and
gzipped in the background to .jsonl.gz; at most `keep` rotated files are kept (0, the default,
keeps all). Readers (the Spark pipeline) accept plain and .gz files. Urgent lines (denials, ACL
changes) reach the OS as they are written, so a crash of the proxy (kill -9, OOM) loses none;
the rest is flushed every second (`tick`).
"""

from __future__ import annotations

import datetime as dt
import gzip
import logging
import os
import shutil
import threading
from pathlib import Path

log = logging.getLogger("aclgate.audit")


class AuditFile:
    def __init__(
        self,
        path: Path,
        max_bytes: int = 100 * 1024 * 1024,
        keep: int = 0,
        compress: bool = True,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self.compress = compress
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        self._size = self._file.tell()
        self._sequence = 0
        self._compressors: list[threading.Thread] = []

    def write(self, line: str, key: str, urgent: bool) -> None:
        self._file.write(line)
        self._size += len(line)
        if urgent:
            # in the OS at once; the audit log's denial rate limit bounds these flushes
            self._file.flush()
        if self._size >= self.max_bytes:
            self.rotate()

    def tick(self) -> None:
        self._file.flush()

    def rotate(self) -> Path:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._sequence += 1
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        rotated = self.path.with_name(f"{self.path.stem}-{stamp}-{self._sequence:06d}.jsonl")
        os.replace(self.path, rotated)
        self._file = open(self.path, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        self._size = 0
        if self.compress:
            worker = threading.Thread(target=self._gzip, args=(rotated,), daemon=True)
            worker.start()
            self._compressors = [t for t in self._compressors if t.is_alive()] + [worker]
        else:
            self._prune()
        return rotated

    def _gzip(self, path: Path) -> None:
        target = path.with_suffix(".jsonl.gz")
        tmp = target.with_name(target.name + ".tmp")
        try:
            with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(tmp, target)
            path.unlink()
        except OSError as exc:
            log.error("could not compress rotated audit file %s: %s (kept uncompressed)", path, exc)
        self._prune()

    def _prune(self) -> None:
        if self.keep <= 0:  # keep everything (the default): the analytics jobs read these
            return
        rotated = sorted(self.path.parent.glob(f"{self.path.stem}-*.jsonl*"))
        rotated = [p for p in rotated if not p.name.endswith(".tmp")]
        for old in rotated[: max(0, len(rotated) - self.keep)]:
            try:
                old.unlink()
            except OSError:
                pass

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        for worker in self._compressors:
            worker.join(30)
