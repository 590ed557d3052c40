"""What-if: the recorded traffic decided again under a candidate policy.

Recorded decisions are grouped by decision key (and recorded outcome); the distinct keys are
decided by `authz/` on the executors (evaluate.py) and joined back, so every flip carries how
many events, which clients and APIs, and when. The key holds the session's groups
(schema.KEY_FIELDS): a request its group's ACL allowed is decided again with that group. "to_denied" are the clients that would
break; "to_allowed" the requests the candidate would newly let through; "dry_run_still_denied"
were only forwarded because the proxy ran in dry-run mode and would break once it enforces.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aclgate.pipeline.evaluate import INVALID_RULE, Policy, evaluate_keys
from aclgate.pipeline.output import write_csv, write_json, write_parquet
from aclgate.pipeline.schema import KEY_FIELDS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CLIENT_LIST_LIMIT = 20
LIST_LIMIT = 200


def recorded_keys(events: DataFrame) -> DataFrame:
    """Events per key and recorded outcome, with the clients and APIs that sent them.

    Grouped in two steps: a plain (code-generated) aggregation that keeps client id and API,
    then the small result grouped again with collect_set, which is slow on millions of rows.
    """
    from pyspark.sql import functions as F

    outcome = (*KEY_FIELDS, "decision", "enforced")
    per_client = events.groupBy(*outcome, "client_id", "api").agg(
        F.sum("count").alias("count"),
        F.min(F.coalesce("ts_first", "ts")).alias("first_seen"),
        F.max("ts").alias("last_seen"),
    )
    return per_client.groupBy(*outcome).agg(
        F.sum("count").alias("count"),
        F.slice(F.array_sort(F.collect_set("client_id")), 1, CLIENT_LIST_LIMIT).alias("client_ids"),
        F.array_sort(F.collect_set("api")).alias("apis"),
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
    )


def compare(spark: SparkSession, events: DataFrame, policy: Policy) -> DataFrame:
    """decisions/: recorded vs candidate decision per key and recorded outcome, with `flip`."""
    from pyspark.sql import functions as F

    recorded = recorded_keys(events)
    evaluated = evaluate_keys(spark, recorded, policy)
    joined = recorded.join(evaluated, list(KEY_FIELDS), "left")
    was, now = F.col("decision"), F.col("candidate_decision")
    flip = (
        F.when((was == "ALLOWED") & (now == "DENIED"), F.lit("to_denied"))
        .when((was == "DENIED") & (now == "ALLOWED"), F.lit("to_allowed"))
        .when((was == "DENIED") & ~F.col("enforced") & (now == "DENIED"), "dry_run_still_denied")
    )
    return joined.select(
        *KEY_FIELDS,
        F.col("decision").alias("recorded_decision"),
        "enforced",
        "candidate_decision",
        "candidate_rule",
        "candidate_acl",
        flip.alias("flip"),
        "count",
        "client_ids",
        "apis",
        "first_seen",
        "last_seen",
    )


FLIPS = ("to_denied", "to_allowed", "dry_run_still_denied")


def _row_dict(row: Any) -> dict[str, Any]:
    item = row.asDict()
    acl = item.get("candidate_acl")
    item["candidate_acl"] = acl.asDict() if acl is not None else None
    item["client_ids"] = list(item.get("client_ids") or [])
    item["apis"] = list(item.get("apis") or [])
    item.pop("rank", None)
    for moment in ("first_seen", "last_seen"):
        item.pop(moment, None)
    return item


def _flip_lists(decisions: DataFrame, limit: int) -> dict[str, list[dict[str, Any]]]:
    """The largest flips of each kind, and flips per principal (two Spark jobs)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    flips = decisions.filter(F.col("flip").isNotNull())
    by_count = Window.partitionBy("flip").orderBy(F.desc("count"), *KEY_FIELDS)
    top = flips.withColumn("rank", F.row_number().over(by_count)).filter(F.col("rank") <= limit)
    per_principal = flips.groupBy("flip", "principal").agg(
        F.sum("count").alias("events"), F.countDistinct(*KEY_FIELDS).alias("keys")
    )
    by_events = Window.partitionBy("flip").orderBy(F.desc("events"), "principal")
    ranked = per_principal.withColumn("rank", F.row_number().over(by_events))
    out: dict[str, list[dict[str, Any]]] = {}
    for name in FLIPS:
        out[f"{name}_list"] = []
        out[f"{name}_by_principal"] = []
    for row in sorted(top.collect(), key=lambda r: r["rank"]):
        out[f"{row['flip']}_list"].append(_row_dict(row))
    for row in sorted(ranked.filter(F.col("rank") <= limit).collect(), key=lambda r: r["rank"]):
        out[f"{row['flip']}_by_principal"].append(
            {"principal": row["principal"], "events": row["events"], "keys": row["keys"]}
        )
    return out


def _flip_counts(decisions: DataFrame) -> dict[str, Any]:
    """Events and distinct keys per flip kind and in total (one Spark job)."""
    from pyspark.sql import functions as F

    rows = (
        decisions.rollup("flip")
        .agg(
            F.grouping("flip").alias("total"),
            F.coalesce(F.sum("count"), F.lit(0)).alias("events"),
            F.countDistinct(*KEY_FIELDS).alias("keys"),
            F.count(F.when(F.col("candidate_rule") == INVALID_RULE, 1)).alias("invalid"),
        )
        .collect()
    )
    summary: dict[str, Any] = {"events": 0, "decision_keys": 0, "invalid_keys": 0}
    for name in (*FLIPS, "unchanged"):
        summary[name] = {"events": 0, "keys": 0}
    for row in rows:
        if row["total"]:
            summary.update(
                events=row["events"], decision_keys=row["keys"], invalid_keys=row["invalid"]
            )
        else:
            summary[row["flip"] or "unchanged"] = {"events": row["events"], "keys": row["keys"]}
    return summary


def write_whatif(
    decisions: DataFrame, out: Path, header: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write decisions/ (Parquet), to_denied/ and to_allowed/ (CSV) and summary.json to `out`.

    `header` (tool, inputs, candidate file...) leads the summary; the summary is returned.
    """
    from pyspark.sql import functions as F

    decisions = decisions.cache()
    try:
        write_parquet(decisions, out / "decisions")
        summary: dict[str, Any] = dict(header or {})
        summary.update(_flip_counts(decisions))
        for name in ("to_denied", "to_allowed"):
            flips = decisions.filter(F.col("flip") == name).drop("flip", "candidate_acl")
            write_csv(flips.orderBy(F.desc("count"), *KEY_FIELDS), out / name)
        summary.update(_flip_lists(decisions, LIST_LIMIT))
        write_json(summary, out / "summary.json")
        return summary
    finally:
        decisions.unpersist()


def policy_header(candidate: Any, policy: Policy) -> dict[str, Any]:
    """What the candidate decisions were computed with, for the summary."""
    return {
        "candidate_acl_file": candidate.source,
        "candidate_acls": len(candidate.entries),
        "super_users": list(policy.super_users),
        "allow_everyone_if_no_acl_found": policy.allow_everyone_if_no_acl_found,
        "acl_host_cidr": policy.cidr_hosts,
    }
