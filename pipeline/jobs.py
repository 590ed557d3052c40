"""The first stage every job shares: find the input, parse it once, account for every line."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aclgate.pipeline.inputs import expand_inputs
from aclgate.pipeline.kafkasource import KafkaInput
from aclgate.pipeline.malformed import malformed_lines, malformed_sample
from aclgate.pipeline.reader import AuditData, fine_stats, fine_table, line_stats, read_audit
from aclgate.pipeline.timeutil import iso

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from aclgate.pipeline.spark import Progress

MALFORMED_SAMPLE = 100


class InputError(ValueError):
    """An input path does not exist (a typo should not look like an empty report)."""


@dataclass
class LoadedAudit:
    data: AuditData
    summary: dict[str, Any]
    #: with load_audit(fine=True): reader.fine_table, persisted
    fine: DataFrame | None = None

    def release(self) -> None:
        if self.fine is not None:
            self.fine.unpersist()
        self.data.release()


def load_audit(
    spark: SparkSession,
    paths: list[str],
    progress: Progress,
    since: datetime | None = None,
    until: datetime | None = None,
    malformed_out: Path | None = None,
    kafka: KafkaInput | None = None,
    fine: bool = False,
) -> LoadedAudit:
    """Parse all input once (cached) and report malformed lines with file and line number.
    With `kafka`, the topic's records from the earliest to the latest offsets are read too.
    `fine`: the counts come from reader.fine_table, kept for the caller (the report)."""
    files = expand_inputs(paths)
    if files.missing:
        raise InputError("no such file or directory: " + ", ".join(files.missing))
    topic = f" and topic {kafka.topic} at {kafka.bootstrap}" if kafka else ""
    progress.step(
        f"reading {len(files.jsonl)} JSONL and {len(files.parquet)} Parquet file(s){topic}"
    )
    data = read_audit(spark, files, since, until, kafka)
    table = None
    if fine:
        from pyspark import StorageLevel

        table = fine_table(data, since, until).persist(StorageLevel.MEMORY_AND_DISK)
        stats = fine_stats(data, table)
    else:
        stats = line_stats(data)
    bad: dict[str, Any] = {"count": stats.pop("malformed"), "sample": []}
    if bad["count"]:
        frame = malformed_lines(data)
        if malformed_out is not None:
            frame.coalesce(1).write.mode("overwrite").json(str(malformed_out))
            bad["written_to"] = str(malformed_out)
        bad["sample"] = malformed_sample(frame, MALFORMED_SAMPLE)
        first = bad["sample"][0]
        progress.note(
            f"warning: {bad['count']} malformed line(s) skipped, e.g. "
            f"{first['file']}:{first['line']}: {first['reason']}"
            + (f" (all listed in {malformed_out})" if malformed_out else "")
        )
    stats["malformed"] = bad
    stats["window"] = {
        "since": iso(since) if since else None,
        "until": iso(until) if until else None,
    }
    return LoadedAudit(data=data, summary=stats, fine=table)
