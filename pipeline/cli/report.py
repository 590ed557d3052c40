"""Access report from aclgate audit logs, on Spark.

Reads audit events (JSON Lines, plain or .gz, files or directories; Parquet too) with an
explicit schema, honours each event's `count`, and writes to --out: summary.json,
access/ and denied/ (Parquet; denied also as CSV), acl_usage/ (with --acl-file: how many
decisions each ACL decided and which decided nothing), whatif/ (with
--candidate-acl-file) and report.html, a self-contained page with charts.
Malformed lines are counted and listed with file and line number in malformed/.
Runs on local[*] by default; --master spark://host:7077 (or spark-submit) for a cluster.
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
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument(
        "--acl-file", metavar="ACLS.json", help="the policy in force: adds ACL usage"
    )
    parser.add_argument(
        "--candidate-acl-file",
        metavar="NEW.json",
        help="also run the what-if against this policy and chart the flips",
    )
    add_policy_args(parser)
    parser.add_argument("--top", type=int, default=10, metavar="N", help="top-N list length")
    add_spark_args(parser)


def run(args: argparse.Namespace) -> int:
    from aclgate.pipeline.report import ReportOptions, run_report

    try:
        kafka = kafka_from_args(args)
    except ValueError as exc:
        return usage_error("report", exc)
    opts = ReportOptions(
        audit=args.audit,
        kafka=kafka,
        out=args.out,
        acl_file=args.acl_file,
        since=args.since,
        until=args.until,
        candidate_acl_file=args.candidate_acl_file,
        super_users=args.super_users,
        allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found,
        acl_host_cidr=args.acl_host_cidr,
        top=args.top,
    )

    def body(spark, progress) -> int:
        summary = run_report(spark, opts, progress)
        d = summary["decisions"]
        print(
            f"{summary['events']:,} events ({d['ALLOWED']:,} allowed, "
            f"{summary['denied_enforced']:,} denied, {summary['denied_dry_run']:,} denied in "
            f"dry-run), {summary['inputs']['malformed']['count']:,} malformed lines"
        )
        if summary["acl_usage"]:
            u = summary["acl_usage"]
            print(
                f"ACLs: {u['acls']} in the file, {u['unused']} unused and {u['redundant']} "
                f"redundant in the window, {len(u['removable'])} removable together"
            )
        if summary["whatif"]:
            w = summary["whatif"]
            print(
                f"what-if: {w['to_denied']['events']:,} events would flip to DENIED, "
                f"{w['to_allowed']['events']:,} to ALLOWED"
            )
        print(f"report: {opts.out}/report.html")
        progress.done()
        return 0

    return run_job(args, "report", opts.stages(), body)
