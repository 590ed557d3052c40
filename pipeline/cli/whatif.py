"""Replay aclgate audit logs against a candidate ACL file, on Spark.

For the recorded traffic: the decision under the candidate policy next to the recorded one,
decided by aclgate's own authorizer on the executors (the same decisions `aclgate check`
makes). Writes to --out: summary.json, decisions/ (Parquet), to_denied/ and to_allowed/
(Parquet and CSV: the clients that would break, the requests newly allowed) and
report.html. With --fail-on-break the exit status is 1 when anything flips to DENIED.
"""

from __future__ import annotations

import argparse

from aclgate.pipeline.cli.common import (
    add_audit_args,
    add_policy_args,
    add_spark_args,
    kafka_from_args,
    run_job,
    usage_error,
)


def configure(parser: argparse.ArgumentParser) -> None:
    add_audit_args(parser)
    parser.add_argument(
        "--candidate-acl-file", required=True, metavar="NEW.json", help="the policy to try"
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    add_policy_args(parser)
    parser.add_argument(
        "--fail-on-break",
        action="store_true",
        help="exit with status 1 when any recorded allowed request would be denied",
    )
    add_spark_args(parser)


def run(args: argparse.Namespace) -> int:
    from aclgate.pipeline.whatif_job import WhatifOptions, run_whatif

    try:
        kafka = kafka_from_args(args)
    except ValueError as exc:
        return usage_error("whatif", exc)
    opts = WhatifOptions(
        audit=args.audit,
        kafka=kafka,
        out=args.out,
        candidate_acl_file=args.candidate_acl_file,
        super_users=args.super_users,
        allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found,
        acl_host_cidr=args.acl_host_cidr,
        since=args.since,
        until=args.until,
    )

    def body(spark, progress) -> int:
        summary = run_whatif(spark, opts, progress)
        for name, label in (
            ("to_denied", "would flip to DENIED (break)"),
            ("to_allowed", "would flip to ALLOWED"),
            ("dry_run_still_denied", "denied in dry-run, still denied (break once enforced)"),
            ("unchanged", "unchanged"),
        ):
            part = summary[name]
            print(f"{part['events']:>14,} events / {part['keys']:>7,} request shapes {label}")
        print(f"details: {opts.out}/report.html")
        progress.done()
        return 1 if args.fail_on_break and summary["to_denied"]["events"] else 0

    return run_job(args, "whatif", 4, body)
