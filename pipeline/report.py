"""The `aclgate report` job: access, denials, ACL usage (and optionally a what-if) from audit logs.

Output layout under --out (see docs/pipeline.md):
  summary.json      totals, time range, top lists, timeline, ACL-usage and malformed-line summary
  access/           Parquet: principal, host, operation, resource, decision, count, first/last seen
  denied/parquet/   Parquet: denied request shapes, enforced or dry-run, client id, API
  denied/csv/       the same as one CSV file with a header
  acl_usage/        Parquet, with --acl-file: every ACL's decisions and status (used,
                    redundant with the covering ACLs, unused)
  whatif/           with --candidate-acl-file: the what-if outputs (see whatif.py)
  malformed/        JSON Lines, when malformed lines exist: file, line, reason, text
  report.html       the page a person reads
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aclgate.pipeline.acl_usage import acl_usage_table, removal_plan, usage_summary
from aclgate.pipeline.acls import load_acls
from aclgate.pipeline.aggregate import (
    access_table,
    bucket_seconds,
    denied_table,
    grouped_events,
    timeline,
    top_lists,
    totals,
)
from aclgate.pipeline.evaluate import Policy
from aclgate.pipeline.jobs import load_audit
from aclgate.pipeline.kafkasource import KafkaInput
from aclgate.pipeline.output import prepare_out_dir, write_csv, write_json, write_parquet
from aclgate.pipeline.page import render_page
from aclgate.pipeline.timeutil import iso, parse_user_time, to_micros
from aclgate.pipeline.whatif import compare, policy_header, write_whatif

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from aclgate.pipeline.spark import Progress


@dataclass
class ReportOptions:
    audit: list[str]
    out: str
    acl_file: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    candidate_acl_file: str | None = None
    super_users: list[str] = field(default_factory=list)
    allow_everyone_if_no_acl_found: bool = False
    acl_host_cidr: bool = False  # KIP-1276, opt-in: an ACL host with / is a network
    top: int = 10
    kafka: KafkaInput | None = None  # the audit topic, read from earliest to latest offsets

    def stages(self) -> int:
        return 4 + bool(self.acl_file) + bool(self.candidate_acl_file)


def _micros(text: str | None) -> int | None:
    return to_micros(parse_user_time(text)) if text else None


def run_report(spark: SparkSession, opts: ReportOptions, progress: Progress) -> dict[str, Any]:
    """Run the whole report; returns the summary that was written to summary.json."""
    from pyspark import StorageLevel

    out = prepare_out_dir(opts.out)
    cidr = opts.acl_host_cidr
    acls = load_acls(opts.acl_file, cidr) if opts.acl_file else None  # fail before Spark work
    candidate = load_acls(opts.candidate_acl_file, cidr) if opts.candidate_acl_file else None
    settings = (tuple(opts.super_users), opts.allow_everyone_if_no_acl_found, cidr)
    loaded = load_audit(
        spark,
        opts.audit,
        progress,
        opts.since,
        opts.until,
        out / "malformed",
        opts.kafka,
        fine=True,
    )
    events = loaded.data.events
    assert loaded.fine is not None  # asked for
    base = grouped_events(loaded.fine).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        progress.step("aggregating access")
        write_parquet(access_table(base), out / "access")
        summary: dict[str, Any] = {
            "tool": "aclgate report",
            "generated_at": iso(datetime.now(UTC)),
            "inputs": loaded.summary,
        }
        summary.update(totals(base))
        summary["top"] = top_lists(base, opts.top)

        progress.step("collecting denials and the timeline")
        denied = denied_table(loaded.fine).cache()
        write_parquet(denied, out / "denied" / "parquet")
        write_csv(denied, out / "denied" / "csv")
        denied.unpersist()
        rng = summary["time_range"]
        seconds = bucket_seconds(_micros(rng["first"]), _micros(rng["last"]))
        summary["timeline"] = {"bucket_seconds": seconds, "points": timeline(events, seconds)}

        summary["acl_usage"] = None
        if acls is not None:
            progress.step(
                f"matching decisions with the {len(acls.entries)} ACL(s) of {acls.source}"
            )
            policy = Policy(acls.text, *settings)
            usage = acl_usage_table(spark, base, acls, policy).cache()
            write_parquet(usage, out / "acl_usage")
            summary["acl_usage"] = {"acl_file": acls.source, **usage_summary(usage)}
            summary["acl_usage"]["removable"] = removal_plan(usage, base, acls, policy)
            usage.unpersist()

        whatif = None
        summary["whatif"] = None
        if candidate is not None:
            progress.step(f"what-if under {candidate.source}")
            policy = Policy(candidate.text, *settings)
            whatif = write_whatif(
                compare(spark, events, policy),
                out / "whatif",
                {"tool": "aclgate report --candidate-acl-file", **policy_header(candidate, policy)},
            )
            summary["whatif"] = {
                k: whatif[k]
                for k in ("to_denied", "to_allowed", "dry_run_still_denied", "unchanged")
            }

        progress.step("writing summary.json and report.html")
        write_json(summary, out / "summary.json")
        html = render_page("aclgate access report", summary, whatif)
        (out / "report.html").write_text(html, encoding="utf-8")
        return summary
    finally:
        base.unpersist()
        loaded.release()
