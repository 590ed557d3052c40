"""Generate a synthetic aclgate audit log for demos, tests and benchmarks.

Several teams with prefixed topic families and consumer groups, transactional producers, a
super user, denials (a legacy job, anonymous clients, a team whose ACLs are missing), dry-run
periods and aggregated allowed events. Decisions are made by aclgate's own authorizer under
the policy written with --acls-out; --candidate-out writes a tightened policy to try with
`aclgate whatif`. No Spark needed.
"""

from __future__ import annotations

import argparse
import sys
import time

from aclgate.pipeline.cli.common import _time


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, required=True, metavar="N", help="lines to write")
    parser.add_argument(
        "--out",
        required=True,
        metavar="PATH",
        help="a file (*.jsonl or *.jsonl.gz) or a directory for --files parts",
    )
    parser.add_argument("--files", type=int, default=4, metavar="K", help="parts in a directory")
    parser.add_argument("--gzip", action="store_true", help="gzip the parts")
    parser.add_argument(
        "--start",
        type=_time,  # a bad time is a usage error, not a traceback
        default="2026-11-20T00:00:00Z",
        metavar="TS",
        help="first event time (UTC)",
    )
    parser.add_argument("--hours", type=float, default=24.0, help="time span of the log")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--jobs", type=int, metavar="N", help="writer processes (default: CPUs)")
    parser.add_argument("--acls-out", metavar="ACLS.json", help="write the policy in force")
    parser.add_argument(
        "--candidate-out", metavar="NEW.json", help="write a tightened candidate policy"
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from aclgate.authz.aclfile import dump_acl_file
    from aclgate.authz.model import AclBinding
    from aclgate.pipeline.sample import SampleSpec, policy_files, write_sample
    from aclgate.pipeline.timeutil import to_micros

    if args.events < 0 or args.files < 1:
        print("aclgate audit-sample: --events must be >= 0 and --files >= 1", file=sys.stderr)
        return 2
    started = time.monotonic()
    spec = SampleSpec(args.events, to_micros(args.start), args.hours, args.seed)
    paths = write_sample(spec, args.out, args.files, args.gzip, args.jobs)
    current, candidate = policy_files()
    for target, entries in ((args.acls_out, current), (args.candidate_out, candidate)):
        if target:
            Path(target).write_text(dump_acl_file(AclBinding.from_dict(e) for e in entries))
    elapsed = time.monotonic() - started
    print(
        f"wrote {args.events:,} events to {len(paths)} file(s) under {args.out} in {elapsed:.1f} s"
    )
    return 0
