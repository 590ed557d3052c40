"""Propose a least-privilege ACL file from aclgate audit logs, on Spark.

The proposal allows every request the audit saw allowed and nothing observed denied by
policy: no DESCRIBE where READ/WRITE already imply it; topics or groups collapse into a
PREFIXED ACL only when every resource with that prefix seen anywhere in the audit was
accessed by that principal with that operation (and at least --min-prefix-topics of them);
host `*` unless a denial from another host forces pinning. The proposal is checked with
aclgate's own authorizer before it is written. Denials recorded in dry-run mode count as
legitimate traffic only with --include-dry-run-denials. Load the result with
`aclgate acls --acl-file OUT --list`; try it first with `aclgate whatif`.
"""

from __future__ import annotations

import argparse

from aclgate.pipeline.cli.common import (
    add_audit_args,
    add_spark_args,
    add_super_user_arg,
    kafka_from_args,
    run_job,
    usage_error,
)


def configure(parser: argparse.ArgumentParser) -> None:
    add_audit_args(parser)
    parser.add_argument("--out", required=True, metavar="ACLS.json", help="ACL file to write")
    parser.add_argument(
        "--include-dry-run-denials",
        action="store_true",
        help="treat requests denied while the proxy ran in dry-run mode as legitimate",
    )
    parser.add_argument(
        "--min-prefix-topics",
        type=int,
        default=3,
        metavar="N",
        help="collapse topics/groups into a PREFIXED ACL only if it covers N or more (0: never)",
    )
    add_super_user_arg(
        parser, "a super user of the target deployment: its traffic needs no ACLs (repeatable)"
    )
    parser.add_argument("--explain", metavar="FILE", help="also write the reasoning as JSON")
    add_spark_args(parser)


def run(args: argparse.Namespace) -> int:
    from aclgate.pipeline.advise import AdviseOptions, run_advise

    try:
        kafka = kafka_from_args(args)
    except ValueError as exc:
        return usage_error("advise", exc)
    opts = AdviseOptions(
        audit=args.audit,
        kafka=kafka,
        out=args.out,
        include_dry_run_denials=args.include_dry_run_denials,
        min_prefix=args.min_prefix_topics,
        super_users=args.super_users,
        since=args.since,
        until=args.until,
        explain=args.explain,
    )

    def body(spark, progress) -> int:
        summary = run_advise(spark, opts, progress)
        width = max((len(p) for p in summary["principals"]), default=10)
        for principal, info in summary["principals"].items():
            print(f"{principal:<{width}}  {info['shape']}")
        print(
            f"{summary['acls']} ACLs ({summary['prefixed_acls']} prefixed) for "
            f"{summary['allowed_keys']:,} allowed request shapes written to {opts.out}"
        )
        for conflict in summary["conflicts"]:
            print(f"conflict (stays allowed): {conflict['why']}")
        progress.done()
        return 0

    return run_job(args, "advise", 3, body)
