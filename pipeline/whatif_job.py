"""The `aclgate whatif` job: read, decide the distinct keys with authz, write the flips."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aclgate.pipeline.acls import load_acls
from aclgate.pipeline.evaluate import Policy
from aclgate.pipeline.jobs import load_audit
from aclgate.pipeline.kafkasource import KafkaInput
from aclgate.pipeline.output import prepare_out_dir
from aclgate.pipeline.page import render_page
from aclgate.pipeline.timeutil import iso
from aclgate.pipeline.whatif import compare, policy_header, write_whatif

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from aclgate.pipeline.spark import Progress


@dataclass
class WhatifOptions:
    audit: list[str]
    out: str
    candidate_acl_file: str
    super_users: list[str] = field(default_factory=list)
    allow_everyone_if_no_acl_found: bool = False
    acl_host_cidr: bool = False  # KIP-1276, opt-in: an ACL host with / is a network
    since: datetime | None = None
    until: datetime | None = None
    kafka: KafkaInput | None = None  # the audit topic, read from earliest to latest offsets


def run_whatif(spark: SparkSession, opts: WhatifOptions, progress: Progress) -> dict[str, Any]:
    out = prepare_out_dir(opts.out)
    candidate = load_acls(opts.candidate_acl_file, opts.acl_host_cidr)
    policy = Policy(
        candidate.text,
        tuple(opts.super_users),
        opts.allow_everyone_if_no_acl_found,
        opts.acl_host_cidr,
    )
    loaded = load_audit(
        spark, opts.audit, progress, opts.since, opts.until, out / "malformed", opts.kafka
    )
    try:
        progress.step(f"deciding the distinct requests under {candidate.source} with authz")
        decisions = compare(spark, loaded.data.events, policy)
        progress.step("writing decisions and flips")
        header = {
            "tool": "aclgate whatif",
            "generated_at": iso(datetime.now(UTC)),
            "inputs": loaded.summary,
            **policy_header(candidate, policy),
        }
        summary = write_whatif(decisions, out, header)
        progress.step("writing report.html")
        context = {
            "inputs": loaded.summary,
            "generated_at": header["generated_at"],
            "time_range": {"first": loaded.summary["first_ts"], "last": loaded.summary["last_ts"]},
        }
        page = render_page("aclgate what-if", context, summary)
        (out / "report.html").write_text(page, encoding="utf-8")
        return summary
    finally:
        loaded.data.release()
