"""acl_usage/: how many decisions each ACL decided, which decided nothing, which are redundant.

The audit's `acl` field names the binding that decided (for rule ACL). Joining it with the
ACL file gives every ACL's named use; ACLs named by the audit but absent from the file (the
policy changed since) are kept with `in_acl_file = false`.

When several ACLs could decide the same request the proxy names one of them, so the named
count alone cannot tell an ACL that decides nothing from one that is shadowed. Every distinct
request of the window is therefore asked again under the ACL file (pipeline/deciders.py) for
all of its deciders, and each ACL of the file gets a status:
  used       it alone decides some requests: removing it changes decisions
  redundant  it decides requests, but each of them is also decided the same way by another
             ACL (`covered_by`, most covering first): removing it alone changes nothing,
             removing it with its cover does
  unused     it decides no request of the window
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aclgate.pipeline.deciders import deciders_table
from aclgate.pipeline.schema import ACL_FIELDS, KEY_FIELDS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from aclgate.pipeline.acls import AclSnapshot
    from aclgate.pipeline.evaluate import Policy

STATUSES = ("used", "redundant", "unused")


def _decided(spark: SparkSession, base: DataFrame, policy: Policy) -> DataFrame:
    """Per ACL of the file: events it decides (`would_decide`), events it alone decides
    (`sole`), and the other ACLs deciding its requests (`covered_by`, most events first)."""
    from pyspark.sql import functions as F

    per_key = base.groupBy(*KEY_FIELDS).agg(F.sum("events").alias("events"))
    table = deciders_table(spark, per_key, policy).join(per_key, list(KEY_FIELDS))
    exploded = table.select(
        "events",
        "deciders",
        F.size("deciders").alias("n"),
        F.explode("deciders").alias("acl"),
    )
    own = exploded.groupBy("acl").agg(
        F.sum("events").alias("would_decide"),
        F.sum(F.when(F.col("n") == 1, F.col("events")).otherwise(0)).alias("sole"),
    )
    pairs = (
        exploded.select("acl", "events", F.explode("deciders").alias("other"))
        .filter(F.col("other") != F.col("acl"))
        .groupBy("acl", "other")
        .agg(F.sum("events").alias("events"))
    )
    covers = pairs.groupBy("acl").agg(
        F.sort_array(F.collect_list(F.struct(-F.col("events"), F.col("other")))).alias("c")
    )
    covered_by = F.transform(F.coalesce("c", F.array()), lambda x: x["other"])
    return own.join(covers, "acl", "left").select(
        *[F.col("acl")[name].alias(name) for name in ACL_FIELDS],
        "would_decide",
        "sole",
        covered_by.alias("covered_by"),
    )


def named_usage(
    frame: DataFrame, events: Column, first: Column, last: Column, by: Sequence[str] = ()
) -> DataFrame:
    """Per ACL the audit names as deciding (rule ACL), and per `by` column (the stream's
    window): decisions, allowed, denied, first and last use. The report runs it over its
    grouped events, `aclgate stream` over each window of raw events.

    Other events are not filtered out first but fall into one group without an ACL, dropped
    after the aggregation: a filter before it would be moved ahead of the stream's watermark,
    which would then follow only ACL-decided events (and leave windows open)."""
    from pyspark.sql import functions as F

    named = (F.col("rule") == "ACL") & F.col("acl").isNotNull()
    denied = F.col("decision") == "DENIED"
    return (
        frame.select(
            *by,
            *[F.when(named, F.col("acl")[name]).alias(name) for name in ACL_FIELDS],
            "decision",
            F.when(named, events).otherwise(0).alias("_events"),
            first.alias("_first"),
            last.alias("_last"),
        )
        .groupBy(*by, *ACL_FIELDS)
        .agg(
            F.sum("_events").alias("decisions"),
            F.sum(F.when(~denied, F.col("_events")).otherwise(0)).alias("allowed"),
            F.sum(F.when(denied, F.col("_events")).otherwise(0)).alias("denied"),
            F.min("_first").alias("first_used"),
            F.max("_last").alias("last_used"),
        )
        .filter(F.col("decisions") > 0)
    )


def acl_usage_table(
    spark: SparkSession, base: DataFrame, acls: AclSnapshot, policy: Policy
) -> DataFrame:
    """One row per ACL (file or audit): named decisions, allowed, denied, first/last use, and
    status (used, redundant, unused; null when not in the file) with the covering ACLs."""
    from pyspark.sql import functions as F

    schema = ", ".join(f"{name} string" for name in ACL_FIELDS) + ", _in_file boolean"
    in_file = spark.createDataFrame(
        [(*(entry[name] for name in ACL_FIELDS), True) for entry in acls.entries], schema
    ).dropDuplicates(list(ACL_FIELDS))
    used = named_usage(base, F.col("events"), F.col("first_seen"), F.col("last_seen"))
    joined = in_file.join(used, list(ACL_FIELDS), "full_outer").join(
        _decided(spark, base, policy), list(ACL_FIELDS), "left"
    )
    decisions = F.coalesce("decisions", F.lit(0))
    in_acl_file = F.coalesce("_in_file", F.lit(False))
    would = F.coalesce("would_decide", F.lit(0))
    status = (
        F.when(~in_acl_file, F.lit(None))
        .when(would == 0, "unused")
        .when(F.coalesce("sole", F.lit(0)) == 0, "redundant")
        .otherwise("used")
    )
    return joined.select(
        *ACL_FIELDS,
        in_acl_file.alias("in_acl_file"),
        decisions.alias("decisions"),
        F.coalesce("allowed", F.lit(0)).alias("allowed"),
        F.coalesce("denied", F.lit(0)).alias("denied"),
        "first_used",
        "last_used",
        would.alias("would_decide"),
        F.coalesce("sole", F.lit(0)).alias("sole"),
        status.alias("status"),
        F.coalesce(status == "unused", F.lit(False)).alias("unused"),
        F.coalesce("covered_by", F.array()).alias("covered_by"),
    ).orderBy(F.desc("decisions"), *ACL_FIELDS)


def usage_summary(usage: DataFrame, limit: int = 200) -> dict[str, Any]:
    """Counts by status, the most used ACLs, and the unused / redundant / not-in-file ones
    (each list capped). The usage table has one row per ACL, small enough to collect once.
    """
    rows = [row.asDict(recursive=True) for row in usage.drop("first_used", "last_used").collect()]
    in_file = [r for r in rows if r["in_acl_file"]]
    by_status = {s: [r for r in in_file if r["status"] == s] for s in STATUSES}
    return {
        "acls": len(in_file),
        **{s: len(by_status[s]) for s in STATUSES},
        "not_in_acl_file": len(rows) - len(in_file),
        "most_used": [r for r in rows if r["decisions"] > 0][:limit],
        "unused_acls": by_status["unused"][:limit],
        "redundant_acls": by_status["redundant"][:limit],
        "not_in_acl_file_acls": [r for r in rows if not r["in_acl_file"]][:limit],
    }


def removal_plan(usage: DataFrame, base: DataFrame, acls: AclSnapshot, policy: Policy) -> list:
    """The ACLs that can go together without changing any decision of the window
    (advisor.removals): unused ones first, then redundant ones least named first, so of two
    ACLs that cover each other the one the proxy names stays. Each with its status and, for a
    redundant one, the ACL that keeps deciding its requests."""
    from pyspark.sql import functions as F

    from aclgate.pipeline.advisor import Key, removals

    rows = [
        r.asDict(recursive=True)
        for r in usage.filter(F.col("status").isin("unused", "redundant")).collect()
    ]
    rows.sort(
        key=lambda r: (
            r["status"] != "unused",
            r["decisions"],
            r["would_decide"],
            *(r[name] for name in ACL_FIELDS),
        )
    )
    keys = [Key.of(r) for r in base.select(*KEY_FIELDS).distinct().collect()]
    chosen = removals(
        list(acls.entries),
        keys,
        [{name: r[name] for name in ACL_FIELDS} for r in rows],
        policy.super_users,
        policy.allow_everyone_if_no_acl_found,
        policy.cidr_hosts,
    )
    by_acl = {tuple(r[name] for name in ACL_FIELDS): r for r in rows}
    removed = {tuple(entry[name] for name in ACL_FIELDS) for entry in chosen}
    plan = []
    for entry in chosen:
        row = by_acl[tuple(entry[name] for name in ACL_FIELDS)]
        covers = [c for c in row["covered_by"] if tuple(c[n] for n in ACL_FIELDS) not in removed]
        plan.append({**entry, "status": row["status"], "covered_by": covers[0] if covers else None})
    return plan
