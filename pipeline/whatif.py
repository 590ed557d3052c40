"""What-if: the recorded traffic decided again under a candidate policy.

Recorded decisions are grouped by decision key (and recorded outcome); the distinct keys are
decided by `authz/` on the executors (evaluate.py) and joined back, so every flip carries how
many events, which clients and APIs, and when. "to_denied" are the clients that would
break; "to_allowed" the requests the candidate would newly let through; "dry_run_still_denied"
were only forwarded because the proxy ran in dry-run mode and would break once it enforces.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.evaluate import Policy, evaluate_keys
from pipeline.output import write_csv, write_json, write_parquet
from pipeline.schema import KEY_FIELDS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CLIENT_LIST_LIMIT = 20
LIST_LIMIT = 200


def recorded_keys(events: DataFrame) -> DataFrame:
    """Events per key and recorded outcome, with the clients and APIs that sent them."""
    from pyspark.sql import functions as F

    return events.groupBy(*KEY_FIELDS, "decision", "enforced").agg(
        F.sum("count").alias("count"),
        F.slice(F.array_sort(F.collect_set("client_id")), 1, CLIENT_LIST_LIMIT).alias("client_ids"),
        F.array_sort(F.collect_set("api")).alias("apis"),
        F.min(F.coalesce("ts_first", "ts")).alias("first_seen"),
        F.max("ts").alias("last_seen"),
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


def _flip_rows(frame: DataFrame, limit: int) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    rows = frame.orderBy(F.desc("count"), *KEY_FIELDS).limit(limit).collect()
    out = []
    for row in rows:
        item = {name: row[name] for name in KEY_FIELDS}
        item.update(
            count=row["count"],
            recorded_decision=row["recorded_decision"],
            enforced=row["enforced"],
            candidate_decision=row["candidate_decision"],
            candidate_rule=row["candidate_rule"],
            candidate_acl=row["candidate_acl"].asDict() if row["candidate_acl"] else None,
            client_ids=list(row["client_ids"] or []),
            apis=list(row["apis"] or []),
        )
        out.append(item)
    return out


def _by_principal(frame: DataFrame) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    rows = (
        frame.groupBy("principal")
        .agg(F.sum("count").alias("events"), F.count(F.lit(1)).alias("keys"))
        .orderBy(F.desc("events"), "principal")
        .limit(LIST_LIMIT)
        .collect()
    )
    return [row.asDict() for row in rows]


def write_whatif(
    decisions: DataFrame, out: Path, header: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write decisions/, to_denied/, to_allowed/ (Parquet + CSV) and summary.json under `out`.

    `header` (tool, inputs, candidate file...) leads the summary; the summary is returned.
    """
    from pyspark.sql import functions as F

    decisions = decisions.cache()
    try:
        write_parquet(decisions, out / "decisions")
        summary: dict[str, Any] = dict(header or {})
        counts = decisions.groupBy("flip").agg(
            F.sum("count").alias("events"), F.count(F.lit(1)).alias("keys")
        )
        by_flip = {row["flip"]: (row["events"], row["keys"]) for row in counts.collect()}
        total = decisions.agg(
            F.coalesce(F.sum("count"), F.lit(0)).alias("events"),
            F.countDistinct(*KEY_FIELDS).alias("keys"),
            F.count(F.when(F.col("candidate_rule") == "INVALID_KEY", 1)).alias("invalid"),
        ).first()
        summary["events"] = total["events"]
        summary["decision_keys"] = total["keys"]
        summary["invalid_keys"] = total["invalid"]
        for name in ("to_denied", "to_allowed", "dry_run_still_denied"):
            events, keys = by_flip.get(name, (0, 0))
            summary[name] = {"events": events, "keys": keys}
        unchanged_events, unchanged_keys = by_flip.get(None, (0, 0))
        summary["unchanged"] = {"events": unchanged_events, "keys": unchanged_keys}
        for name in ("to_denied", "to_allowed", "dry_run_still_denied"):
            flips = decisions.filter(F.col("flip") == name).drop("flip")
            if name != "dry_run_still_denied":
                write_parquet(flips, out / name / "parquet")
                write_csv(flips.drop("candidate_acl"), out / name / "csv")
            summary[f"{name}_list"] = _flip_rows(flips, LIST_LIMIT)
            summary[f"{name}_by_principal"] = _by_principal(flips)
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
    }
