"""acl_usage/: how many decisions each ACL decided, and which decided nothing.

The audit's `acl` field names the binding that decided (for rule ACL). Joining it with the
ACL file gives every ACL's use; ACLs named by the audit but absent from the file (the
policy changed since) are kept with `in_acl_file = false`. When several ACLs could decide
the same request the proxy names one of them, so an "unused" ACL may be shadowed by an
equivalent one: `aclgate whatif` with the ACL removed says whether anything would break.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aclgate.pipeline.schema import ACL_FIELDS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from aclgate.pipeline.acls import AclSnapshot


def acl_usage_table(spark: SparkSession, base: DataFrame, acls: AclSnapshot) -> DataFrame:
    """One row per ACL (file or audit): decisions, allowed, denied, first/last use, unused."""
    from pyspark.sql import functions as F

    schema = ", ".join(f"{name} string" for name in ACL_FIELDS) + ", _in_file boolean"
    in_file = spark.createDataFrame(
        [(*(entry[name] for name in ACL_FIELDS), True) for entry in acls.entries], schema
    ).dropDuplicates(list(ACL_FIELDS))
    denied = F.col("decision") == "DENIED"
    used = (
        base.filter((F.col("rule") == "ACL") & F.col("acl").isNotNull())
        .select(
            *[F.col("acl")[name].alias(name) for name in ACL_FIELDS],
            "decision",
            "events",
            "first_seen",
            "last_seen",
        )
        .groupBy(*ACL_FIELDS)
        .agg(
            F.sum("events").alias("decisions"),
            F.sum(F.when(~denied, F.col("events")).otherwise(0)).alias("allowed"),
            F.sum(F.when(denied, F.col("events")).otherwise(0)).alias("denied"),
            F.min("first_seen").alias("first_used"),
            F.max("last_seen").alias("last_used"),
        )
    )
    joined = in_file.join(used, list(ACL_FIELDS), "full_outer")
    decisions = F.coalesce("decisions", F.lit(0))
    in_acl_file = F.coalesce("_in_file", F.lit(False))
    return joined.select(
        *ACL_FIELDS,
        in_acl_file.alias("in_acl_file"),
        decisions.alias("decisions"),
        F.coalesce("allowed", F.lit(0)).alias("allowed"),
        F.coalesce("denied", F.lit(0)).alias("denied"),
        "first_used",
        "last_used",
        (in_acl_file & (decisions == 0)).alias("unused"),
    ).orderBy(F.desc("decisions"), *ACL_FIELDS)


def usage_summary(usage: DataFrame, limit: int = 200) -> dict[str, Any]:
    """Counts, the most used ACLs, and the unused / not-in-file ones (each list capped).

    The usage table has one row per ACL, small enough to collect once.
    """
    rows = [row.asDict() for row in usage.drop("first_used", "last_used").collect()]
    in_file = [r for r in rows if r["in_acl_file"]]
    unused = [r for r in in_file if r["unused"]]
    return {
        "acls": len(in_file),
        "used": len(in_file) - len(unused),
        "unused": len(unused),
        "not_in_acl_file": len(rows) - len(in_file),
        "most_used": [r for r in rows if r["decisions"] > 0][:limit],
        "unused_acls": unused[:limit],
        "not_in_acl_file_acls": [r for r in rows if not r["in_acl_file"]][:limit],
    }
