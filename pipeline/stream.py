"""`aclgate stream`: the audit topic, continuously, into tables the batch jobs read.

Three Structured Streaming queries, each with its own checkpoint under --checkpoint:

  events     Kafka -> every decision record, as Parquet partitioned by `date` (the audit
             schema's columns, so `report`/`advise`/`whatif --audit OUT/events` read it, plus
             `event_time`, the record's Kafka topic/partition/offset/timestamp, and for a
             record that is not a valid event `malformed` (the reason) and `_corrupt_record`
             (the text, when it is not JSON of the schema); blank records and other event
             kinds (`acl_change`) are skipped). The JSON is parsed once, here; a record may
             be of any --audit-format (aclgate, CloudEvents, OCSF: pipeline/formats.py), and
             events/ holds the aclgate event whatever the record's format.
  denials    events -> denied decisions per event-time window, principal and resource
             (sum of `count`), with `alert` when the window reaches --alert-threshold
  acl_usage  events -> per window and ACL, the decisions the audit names it for (the
             `decisions`/`allowed`/`denied`/`first_used`/`last_used` of `report`)

All sinks are Spark file sinks: a micro-batch's files count only once the sink's log
(`_spark_metadata/`) lists them, and the checkpoint records which Kafka offsets (or event
files) each batch read, so a job killed at any moment and restarted with the same checkpoint
writes every batch exactly once. The windowed tables use append mode with a watermark: a
window is written once, when the watermark (the newest event time minus --watermark) has
passed its end, and never revised, so a restart cannot count it twice. Events later than the
watermark are still in `events/` but not in the windows. The windows read `events/` rather
than Kafka, so the JSON is parsed once for them.

The alert lines come from the driver: after each batch it reads the newly committed
`denials/` files, prints each alerting window on stderr and appends it to `alerts.jsonl`
(each file once, also across restarts: the processed files are recorded beside it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aclgate.pipeline.acl_usage import named_usage
from aclgate.pipeline.kafkasource import KafkaInput, stream_topic
from aclgate.pipeline.reader import parse_json, validated
from aclgate.pipeline.schema import CORRUPT_COLUMN, audit_schema
from aclgate.pipeline.sinklog import SINK_LOG, committed_batches

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

    from aclgate.pipeline.spark import Progress

TABLES = ("events", "denials", "acl_usage")
ALERTS_FILE = "alerts.jsonl"
ALERTS_DONE = ".alerts-done.json"
KAFKA_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp")
DENIAL_KEY = ("principal", "resource_type", "resource_name")


@dataclass
class StreamOptions:
    kafka: KafkaInput
    out: str
    checkpoint: str | None = None  # default OUT/_checkpoints
    window: str = "1 minute"
    watermark: str = "1 minute"
    alert_threshold: int = 100
    trigger_seconds: float = 2.0  # 0: start the next batch as soon as one ends
    available_now: bool = False  # read what the topic holds now, write it, stop
    max_offsets_per_trigger: int | None = None
    stop_after: float | None = None  # seconds; None: until interrupted

    def paths(self) -> tuple[Path, Path]:
        out = Path(self.out).expanduser().resolve()
        checkpoint = Path(self.checkpoint).expanduser().resolve() if self.checkpoint else None
        return out, checkpoint or out / "_checkpoints"


def events_schema() -> StructType:
    """The events/ table: the audit schema, then the parsed time and where the record was."""
    from pyspark.sql.types import (
        DateType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    extra = [
        StructField(CORRUPT_COLUMN, StringType()),
        StructField("malformed", StringType()),
        StructField("event_time", TimestampType()),
        StructField("kafka_topic", StringType()),
        StructField("kafka_partition", IntegerType()),
        StructField("kafka_offset", LongType()),
        StructField("kafka_timestamp", TimestampType()),
        StructField("date", DateType()),
    ]
    return StructType(list(audit_schema().fields) + extra)


def checked_records(records: DataFrame) -> DataFrame:
    """Kafka records -> each with its verdict (`_error`, `_blank`, `_other`, `_text`), the
    audit fields as sent and `event_time` (the parsed `ts`): the batch reader's rules."""
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    # The JSON is parsed in a Generate (explode of a one-element array; never drops a row):
    # from a plain projection, Spark pushes event_records' filter below it and parses every
    # record twice more (bench/stream_ingest.py: the ingest costs about 30% more CPU).
    parsed = records.select(
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        text.alias("_raw"),
        F.explode(F.array(parse_json(text))).alias("_json"),
    )
    j = F.col("_json")
    v = validated(F.col("_raw"), j)
    return parsed.select(
        *KAFKA_COLUMNS,
        *[v[name].alias(name) for name in ("_blank", "_other", "_error", "_text")],
        *[j[f.name].alias(f.name) for f in audit_schema()],
        j[CORRUPT_COLUMN].alias(CORRUPT_COLUMN),
        v["ts"].alias("event_time"),
    )


