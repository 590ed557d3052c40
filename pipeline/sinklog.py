"""Which files of a Spark streaming file sink's output are committed.

A streaming query writing Parquet or JSON files (the `events/`, `denials/` and `acl_usage/`
tables of `aclgate stream`) writes each micro-batch's files first and then commits the batch by
adding one log file to `_spark_metadata/` in the output directory, listing those files. Files
a killed job wrote but never committed stay on disk; the restarted job writes that batch
again. Reading the directory's files directly would count such a batch twice, so readers
take only the files the log lists: that is what makes the sink exactly-once.

Log layout (Spark's FileStreamSinkLog, format version 1): files named by batch id, `N`, and
every 10th batch a compaction `N.compact` that repeats everything committed up to N (older
batch files may then be deleted). Each file is the line `v1` followed by one JSON object per
line: `path` (a URI), `size`, `isDir`, `modificationTime`, `blockReplication`, `blockSize` and
`action` (`add`, or `delete` for a file that no longer belongs to the output).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

SINK_LOG = "_spark_metadata"
VERSION = "v1"


class SinkLogError(ValueError):
    """A sink log we cannot read: better to stop than to count a table wrongly."""


def is_sink_dir(directory: Path) -> bool:
    return (directory / SINK_LOG).is_dir()


def _batch_files(log: Path) -> dict[int, Path]:
    """Batch id -> its log file; `N.compact` stands for batch N. Temp files are skipped."""
    batches: dict[int, Path] = {}
    for entry in log.iterdir():
        stem, _, suffix = entry.name.partition(".")
        if stem.isdigit() and suffix in ("", "compact"):
            batches[int(stem)] = entry
    return batches


def _records(path: Path) -> list[dict]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].strip() != VERSION:
        raise SinkLogError(f"{path}: not a Spark sink log of version {VERSION}")
    try:
        return [json.loads(line) for line in lines[1:] if line.strip()]
    except json.JSONDecodeError as exc:
        raise SinkLogError(f"{path}: {exc}") from None


def local_path(uri: str) -> str:
    """`file:///a/date%3Dx/f.parquet` -> `/a/date=x/f.parquet`; other schemes unchanged."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return uri


def _log_entries(sink_dir: Path) -> list[tuple[int, list[dict]]]:
    """(batch id, its records) for the batches still in the log, oldest first, starting at
    the newest compaction (which repeats everything committed up to it)."""
    batches = _batch_files(sink_dir / SINK_LOG)
    start = max((i for i, p in batches.items() if p.name.endswith(".compact")), default=-1)
    return [(i, _records(batches[i])) for i in sorted(batches) if i >= start]


def committed_batches(sink_dir: Path, after: int = -1) -> list[tuple[int, list[str]]]:
    """(batch id, data files it added) for the committed batches newer than `after`."""
    return [
        (batch, [local_path(r["path"]) for r in records if r.get("action", "add") == "add"])
        for batch, records in _log_entries(sink_dir)
        if batch > after
    ]


def committed_files(sink_dir: Path) -> list[str]:
    """Every data file the sink has committed and not deleted since, in a stable order."""
    live: dict[str, None] = {}
    for _, records in _log_entries(sink_dir):
        for record in records:
            path = local_path(record["path"])
            if record.get("action", "add") == "delete":
                live.pop(path, None)
            elif not record.get("isDir"):
                live[path] = None
    return sorted(live)


def last_batch(sink_dir: Path) -> int:
    """The id of the newest committed batch, -1 before the first."""
    log = sink_dir / SINK_LOG
    return max(_batch_files(log), default=-1) if log.is_dir() else -1


def commit_time(sink_dir: Path, batch: int) -> float:
    """When the batch was committed (its log file's modification time, epoch seconds)."""
    path = _batch_files(sink_dir / SINK_LOG)[batch]
    return os.stat(path).st_mtime
