"""Reading audit events: explicit schema, every line accounted for.

Each input line ends up in exactly one of four piles: blank, another kind of event than a
decision (`acl_change` lines: counted, not read), malformed (with the reason, its file and line
number) or a valid decision event. Malformed lines are counted and listed, never
dropped silently and never fatal. A line may be of any of the three formats of `--audit-format`
(aclgate, CloudEvents, OCSF: pipeline/formats.py), told apart line by line and read as the
aclgate event. Text input (JSON Lines, the audit topic) is parsed once and
cached on local disk (DISK_ONLY: millions of lines would not fit a default 1 GB heap, and
re-reading the compact columnar cache is far cheaper than parsing the JSON again), so the
several aggregations of a report parse the JSON only once. Parquet input is not cached: each
aggregation scans it again, which costs less than copying every row into a cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aclgate.pipeline.formats import parse_line
from aclgate.pipeline.inputs import InputFiles, display_path
from aclgate.pipeline.kafkasource import KafkaInput, read_topic
from aclgate.pipeline.schema import (
    CORRUPT_COLUMN,
    DECISIONS,
    KEY_FIELDS,
    OPERATIONS,
    REQUIRED_STRINGS,
    RESOURCE_TYPES,
    SCHEMA_VERSION,
    audit_schema,
    key_groups,
)
from aclgate.pipeline.timeutil import from_micros

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

# Columns kept per line after parsing (the cache). Raw text is kept only for bad lines.
EVENT_COLUMNS = (
    "ts",
    "ts_first",
    "count",
    "proxy",
    "principal",
    "groups",  # canonical (schema.key_groups): [] for none and for lines without the field
    "host",
    "client_id",
    "api",
    "operation",
    "resource_type",
    "resource_name",
    "decision",
    "enforced",
    "rule",
    "acl",
)
RAW_TEXT_LIMIT = 400


@dataclass
class AuditData:
    """The parsed input: `lines` (every line, cached) and `events` (valid, in the window)."""

    lines: DataFrame
    events: DataFrame
    files: InputFiles
    kafka: KafkaInput | None = None

    def release(self) -> None:
        self.lines.unpersist()


def parse_json(text: Column) -> Column:
    """One JSON line, of any format, to the audit struct (pipeline/formats.py); what does not
    parse lands in the corrupt column."""
    return parse_line(text)


def kafka_lines(records: DataFrame) -> DataFrame:
    """Kafka records (the connector's columns) as lines: each value is one JSON line."""
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    return records.select(
        text.alias("_raw"),
        parse_json(text).alias("_json"),
        # a malformed record is reported as `kafka:TOPIC/PARTITION`, line = its offset
        F.concat(F.lit("kafka:"), "topic", F.lit("/"), F.col("partition").cast("string")).alias(
            "_file"
        ),
        F.lit(None).cast("long").alias("_block"),
        (F.col("offset") - 1).alias("_row"),
    )


def _line_frame(
    spark: SparkSession, files: InputFiles, kafka: KafkaInput | None = None
) -> DataFrame:
    """One row per input line/record: _raw text, _json struct, and where it came from."""
    from pyspark.sql import functions as F

    frames = []
    if kafka is not None:
        frames.append(kafka_lines(read_topic(spark, kafka)))
    if files.jsonl:
        text = spark.read.text(files.jsonl)
        frames.append(
            text.select(
                F.col("value").alias("_raw"),
                parse_json(F.col("value")).alias("_json"),
                F.col("_metadata.file_path").alias("_file"),
                F.col("_metadata.file_block_start").alias("_block"),
                F.lit(None).cast("long").alias("_row"),
            )
        )
    if files.parquet:
        # _corrupt_record: `aclgate stream` keeps the text of a record that was not JSON of
        # the schema there (other Parquet has no such column: null)
        table = spark.read.schema(audit_schema(with_corrupt_column=True)).parquet(*files.parquet)
        record = F.struct(*[F.col(f.name) for f in audit_schema(with_corrupt_column=True)])
        frames.append(
            table.select(
                # no text but a kept corrupt record's: a bad row's text is rebuilt from its
                # fields (`_text` below), so good rows are not turned into JSON for nothing
                F.col(CORRUPT_COLUMN).alias("_raw"),
                record.alias("_json"),
                F.col("_metadata.file_path").alias("_file"),
                F.col("_metadata.file_block_start").alias("_block"),
                F.col("_metadata.row_index").alias("_row"),
            )
        )
    if not frames:
        return spark.createDataFrame(
            [],
            "_raw string, _json "
            + audit_schema(with_corrupt_column=True).simpleString()
            + ", _file string, _block long, _row long",
        )
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    # Line numbers are derived from this id only for bad lines (see malformed.py).
    return frame.withColumn("_mid", F.monotonically_increasing_id())


def _first_problem(j: Column, ts: Column, ts_first: Column) -> Column:
    """The first reason a parsed line is not a usable event, or null when it is one."""
    from pyspark.sql import functions as F

    def bad_value(name: str, allowed: tuple[str, ...]) -> tuple[Column, Column]:
        return (
            ~j[name].isin(*allowed),
            F.concat(F.lit(f"unknown {name} '"), j[name], F.lit("'")),
        )

    checks: list[tuple[Column, Any]] = [
        (j[CORRUPT_COLUMN].isNotNull(), "not a JSON object of the audit schema"),
        (j["schema_version"].isNull(), "missing schema_version"),
        (
            j["schema_version"] != SCHEMA_VERSION,
            F.concat(F.lit("unsupported schema_version "), j["schema_version"].cast("string")),
        ),
        (j["ts"].isNull(), "missing ts"),
        (ts.isNull(), F.concat(F.lit("bad ts '"), j["ts"], F.lit("'"))),
        (
            j["ts_first"].isNotNull() & ts_first.isNull(),
            F.concat(F.lit("bad ts_first '"), j["ts_first"], F.lit("'")),
        ),
        (j["count"].isNull(), "missing count"),
        (j["count"] < 1, F.concat(F.lit("count < 1: "), j["count"].cast("string"))),
        *[(j[name].isNull(), f"missing {name}") for name in REQUIRED_STRINGS],
        (j["enforced"].isNull(), "missing enforced"),
        bad_value("decision", DECISIONS),
        bad_value("operation", OPERATIONS),
        bad_value("resource_type", RESOURCE_TYPES),
    ]
    return F.coalesce(
        *[F.when(cond, msg if not isinstance(msg, str) else F.lit(msg)) for cond, msg in checks]
    )


def validated(raw: Column, j: Column) -> dict[str, Column]:
    """What every line becomes, for the batch reader and the stream alike: `_blank`, `_other`
    (another event kind), `_error` (the first problem, null for a usable event), `_text` (the
    line, for bad ones only), then EVENT_COLUMNS with `ts`/`ts_first` parsed and `groups` in its
    key form (schema.key_groups). Not aliased."""
    from pyspark.sql import functions as F

    ts = F.try_to_timestamp(j["ts"])
    ts_first = F.try_to_timestamp(j["ts_first"])
    blank = F.coalesce(F.trim(raw) == "", F.lit(False))
    other = F.coalesce(j["event"].isNotNull() & j[CORRUPT_COLUMN].isNull(), F.lit(False))
    problem = F.when(blank | other, F.lit(None)).otherwise(_first_problem(j, ts, ts_first))
    text = F.coalesce(raw, F.to_json(F.struct(*[j[f.name] for f in audit_schema()])))
    return {
        "_blank": blank,
        "_other": other,
        "_error": problem,
        "_text": F.when(problem.isNotNull(), F.substring(text, 1, RAW_TEXT_LIMIT)),
        "ts": ts,
        "ts_first": ts_first,
        **{name: j[name] for name in EVENT_COLUMNS if name not in ("ts", "ts_first")},
        "groups": key_groups(j["groups"]),
    }


def usable() -> Column:
    """A valid decision event: not blank, not another event kind, not malformed."""
    from pyspark.sql import functions as F

    return F.col("_error").isNull() & ~F.col("_blank") & ~F.col("_other")


def parses_text(files: InputFiles, kafka: KafkaInput | None) -> bool:
    """Whether the input is JSON text (JSON Lines, the topic): then the parsed lines are
    cached, as parsing is the costly part. Parquet alone is read again by each pass instead:
    its columnar scan is cheaper than writing and reading back a copy of every row (10 M
    events from the stream's Parquet: 117 s to fill the cache, docs/pipeline.md)."""
    return bool(files.jsonl) or kafka is not None


def read_audit(
    spark: SparkSession,
    files: InputFiles,
    since: datetime | None = None,
    until: datetime | None = None,
    kafka: KafkaInput | None = None,
) -> AuditData:
    """Parse and validate every line (once, cached, for text input: `parses_text`); `events`
    are the valid ones in the window."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    raw = _line_frame(spark, files, kafka)
    lines = raw.select(
        F.col("_file"),
        F.col("_block"),
        F.col("_row"),
        F.col("_mid"),
        *[c.alias(n) for n, c in validated(F.col("_raw"), F.col("_json")).items()],
    )
    if parses_text(files, kafka):
        lines = lines.persist(StorageLevel.DISK_ONLY)
    events = lines.filter(usable()).select(*EVENT_COLUMNS)
    if since is not None:
        events = events.filter(F.col("ts") >= F.lit(since))
    if until is not None:
        events = events.filter(F.col("ts") < F.lit(until))
    return AuditData(lines=lines, events=events, files=files, kafka=kafka)


#: what the report slices events on: the columns of the fine table besides the piles
FINE_KEYS = (*KEY_FIELDS, "api", "decision", "enforced", "rule", "acl", "client_id")


def fine_table(data: AuditData, since: datetime | None, until: datetime | None) -> DataFrame:
    """Every line in one pass, grouped by its pile (`_blank`, `_other`, `_bad`, and `_event`:
    a valid event inside the window) and by FINE_KEYS, with `events` (the sum of `count`),
    `lines`, `first_seen` and `last_seen`. Millions of lines become as many rows as distinct
    request shapes, from which the line counts (`fine_stats`) and the report's event tables
    are cheap queries, instead of one pass over the input each."""
    from pyspark.sql import functions as F

    good = usable()
    event = good
    if since is not None:
        event = event & (F.col("ts") >= F.lit(since))
    if until is not None:
        event = event & (F.col("ts") < F.lit(until))
    return data.lines.groupBy(
        F.col("_blank"),
        F.col("_other"),
        F.col("_error").isNotNull().alias("_bad"),
        F.coalesce(event, F.lit(False)).alias("_event"),
        *FINE_KEYS,
    ).agg(
        F.sum("count").alias("events"),
        F.count(F.lit(1)).alias("lines"),
        F.min(F.coalesce("ts_first", "ts")).alias("first_seen"),
        F.max("ts").alias("last_seen"),
    )


def fine_stats(data: AuditData, fine: DataFrame) -> dict[str, Any]:
    """line_stats, from the fine table instead of the lines."""
    from pyspark.sql import functions as F

    good = ~F.col("_bad") & ~F.col("_blank") & ~F.col("_other")
    row = fine.agg(
        F.sum("lines").alias("lines"),
        F.sum(F.when(F.col("_blank"), F.col("lines"))).alias("blank"),
        F.sum(F.when(F.col("_other"), F.col("lines"))).alias("other_events"),
        F.sum(F.when(F.col("_bad"), F.col("lines"))).alias("malformed"),
        F.sum(F.when(good, F.col("lines"))).alias("valid"),
        F.min(F.when(good, F.unix_micros("first_seen"))).alias("first"),
        F.max(F.when(good, F.unix_micros("last_seen"))).alias("last"),
    ).first()
    assert row is not None  # an aggregate without grouping has exactly one row
    return _stats(data, {k: row[k] or 0 for k in PILES}, row["first"], row["last"])


PILES = ("lines", "blank", "other_events", "malformed", "valid")


def _stats(
    data: AuditData, counts: dict[str, int], first: int | None, last: int | None
) -> dict[str, Any]:
    return {
        **counts,
        "first_ts": from_micros(first),
        "last_ts": from_micros(last),
        "files": {
            "jsonl": [display_path(p) for p in data.files.jsonl],
            "parquet": [display_path(p) for p in data.files.parquet],
        },
        "kafka": data.kafka.describe() if data.kafka else None,
    }


def line_stats(data: AuditData) -> dict[str, Any]:
    """Counts of every pile (one pass over the lines; for text input it also fills the cache)."""
    from pyspark.sql import functions as F

    good = usable()
    row = data.lines.agg(
        F.count(F.lit(1)).alias("lines"),
        F.count(F.when(F.col("_blank"), 1)).alias("blank"),
        F.count(F.when(F.col("_other"), 1)).alias("other_events"),
        F.count(F.when(F.col("_error").isNotNull(), 1)).alias("malformed"),
        F.count(F.when(good, 1)).alias("valid"),
        F.min(F.when(good, F.unix_micros(F.coalesce("ts_first", "ts")))).alias("first"),
        F.max(F.when(good, F.unix_micros("ts"))).alias("last"),
    ).first()
    assert row is not None  # an aggregate without grouping has exactly one row
    return _stats(data, {k: row[k] for k in PILES}, row["first"], row["last"])