def event_records(checked: DataFrame) -> DataFrame:
    """The events/ rows: valid events and malformed records (with the reason), not blank
    records or other event kinds. Keeping the malformed ones here (rather than in a table of
    their own) saves a second query parsing every record: the batch reader finds them again
    by the same rules and lists them with their file and row."""
    from pyspark.sql import functions as F

    # no event time for a malformed record: a bad `ts` must not move the watermark
    event_time = F.when(F.col("_error").isNull(), F.col("event_time"))
    return checked.filter(~F.col("_blank") & ~F.col("_other")).select(
        *[f.name for f in audit_schema()],
        CORRUPT_COLUMN,
        F.col("_error").alias("malformed"),
        event_time.alias("event_time"),
        *KAFKA_COLUMNS,
        F.to_date(event_time).alias("date"),
    )


def denial_windows(events: DataFrame, window: str, watermark: str, threshold: int) -> DataFrame:
    """Denied decisions (sum of `count`) per window, principal and resource; `alert` marks
    the windows at or over the threshold."""
    from pyspark.sql import functions as F

    # Allowed events are not filtered out (Spark would move that filter ahead of the
    # watermark, which would then follow denials only and leave windows open until the next
    # denial): they fall into one keyless group per window, dropped after the aggregation.
    denied = (F.col("decision") == "DENIED") & F.col("malformed").isNull()
    enforced = F.col("enforced")
    counts = (
        events.withWatermark("event_time", watermark)
        .groupBy(
            F.window("event_time", window).alias("window"),
            *[F.when(denied, F.col(name)).alias(name) for name in DENIAL_KEY],
        )
        .agg(
            F.sum(F.when(denied, F.col("count")).otherwise(0)).alias("denied"),
            F.sum(F.when(denied & enforced, F.col("count")).otherwise(0)).alias("denied_enforced"),
            F.sum(F.when(denied & ~enforced, F.col("count")).otherwise(0)).alias("denied_dry_run"),
            F.count(F.when(denied, 1)).alias("lines"),
        )
        .filter(F.col("denied") > 0)
    )
    return counts.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        *DENIAL_KEY,
        "denied",
        "denied_enforced",
        "denied_dry_run",
        "lines",
        (F.col("denied") >= threshold).alias("alert"),
    )


def acl_usage_windows(events: DataFrame, window: str, watermark: str) -> DataFrame:
    """Per window and ACL: what `report`'s acl_usage counts (acl_usage.named_usage)."""
    from pyspark.sql import functions as F

    # a malformed row's rule is made null: it then falls into the keyless group
    timed = (
        events.withWatermark("event_time", watermark)
        .withColumn("window", F.window("event_time", window))
        .withColumn("rule", F.when(F.col("malformed").isNull(), F.col("rule")))
    )
    first = F.coalesce(F.try_to_timestamp(F.col("ts_first")), F.col("event_time"))
    usage = named_usage(timed, F.col("count"), first, F.col("event_time"), by=("window",))
    return usage.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        *[c for c in usage.columns if c != "window"],
    )


class AlertTail:
    """Turns newly committed alerting windows of denials/ into alert lines, each file once."""

    def __init__(self, spark: SparkSession, out: Path, threshold: int, progress: Progress):
        self.spark = spark
        self.denials = out / "denials"
        self.alerts = out / ALERTS_FILE
        self.state = out / ALERTS_DONE
        self.threshold = threshold
        self.progress = progress
        self.done: set[str] = set()
        if self.state.exists():
            self.done.update(json.loads(self.state.read_text()))
        if self.alerts.exists():
            # lines appended before a kill, whose file was not yet recorded as done
            for line in self.alerts.read_text(encoding="utf-8").splitlines():
                try:
                    self.done.add(json.loads(line)["file"])
                except (ValueError, KeyError):
                    pass  # a line cut by the kill: its file is processed again

    def poll(self) -> int:
        """Handle the files committed since the last call; returns how many alerts."""
        if not (self.denials / SINK_LOG).is_dir():
            return 0
        new = [
            f for _, files in committed_batches(self.denials) for f in files if f not in self.done
        ]
        if not new:
            return 0
        from pyspark.sql import functions as F

        rows = (
            self.spark.read.parquet(*new)
            .filter(F.col("alert"))
            .select(
                "*",
                F.unix_micros("window_start").alias("_start"),
                F.unix_micros("window_end").alias("_end"),
                F.col("_metadata.file_path").alias("_file"),
            )
            .orderBy("window_start", *DENIAL_KEY)
            .collect()
        )
        alerts = [_alert(row, self.threshold) for row in rows]
        if alerts:
            text = "".join(json.dumps(a) + "\n" for a in alerts)
            self._drop_torn_line()
            with self.alerts.open("a", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            for a in alerts:
                self.progress.note(
                    f"ALERT {a['window_start']} .. {a['window_end']}: {a['principal']} "
                    f"denied {a['denied']:,} times on {a['resource_type']} "
                    f"{a['resource_name']} (threshold {self.threshold:,})"
                )
        self.done.update(new)
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(sorted(self.done)))
        tmp.replace(self.state)
        return len(alerts)

    def _drop_torn_line(self) -> None:
        if self.alerts.exists():
            data = self.alerts.read_bytes()
            if data and not data.endswith(b"\n"):
                self.alerts.write_bytes(data[: data.rfind(b"\n") + 1])


