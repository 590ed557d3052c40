"""The report's tables, all derived from one grouped table of the lines.

Grouping every line once by its pile and everything the report slices on (the fine table,
reader.fine_table) turns millions of lines into at most a few hundred thousand rows; access,
denials, top-N lists and ACL usage are then cheap queries over that, and only the timeline
reads the events again. Every sum is over `count`, because one aggregated line stands for
`count` identical decisions.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aclgate.pipeline.schema import KEY_FIELDS
from aclgate.pipeline.timeutil import from_micros

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# A sensible number of points on the decisions-over-time chart.
TIMELINE_POINTS = 120
BUCKET_SECONDS = (
    1,
    5,
    10,
    30,
    60,
    300,
    600,
    900,
    1800,
    3600,
    3 * 3600,
    6 * 3600,
    12 * 3600,
    86400,
    7 * 86400,
)


def _seen() -> list[Column]:
    from pyspark.sql import functions as F

    return [F.min("first_seen").alias("first_seen"), F.max("last_seen").alias("last_seen")]


def grouped_events(fine: DataFrame) -> DataFrame:
    """The events (of the window) grouped by decision key, API, outcome and deciding ACL: the
    report's base, from the fine table (reader.fine_table)."""
    from pyspark.sql import functions as F

    return (
        fine.filter(F.col("_event"))
        .groupBy(*KEY_FIELDS, "api", "decision", "enforced", "rule", "acl")
        .agg(F.sum("events").alias("events"), F.sum("lines").alias("lines"), *_seen())
    )


def access_table(base: DataFrame) -> DataFrame:
    """access/: who did what to which resource, with what decision, how often, when."""
    from pyspark.sql import functions as F

    return base.groupBy(*KEY_FIELDS, "decision").agg(
        F.sum("events").alias("count"),
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
    )


def denied_table(fine: DataFrame) -> DataFrame:
    """denied/: each denied request shape, whether it was enforced, and which client sent it."""
    from pyspark.sql import functions as F

    return (
        fine.filter(F.col("_event") & (F.col("decision") == "DENIED"))
        .groupBy(*KEY_FIELDS, "client_id", "api", "enforced", "rule")
        .agg(F.sum("events").alias("count"), *_seen())
        .orderBy(F.desc("count"), *KEY_FIELDS)
    )


def totals(base: DataFrame) -> dict[str, Any]:
    """Event totals by decision, enforcement and rule, and how many distinct things were seen."""
    from pyspark.sql import functions as F

    outcomes = (
        base.groupBy("decision", "enforced", "rule")
        .agg(
            F.sum("events").alias("events"),
            F.sum("lines").alias("lines"),
            F.min(F.unix_micros("first_seen")).alias("first"),
            F.max(F.unix_micros("last_seen")).alias("last"),
        )
        .collect()
    )
    distinct = base.agg(
        F.countDistinct("principal").alias("principals"),
        F.countDistinct("resource_type", "resource_name").alias("resources"),
        F.countDistinct(*KEY_FIELDS).alias("decision_keys"),
    ).first()
    assert distinct is not None  # an aggregate without grouping has exactly one row

    def total(rows: list, column: str = "events") -> int:
        return sum(r[column] for r in rows)

    denied = [r for r in outcomes if r["decision"] == "DENIED"]
    rules: dict[str, int] = {}
    for r in outcomes:
        rules[r["rule"] or "NONE"] = rules.get(r["rule"] or "NONE", 0) + r["events"]
    firsts = [r["first"] for r in outcomes if r["first"] is not None]
    lasts = [r["last"] for r in outcomes if r["last"] is not None]
    return {
        "events": total(outcomes),
        "lines": total(outcomes, "lines"),
        "decisions": {"ALLOWED": total(outcomes) - total(denied), "DENIED": total(denied)},
        "denied_enforced": total([r for r in denied if r["enforced"]]),
        "denied_dry_run": total([r for r in denied if not r["enforced"]]),
        "rules": dict(sorted(rules.items())),
        "distinct": distinct.asDict(),
        "time_range": {
            "first": from_micros(min(firsts)) if firsts else None,
            "last": from_micros(max(lasts)) if lasts else None,
        },
    }


TOP_DIMENSIONS = {
    "principals": ("principal",),
    "resources": ("resource_type", "resource_name"),
    "apis": ("api",),
}


def top_lists(base: DataFrame, n: int = 10) -> dict[str, list[dict]]:
    """Top principals, resources and APIs, by volume and by denials (one Spark job)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    parts = []
    for name, columns in TOP_DIMENSIONS.items():
        label = F.to_json(F.struct(*columns), {"ignoreNullFields": "false"}).alias("label")
        by_volume = base.groupBy(*columns).agg(F.sum("events").alias("events"))
        denied = base.filter(F.col("decision") == "DENIED").groupBy(*columns)
        by_denials = denied.agg(F.sum("events").alias("events"))
        for kind, frame in ((f"{name}_by_volume", by_volume), (f"{name}_by_denials", by_denials)):
            parts.append(frame.select(F.lit(kind).alias("list"), label, "events"))
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    rank = F.row_number().over(Window.partitionBy("list").orderBy(F.desc("events"), "label"))
    rows = union.withColumn("rank", rank).filter(F.col("rank") <= n).collect()
    out: dict[str, list[dict]] = {
        f"{name}_by_{kind}": [] for name in TOP_DIMENSIONS for kind in ("volume", "denials")
    }
    for row in sorted(rows, key=lambda r: (r["list"], r["rank"])):
        out[row["list"]].append({**json.loads(row["label"]), "events": row["events"]})
    return out


def bucket_seconds(first_micros: int | None, last_micros: int | None) -> int:
    """The smallest round bucket that keeps the chart at about TIMELINE_POINTS points."""
    if first_micros is None or last_micros is None:
        return BUCKET_SECONDS[0]
    span = max(1, (last_micros - first_micros) // 1_000_000)
    for size in BUCKET_SECONDS:
        if span / size <= TIMELINE_POINTS:
            return size
    return BUCKET_SECONDS[-1]


def timeline(events: DataFrame, seconds: int) -> list[dict[str, Any]]:
    """Decisions per time bucket: allowed, denied and enforced, denied in dry-run."""
    from pyspark.sql import functions as F

    bucket = F.floor(F.unix_micros("ts") / (seconds * 1_000_000)) * seconds
    denied = F.col("decision") == "DENIED"
    rows = (
        events.groupBy(bucket.alias("bucket"))
        .agg(
            F.sum(F.when(~denied, F.col("count")).otherwise(0)).alias("allowed"),
            F.sum(F.when(denied & F.col("enforced"), F.col("count")).otherwise(0)).alias(
                "denied_enforced"
            ),
            F.sum(F.when(denied & ~F.col("enforced"), F.col("count")).otherwise(0)).alias(
                "denied_dry_run"
            ),
        )
        .orderBy("bucket")
        .collect()
    )
    return [
        {
            "start": from_micros(int(r["bucket"]) * 1_000_000),
            "allowed": r["allowed"],
            "denied_enforced": r["denied_enforced"],
            "denied_dry_run": r["denied_dry_run"],
        }
        for r in rows
    ]
