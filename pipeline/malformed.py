"""File and line number of every malformed input line.

Spark's text reader has no line number column, and numbering every line would cost a sort
of the whole input. Instead each line carries (file, split start, monotonically increasing
id): within one split the ids are consecutive in file order, so a bad line's number is its
offset inside its split plus the line counts of the earlier splits of the same file. Only
the small per-split table is aggregated; it is computed only when bad lines exist.
Parquet input carries its row index directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aclgate.pipeline.inputs import display_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from aclgate.pipeline.reader import AuditData


def malformed_lines(data: AuditData) -> DataFrame:
    """file, line (1-based; a Parquet row index + 1), reason, text of each malformed line."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lines = data.lines
    splits = (
        lines.filter(F.col("_row").isNull())
        .groupBy("_file", "_block")
        .agg(F.min("_mid").alias("_first_mid"), F.count(F.lit(1)).alias("_n"))
    )
    earlier = (
        Window.partitionBy("_file").orderBy("_block").rowsBetween(Window.unboundedPreceding, -1)
    )
    splits = splits.withColumn("_before", F.coalesce(F.sum("_n").over(earlier), F.lit(0)))
    bad = lines.filter(F.col("_error").isNotNull()).join(
        F.broadcast(splits), ["_file", "_block"], "left"
    )
    line = F.coalesce(F.col("_row") + 1, F.col("_mid") - F.col("_first_mid") + 1 + F.col("_before"))
    return bad.select(
        F.col("_file").alias("file"),
        line.alias("line"),
        F.col("_error").alias("reason"),
        F.col("_text").alias("text"),
    ).orderBy("file", "line")


def malformed_sample(frame: DataFrame, limit: int) -> list[dict[str, Any]]:
    """The first `limit` malformed lines as plain dicts, paths as the user knows them."""
    return [
        {
            "file": display_path(row["file"]),
            "line": row["line"],
            "reason": row["reason"],
            "text": row["text"],
        }
        for row in frame.limit(limit).collect()
    ]