def _alert(row: Any, threshold: int) -> dict[str, Any]:
    from aclgate.pipeline.sinklog import local_path
    from aclgate.pipeline.timeutil import from_micros

    return {
        "alert": "denials",
        "window_start": from_micros(row["_start"]),
        "window_end": from_micros(row["_end"]),
        **{name: row[name] for name in DENIAL_KEY},
        "denied": row["denied"],
        "denied_enforced": row["denied_enforced"],
        "denied_dry_run": row["denied_dry_run"],
        "threshold": threshold,
        "file": local_path(row["_file"]),
    }


def _start(
    frame: DataFrame,
    name: str,
    fmt: str,
    out: Path,
    checkpoint: Path,
    opts: StreamOptions,
    partition_by: tuple[str, ...] = (),
) -> StreamingQuery:
    writer = (
        frame.writeStream.queryName(name)
        .format(fmt)
        .outputMode("append")
        .option("path", str(out / name))
        .option("checkpointLocation", str(checkpoint / name))
    )
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    if opts.available_now:
        writer = writer.trigger(availableNow=True)
    elif opts.trigger_seconds > 0:
        writer = writer.trigger(processingTime=f"{opts.trigger_seconds} seconds")
    return writer.start()


def _wait_for_sink(path: Path, query: StreamingQuery, timeout: float = 120) -> None:
    """The windows read events/ through its sink log, which the events query creates when it
    starts; until then a file source would take every file it lists as committed."""
    deadline = time.monotonic() + timeout
    while not (path / SINK_LOG).is_dir():
        if not query.isActive:
            raise RuntimeError(f"the events query stopped: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path / SINK_LOG} did not appear within {timeout:.0f} s")
        time.sleep(0.1)


class _Stop:
    """SIGTERM/SIGINT end the loop; the queries are then stopped between batches' writes."""

    def __init__(self) -> None:
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._set)

    def _set(self, *_: object) -> None:
        self.requested = True


def run_stream(spark: SparkSession, opts: StreamOptions, progress: Progress) -> dict[str, Any]:
    """Start the queries and keep them running (or, with available_now, drain the topic)."""
    out, checkpoint = opts.paths()
    out.mkdir(parents=True, exist_ok=True)
    progress.step(
        f"reading {opts.kafka.topic} at {opts.kafka.bootstrap} into {out} (checkpoint {checkpoint})"
    )
    checked = checked_records(stream_topic(spark, opts.kafka, opts.max_offsets_per_trigger))
    ingest = [_start(event_records(checked), "events", "parquet", out, checkpoint, opts, ("date",))]
    _wait_for_sink(out / "events", ingest[0])
    if opts.available_now:  # the windows must see everything the ingest wrote
        for query in ingest:
            query.awaitTermination()
    progress.step(f"windows of {opts.window} (watermark {opts.watermark}) from {out / 'events'}")
    events = spark.readStream.schema(events_schema()).parquet(str(out / "events"))
    windows = [
        _start(
            denial_windows(events, opts.window, opts.watermark, opts.alert_threshold),
            "denials",
            "parquet",
            out,
            checkpoint,
            opts,
        ),
        _start(
            acl_usage_windows(events, opts.window, opts.watermark),
            "acl_usage",
            "parquet",
            out,
            checkpoint,
            opts,
        ),
    ]
    queries = ingest + windows
    tail = AlertTail(spark, out, opts.alert_threshold, progress)
    stats = _Stats(queries, progress)
    try:
        if opts.available_now:
            for query in windows:
                query.awaitTermination()
            stats.poll()
            tail.poll()
        else:
            stop = _Stop()
            started = time.monotonic()
            while not stop.requested:
                if opts.stop_after is not None and time.monotonic() - started >= opts.stop_after:
                    break
                for query in queries:
                    if not query.isActive:
                        error = query.exception()
                        raise RuntimeError(f"query {query.name} stopped: {error}")
                time.sleep(min(1.0, max(0.2, opts.trigger_seconds / 2)))
                stats.poll()
                tail.poll()
    finally:
        for query in queries:
            with contextlib.suppress(Exception):  # the JVM may be shutting down already
                query.stop()
    return {"out": str(out), "checkpoint": str(checkpoint), **stats.totals}


class _Stats:
    """One progress line per new batch of a query, and running totals."""

    def __init__(self, queries: list[StreamingQuery], progress: Progress) -> None:
        self.queries = queries
        self.progress = progress
        self.seen: dict[str, set[int]] = {q.name: set() for q in queries}
        self.totals: dict[str, int] = {f"{q.name}_rows_read": 0 for q in queries}

    def poll(self) -> None:
        for query in self.queries:
            for p in query.recentProgress:
                batch = p["batchId"]
                if batch in self.seen[query.name]:
                    continue
                self.seen[query.name].add(batch)
                rows = int(p.get("numInputRows") or 0)
                self.totals[f"{query.name}_rows_read"] += rows
                if rows and query.name == "events":
                    rate = p.get("processedRowsPerSecond") or 0
                    self.progress.note(
                        f"events batch {batch}: {rows:,} records, {rate:,.0f} records/s"
                    )
